"""The loaders under fuzzing (run.py, targets.py): every committed seed and every input that once
failed (regressions/<target>/) runs through its target in this process, and each target is fuzzed
by atheris for a few seconds from its seeds (FUZZ_SECONDS, default 10 each: `make test`'s bounded
run; bench/RESULTS.md records ten minutes of each)."""

import os
import subprocess
import sys

import pytest
from fuzz.targets import CORPORA, TARGETS, run_one

HERE = os.path.dirname(os.path.abspath(__file__))
REGRESSIONS = os.path.join(HERE, "regressions")
SECONDS = int(os.environ.get("FUZZ_SECONDS", "10"))


def inputs(root: str) -> list[tuple[str, str]]:
    return [(target, os.path.join(root, target, name)) for target in sorted(TARGETS)
            if os.path.isdir(os.path.join(root, target)) for name in sorted(os.listdir(os.path.join(root, target)))]


def test_every_target_has_seeds():
    assert {target for target, _ in inputs(CORPORA)} == set(TARGETS)


@pytest.mark.parametrize("target,path", inputs(CORPORA) + inputs(REGRESSIONS),
                         ids=lambda value: os.path.basename(value) if os.sep in str(value) else value)
def test_seed_or_regression_is_refused_or_read(target, path):
    """A TesseraError or nothing: run_one lets every other exception through."""
    with open(path, "rb") as f:
        run_one(target, f.read())


def test_seeds_are_read_whole():
    """The seeds are valid files (a fuzzer mutates working inputs): each target reads them without error."""
    from fuzz import targets
    from tessera.frontend import GGUFError

    for target, path in inputs(CORPORA):
        with open(path, "rb") as f:
            data = f.read()
        if os.path.basename(path) == "vocabulary-only.gguf":  # a tokenizer, then no model: refused by name
            with pytest.raises(GGUFError, match="embedding_length is missing"):
                targets.TARGETS[target](data)
            continue
        try:
            targets.TARGETS[target](data)
        except Exception as error:
            pytest.fail(f"seed {path} no longer loads ({error}): after a format change, rewrite the seeds with "
                        "`.venv/bin/python tests/fuzz/make_seeds.py`")


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_bounded_fuzzing_run_finds_nothing(target, tmp_path):
    result = subprocess.run([sys.executable, os.path.join(HERE, "run.py"), target, "--seconds", str(SECONDS),
                             "--scratch", str(tmp_path)], capture_output=True, text=True, timeout=SECONDS + 240)
    failures = [name for name in os.listdir(tmp_path) if name.startswith(("crash-", "timeout-", "oom-", "leak-"))]
    assert result.returncode == 0 and not failures, f"{failures}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert "Done" in result.stderr and "stat::number_of_executed_units" in result.stderr
