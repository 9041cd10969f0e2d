"""The command line on a model folder an attacker wrote (issue 17): `tessera chat` and `tessera inspect`
refuse a chat-config.json, tokenizer.json, executable.json or bundle.json that is malformed, a FIFO, a
device or a symlink out of the folder, in one line (`error: ...`, status 1), never a traceback, never
blocking."""

import json
import os
import shutil
import subprocess
import sys

import pytest


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    from fixtures.tiny_gguf import write_tiny_gguf
    from tessera.app.compile import compile_model

    root = tmp_path_factory.mktemp("hostile-app")
    gguf = write_tiny_gguf(str(root / "tiny.gguf"))
    return compile_model(gguf, str(root / "compiled"), "llvmpipe", 32).directory


def tessera(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "tessera.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def one_line_error(result, *needles):
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert lines[-1].startswith("error: ") and all(n in lines[-1] for n in needles), lines[-1]


def damaged(compiled, tmp_path, name, damage):
    folder = tmp_path / "model"
    shutil.copytree(compiled, folder)
    target = folder / name
    target.unlink()
    (tmp_path / "outside.json").write_text("{}")
    damage(target, tmp_path)
    return folder


DAMAGES = {
    "a FIFO": (lambda p, _: os.mkfifo(p), "is a FIFO, not a regular file"),
    "/dev/zero": (lambda p, _: p.symlink_to("/dev/zero"), "leaves the folder (it resolves to /dev/zero)"),
    "a directory": (lambda p, _: p.mkdir(), "is a directory, not a regular file"),
    "a symlink out of the folder": (lambda p, tmp: p.symlink_to(tmp / "outside.json"), "leaves the folder"),
}


@pytest.mark.parametrize("name", ["chat-config.json", "tokenizer.json", "executable.json"])
@pytest.mark.parametrize("how", list(DAMAGES))
def test_chat_refuses_a_chat_file_that_is_no_regular_file_in_one_line(compiled, tmp_path, name, how):
    damage, message = DAMAGES[how]
    folder = damaged(compiled, tmp_path, name, damage)
    one_line_error(tessera("chat", folder, "--runtime", "python", "--prompt", "Hi", "--max-tokens", "1"), message)


def test_chat_refuses_a_malformed_chat_config_naming_the_field(compiled, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(compiled, folder)
    config = json.loads((folder / "chat-config.json").read_text())
    for damage, message in [
        (lambda c: c.__setitem__("context_length", "64"), "context_length is '64', not an integer"),
        (lambda c: c.__setitem__("context_length", -1), "context_length is -1, less than the minimum 1"),
        (lambda c: c.__setitem__("stop_token_ids", [10 ** 9]), "stop_token_ids names token 1000000000, but the "
                                                               "tokenizer has"),
        (lambda c: c.pop("stop_token_ids"), "lacks the field 'stop_token_ids'"),
        (lambda c: c["chat_format"]["roles"].__setitem__("user", {"prefix": 7}), "chat_format.roles.user"),
    ]:
        bad = json.loads(json.dumps(config))
        damage(bad)
        (folder / "chat-config.json").write_text(json.dumps(bad))
        one_line_error(tessera("chat", folder, "--runtime", "python", "--prompt", "Hi", "--max-tokens", "1"), message)


def test_inspect_refuses_a_hostile_folder_in_one_line(compiled, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(compiled, folder)
    doc = json.loads((folder / "executable.json").read_text())
    bad = json.loads(json.dumps(doc))
    pc = next(pc for pc, op in enumerate(bad["functions"]["decode"]["code"]) if op["op"] == "launch")
    bad["functions"]["decode"]["code"][pc]["kernel"] = 60000
    (folder / "executable.json").write_text(json.dumps(bad))
    one_line_error(tessera("inspect", folder), f"functions.decode.code[{pc}].kernel is 60000, but the executable has")
    (folder / "executable.json").write_text(json.dumps(doc))
    cache = json.loads((folder / "tensor-cache.json").read_text())
    cache["records"][0]["dataPath"] = "/etc/passwd"
    (folder / "tensor-cache.json").write_text(json.dumps(cache))
    one_line_error(tessera("inspect", folder), "records[0].dataPath '/etc/passwd' is not a relative path inside the "
                                               "folder: it starts with '/'")


def test_a_bundle_json_path_through_a_symlink_out_of_the_model_folder_is_refused(compiled, tmp_path):
    """A build of a bundle finds its tokenizer where bundle.json says: inside the model's folder, after symlinks."""
    from tessera.app.bundle_json import BundleError, build_files

    model = tmp_path / "site" / "model"
    shutil.copytree(compiled, model / "webgpu")
    for name in ("tensor-cache.json", "chat-config.json", "tokenizer.json"):
        shutil.move(str(model / "webgpu" / name), str(model / name))
    (tmp_path / "elsewhere").mkdir()
    (model / "shared").symlink_to(tmp_path / "elsewhere")
    index = {"format": "tessera-bundle", "version": 2, "model": "model", "tokenizer": "shared/tokenizer.json",
             "chat_config": "chat-config.json",
             "builds": [{"name": "webgpu", "kind": "webgpu", "path": "webgpu/", "features": [],
                         "tensor_cache": "tensor-cache.json", "download_bytes": 1,
                         "memory": {k: 1 for k in ("weights_bytes", "arena_bytes", "kv_cache_bytes", "total_bytes",
                                                   "largest_buffer_bytes", "largest_binding_bytes")}}]}
    (model / "bundle.json").write_text(json.dumps(index))
    with pytest.raises(BundleError, match=r"the tokenizer .*shared/tokenizer\.json leaves the folder"):
        build_files(str(model / "webgpu"))
    index["tokenizer"] = "tokenizer.json"
    (model / "bundle.json").write_text(json.dumps(index))
    assert build_files(str(model / "webgpu")).tokenizer == os.path.realpath(model / "tokenizer.json")
