"""The Python loader trusts no file of a model folder (issue 17): every case of tests/fixtures/hostile_files.py
is refused with a Tessera error that names the field, or (a member the format makes optional) loads and
runs or stops with one. Nothing outside the folder is read, nothing blocks, nothing is allocated by a
number that was not checked first. A memory plan, tensor shape or launch grid that would run garbage or
fail inside a device's API is refused when the executable loads or the VM opens its device (issue 32)."""

import json
import os
import shutil
import threading

import numpy as np
import pytest
from fixtures.hostile_files import (
    ESCAPING_PATHS,
    EVERY_DEVICE,
    LOAD,
    NONE,
    WEBGPU,
    WEBGPU_DEFAULTS,
    broken_texts,
    expected_output,
    mutations,
    plan_cases,
    small_build,
)
from tessera.ir import TesseraError
from tessera.vm import Executable, ExecutableError, VirtualMachine
from tessera.vm.devices import DeviceError
from tessera.vm.files import check_relative_path, path_problem
from tessera.vm.plan_checks import DeviceFit, check_device_fit

# A guard against a load that blocks (a FIFO opened for reading waits for a writer forever), not a
# timing: a busy machine may take seconds, a blocked open never returns.
HANG_GUARD_SECONDS = 300

# Members the format makes optional (docs/format.md): deleting one leaves an executable that loads.
OPTIONAL = ("kernels[0].rule", "kernels[0].pattern", "kernels[1].rule", "kernels[1].pattern", "kernels[0].abi.grid",
            "kernels[1].abi.grid", "required_limits.", "requirements.limits.", "functions.main.locations.",
            "functions.main")


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("hostile") / "build")
    doc = small_build("wasm", folder)
    with open(os.path.join(folder, "tensor-cache.json"), encoding="utf-8") as f:
        cache = json.load(f)
    return folder, doc, cache


def write_json(folder, name, doc):
    with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
        json.dump(doc, f)


def verdict(folder):
    """None when the folder loads and its main runs (or stops with a Tessera error), else the load's error."""
    try:
        exe = Executable.load(folder)
    except ExecutableError as error:
        return str(error)
    try:
        x = np.linspace(-1, 1, 48, dtype=np.float32).reshape(3, 16)
        np.testing.assert_allclose(VirtualMachine(exe)["main"](x), expected_output(x), rtol=1e-4, atol=1e-5)
    except TesseraError:
        pass
    return None


def named(message: str, path) -> bool:
    """Whether ``message`` names the mutated field: its key, or its array's."""
    keys = [str(part) for part in path if isinstance(part, str)]
    return "executable.json" in message and any(f"{key}" in message for key in keys[-2:])


def test_every_field_deleted_mistyped_negative_huge_or_a_bad_expression_is_a_clear_error(build, tmp_path):
    source, doc, _ = build
    folder = str(tmp_path / "case")
    shutil.copytree(source, folder)
    unclear, wrongly_accepted, accepted = [], [], 0
    for label, kind, path, mutated in mutations(doc):
        write_json(folder, "executable.json", mutated)
        message = verdict(folder)  # any exception but a Tessera error fails the test here, with its traceback
        if message is None:
            accepted += 1
            if kind != "delete" or not any(o in label for o in OPTIONAL):
                wrongly_accepted.append(label)
        elif not named(message, path):
            unclear.append(f"{label}: {message}")
    assert not wrongly_accepted, wrongly_accepted
    assert not unclear, "\n".join(unclear)
    assert accepted < 40  # the optional members only


def test_an_unknown_instruction_is_refused_at_load_even_where_no_call_reaches_it(build, tmp_path):
    source, doc, _ = build
    folder = str(tmp_path / "case")
    shutil.copytree(source, folder)
    code = doc["functions"]["main"]["code"]
    # after the ret: no call would ever run it, so only the loader can notice
    write_json(folder, "executable.json", {**doc, "functions": {"main": {**doc["functions"]["main"], "code": [
        *code[:-1], {"op": "jump", "target": 0}, code[-1]]}}})
    with pytest.raises(ExecutableError, match=r"functions\.main\.code\[\d+\]\.op is 'jump', not one of 'match'"):
        Executable.load(folder)


@pytest.mark.parametrize("label, text", broken_texts())
def test_text_that_is_no_json_document_is_a_clear_error(build, tmp_path, label, text):
    source, _, _ = build
    folder = str(tmp_path / "case")
    shutil.copytree(source, folder)
    with open(os.path.join(folder, "executable.json"), "wb") as f:
        f.write(text)
    with pytest.raises(ExecutableError, match="executable.json"):
        Executable.load(folder)
    with open(os.path.join(folder, "tensor-cache.json"), "wb") as f:
        f.write(text)
    write_json(folder, "executable.json", build[1])
    with pytest.raises(ExecutableError, match="tensor-cache.json"):
        Executable.load(folder)


@pytest.mark.parametrize("path", ESCAPING_PATHS)
def test_no_path_leaves_the_folder(build, tmp_path, path):
    """In every field that names a file: a kernel module, a weight shard."""
    source, doc, cache = build
    assert path_problem(path) is not None
    folder = str(tmp_path / "case")
    shutil.copytree(source, folder)
    module = doc["modules"][0]["path"]
    escaping = json.loads(json.dumps(doc).replace(json.dumps(module), json.dumps(path)))
    write_json(folder, "executable.json", escaping)
    with pytest.raises(ExecutableError, match=r"modules\[0\]\.path .* is not a relative path inside the folder: it"):
        Executable.load(folder)
    write_json(folder, "executable.json", doc)
    write_json(folder, "tensor-cache.json", {**cache, "records": [{**cache["records"][0], "dataPath": path}]})
    with pytest.raises(ExecutableError, match=r"records\[0\]\.dataPath .* is not a relative path inside the folder"):
        Executable.load(folder)


def test_the_path_rule_says_why():
    for path, why in [("/etc/passwd", "starts with '/'"), ("../x", "'..' part"), ("%2e%2e/x", "'%'"),
                      ("a\\b", "backslash"), ("https://x", "':'"), ("//host/x", "starts with '/'"),
                      ("a//b", "empty part"), ("x\tb", "control character"), (" /etc/passwd", "space"),
                      ("", "empty"), ("a" * 5000, "longer than 4096"), (7, "not a string")]:
        with pytest.raises(ExecutableError, match=f"is not a relative path inside the folder: .*{why}"):
            check_relative_path(path, "weight shard", ExecutableError)
    for fine in ("params_shard_0.bin", "kernels/000_k.wgsl", "a..b", ".hidden", "caf\u00e9.bin", "a b"):
        assert check_relative_path(fine, "weight shard") == fine


def load_errors(folder) -> list[str]:
    """The load's error messages, from a thread (a FIFO would block it: HANG_GUARD_SECONDS)."""
    done, errors = threading.Event(), []

    def load():
        try:
            Executable.load(str(folder))
        except ExecutableError as error:
            errors.append(str(error))
        done.set()

    threading.Thread(target=load, daemon=True).start()
    assert done.wait(HANG_GUARD_SECONDS), f"loading {folder} blocked"
    return errors


def test_symlinks_out_of_the_folder_fifos_devices_and_directories_are_refused_without_blocking(build, tmp_path):
    source, doc, cache = build
    outside = tmp_path / "secret.bin"
    outside.write_bytes(b"secret" * 100)
    folder = tmp_path / "case"
    shutil.copytree(source, folder)
    shard = cache["records"][0]["dataPath"]
    (folder / "up").symlink_to("..")
    cases = {
        "a symlink out of the folder": lambda p: p.symlink_to(outside),
        "a symlink to /dev/zero": lambda p: p.symlink_to("/dev/zero"),
        "a FIFO": lambda p: os.mkfifo(p),
        "a directory": lambda p: p.mkdir(),
    }
    for name in (shard, doc["modules"][0]["path"]):  # a weight shard, the WASM module
        target = folder / name
        data = target.read_bytes()
        for what, make in cases.items():
            target.unlink()
            make(target)
            errors = load_errors(folder)
            assert len(errors) == 1 and ("leaves the folder" in errors[0] or "not a regular file" in errors[0]), \
                (name, what, errors)
            if target.is_dir() and not target.is_symlink():
                target.rmdir()
            else:
                target.unlink()
            target.write_bytes(data)
    # A path through a symlinked folder that leads outside.
    write_json(str(folder), "tensor-cache.json", {**cache, "records": [{**cache["records"][0],
                                                                          "dataPath": "up/secret.bin"}]})
    with pytest.raises(ExecutableError, match="leaves the folder"):
        Executable.load(str(folder))
    # executable.json itself a FIFO.
    write_json(str(folder), "tensor-cache.json", cache)
    os.unlink(folder / "executable.json")
    os.mkfifo(folder / "executable.json")
    errors = load_errors(folder)
    assert len(errors) == 1 and "is a FIFO, not a regular file" in errors[0], errors


def test_sizes_and_offsets_are_checked_against_the_real_size_before_anything_is_read(build, tmp_path):
    source, doc, cache = build
    folder = str(tmp_path / "case")
    shutil.copytree(source, folder)
    shard = cache["records"][0]
    first, second = shard["records"]

    def refused(records, match, nbytes=None):
        write_json(folder, "tensor-cache.json", {**cache, "records": [{**shard, "records": records,
                                                                        "nbytes": nbytes or shard["nbytes"]}]})
        with pytest.raises(ExecutableError, match=match):
            Executable.load(folder)

    refused([first, {**second, "byteOffset": 514}], r"byteOffset is 514, not a multiple of 4.*\(misaligned\)")
    refused([first, {**second, "byteOffset": 480}], r"records\[1\] overlaps records\[0\]\.records\[0\]")
    refused([first, {**second, "byteOffset": 544}], r"lies outside its shard: bytes 544 to 576 of 544")
    refused([first, {**second, "nbytes": 64}], r"nbytes is 64, but a float32 tensor of shape \[8\] has 32 bytes")
    refused([first, {**second, "name": "const_0"}], "the name of an earlier record too")
    # A shard the file says is larger or smaller than it is: known from stat, before a byte is read.
    refused([first, second], r"has 544 bytes, expected 4294967296 \(truncated\?\)", nbytes=1 << 32)
    # Two records naming the same bytes (a bundle's shared weights) are fine.
    write_json(folder, "tensor-cache.json", {**cache, "records": [{**shard, "records": [
        first, second, {**second, "name": "const_2"}]}]})
    assert set(Executable.load(folder).constants) == {"const_0", "const_1", "const_2"}


def test_a_module_or_shard_the_file_says_is_huge_is_refused_by_its_real_size(build, tmp_path):
    source, doc, cache = build
    folder = str(tmp_path / "case")
    shutil.copytree(source, folder)
    named = doc["kernels"][0]["module"]  # a build may list modules no kernel names (kernels-threads.wasm)
    huge = {**doc, "modules": [{**m, "nbytes": (1 << 53) - 1} if m["path"] == named else m for m in doc["modules"]]}
    write_json(folder, "executable.json", huge)
    with pytest.raises(ExecutableError, match=r"kernel module .* has \d+ bytes, expected 9007199254740991"):
        Executable.load(folder)


def plan_verdict(folder, device: str) -> tuple[str, str]:
    """Where the plan of the executable in ``folder`` is refused and the error: at load, by ``device`` when the
    VM opens it, by a WebGPU device of the spec's defaults (checked without one), or nowhere ("none": then
    main computes the small module's answer on ``device``)."""
    try:
        exe = Executable.load(folder)
    except ExecutableError as error:
        return LOAD, str(error)
    try:
        vm = VirtualMachine(exe, device)
    except DeviceError as error:
        return EVERY_DEVICE, str(error)
    try:
        check_device_fit(exe, [DeviceFit(*WEBGPU_DEFAULTS, "webgpu device")], "executable.json", DeviceError)
    except DeviceError as error:
        verdict = (WEBGPU, str(error))
    else:
        verdict = (NONE, "")
    x = np.linspace(-1, 1, 48, dtype=np.float32).reshape(3, 16)
    np.testing.assert_allclose(vm["main"](x), expected_output(x), rtol=1e-4, atol=1e-5)
    return verdict


def test_a_plan_that_would_run_garbage_or_fail_inside_the_device_is_refused_by_name(build, tmp_path):
    """Storages that share bytes while both are live, negative dimensions, offsets a device does not align,
    grids past its workgroups: each refused with one line naming the field; the near misses run right."""
    source, doc, _ = build
    folder = str(tmp_path / "case")
    shutil.copytree(source, folder)
    wrong, verdicts = [], []
    for label, where, names, mutated in plan_cases(doc):
        write_json(folder, "executable.json", mutated)
        verdict, message = plan_verdict(folder, "wasm")
        verdicts.append(verdict)
        if verdict != where or names not in message or "\n" in message:
            wrong.append(f"{label}: expected {where} naming {names!r}, got {verdict}: {message}")
    assert not wrong, "\n".join(wrong)
    assert [verdicts.count(v) for v in (LOAD, EVERY_DEVICE, WEBGPU, NONE)] == [12, 2, 2, 4]


def test_a_webgpu_device_refuses_what_it_cannot_run_before_wgpu_sees_it(tmp_path):
    """On llvmpipe (storage alignment 32, 65,535 workgroups per dimension): the WebGPU-only cases fail as
    the VM opens the device, naming the field, instead of inside wgpu at the first launch."""
    source = str(tmp_path / "webgpu")
    doc = small_build("llvmpipe", source)
    folder = str(tmp_path / "case")
    shutil.copytree(source, folder)
    x = np.linspace(-1, 1, 48, dtype=np.float32).reshape(3, 16)
    np.testing.assert_allclose(VirtualMachine(Executable.load(folder), "webgpu")["main"](x), expected_output(x),
                               rtol=1e-4, atol=1e-5)
    refused = []
    for label, where, names, mutated in plan_cases(doc):
        if where not in (WEBGPU, EVERY_DEVICE):
            continue
        write_json(folder, "executable.json", mutated)
        with pytest.raises(DeviceError, match=r"^executable\.json does not fit the webgpu device: ") as error:
            VirtualMachine(Executable.load(folder), "webgpu")
        assert names in str(error.value), (label, str(error.value))
        refused.append(label)
    assert len(refused) == 4
