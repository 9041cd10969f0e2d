"""A wheel of Tessera works outside the repository: installed into a fresh virtual environment, it
compiles, bundles (the chat page and the browser runtime ship inside it) and chats."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest
from fixtures.tiny_gguf import write_tiny_gguf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "node_modules", "build", "dist", "__pycache__", "*.egg-info",
                                    ".pytest_cache", ".hypothesis")


def run(args, **kwargs):
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300, **kwargs)
    assert result.returncode == 0, f"{' '.join(map(str, args))} failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.mark.slow
def test_a_wheel_installed_outside_the_checkout_compiles_bundles_and_chats(tmp_path):
    # Built from a copy of the checkout: setuptools leaves build/lib behind, and a later wheel would
    # carry whatever stale file is there. The runtime's src/vendor (written by `make setup`) is copied.
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE, symlinks=True)
    wheels = tmp_path / "wheels"
    run([sys.executable, "-m", "pip", "wheel", source, "--no-deps", "--no-build-isolation", "--quiet", "-w", wheels])
    [wheel] = wheels.glob("tessera-*.whl")

    # A fresh environment with the wheel alone; its dependencies (numpy, wgpu, tokenizers ...) come from
    # this environment's site-packages through a .pth file, rather than from PyPI again.
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--quiet", wheel])
    site_packages = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    with open(os.path.join(site_packages, "dependencies.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")

    work = tmp_path / "work"  # outside the repository: nothing can be found through a relative path
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TESSERA_CACHE"] = str(tmp_path / "cache")
    where = run([python, "-c", "import tessera, tessera.app.bundle as b; "
                 "print(tessera.__file__, b.runtime_folder(), b.web_folder(), sep='\\n')"], cwd=work, env=env)
    assert all(line.startswith(site_packages) for line in where.stdout.split()), where.stdout

    gguf = write_tiny_gguf(str(work / "tiny.gguf"))
    tessera = venv / "bin" / "tessera"
    compiled = run([tessera, "compile", gguf, "-o", "compiled", "--context", "64", "--quiet"], cwd=work, env=env)
    assert compiled.stdout == "compiled\n" and compiled.stderr == ""
    assert (work / "compiled" / "executable.json").is_file()

    run([tessera, "bundle", gguf, "-o", "site", "--context", "64", "--targets", "webgpu"], cwd=work, env=env)
    site = work / "site"
    for name in ("index.html", "chat.js", "runtime/tessera.js", "runtime/devices/index.js",
                 "runtime/vendor/tokenizers.js", "models/tiny/bundle.json", "models/tiny/webgpu/executable.json"):
        assert (site / name).is_file(), name
    assert "runtime/tessera.js" in (site / "index.html").read_text()

    chat = run([tessera, "chat", "compiled", "--prompt", "What is the capital of France?", "--temperature", "0",
                "--max-tokens", "4", "--json"], cwd=work, env=env)
    reply = json.loads(chat.stdout)
    assert 0 < reply["completion_tokens"] <= 4 and reply["reply"]
