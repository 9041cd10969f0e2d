"""The command line on a model or output path that cannot be used (issue 32): a missing path, an empty
file, a FIFO, a folder where a file belongs or a file where a folder belongs. Each subcommand refuses it
in one line (`error: ...`, status 1) before any work starts: never a traceback, never blocking on a FIFO."""

import os
import subprocess
import sys

import pytest


def tessera(*args, cwd=None):
    # A FIFO that is opened waits for a writer: the timeout turns such a hang into a failure.
    return subprocess.run([sys.executable, "-m", "tessera.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def one_line_error(result, expected: str) -> None:
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == f"error: {expected}", result.stderr


@pytest.fixture
def paths(tmp_path):
    (tmp_path / "empty.gguf").write_bytes(b"")
    (tmp_path / "empty-folder").mkdir()
    os.mkfifo(tmp_path / "fifo.gguf")
    return tmp_path


CHAT_SOURCES = {
    "no-such-model": "no-such-model does not exist: give a .gguf file or a compiled model folder",
    "empty.gguf": "empty.gguf is empty, not a GGUF file",
    "fifo.gguf": "fifo.gguf is not a regular file (a FIFO, a device or a socket), so not a GGUF file",
    "empty-folder": "empty-folder is not a compiled model folder (it has no executable.json): give a folder "
                    "`tessera compile` wrote or a .gguf file",
}


@pytest.mark.parametrize("runtime", [None, "python", "native"])
@pytest.mark.parametrize("source", list(CHAT_SOURCES))
def test_chat_refuses_a_path_that_is_no_model_in_one_line(paths, source, runtime):
    runtime_args = ("--runtime", runtime) if runtime else ()
    one_line_error(tessera("chat", source, "--prompt", "hi", *runtime_args, cwd=paths), CHAT_SOURCES[source])


SERVE_FOLDER_MESSAGES = {
    "no-such.gguf": "no-such.gguf does not exist: give a .gguf file, a compiled folder or a bundle",
    "empty-folder": "empty-folder is neither a compiled model (no readable executable.json), a bundle's model folder "
                    "(bundle.json) nor a bundle's site (index.html)",
}


@pytest.mark.parametrize("model, expected", [
    ("no-such.gguf", "no GGUF file at no-such.gguf"),
    ("empty-folder", "empty-folder is a directory, not a GGUF file"),
    ("fifo.gguf", "fifo.gguf is not a regular file (a FIFO, a device or a socket), so not a GGUF file"),
    ("empty.gguf", "empty.gguf is empty, not a GGUF file"),
])
@pytest.mark.parametrize("command", ["compile", "bundle", "serve"])
def test_compile_bundle_and_serve_refuse_a_path_that_is_no_gguf_file(paths, command, model, expected):
    if command == "serve":  # serve takes a folder too (a compiled model, a bundle or a site), and says so
        expected = SERVE_FOLDER_MESSAGES.get(model, expected)
    output = ("-o", "out") if command != "serve" else ("--port", "0")
    one_line_error(tessera(command, model, *output, cwd=paths), expected)
    assert not (paths / "out").exists()  # nothing was written


@pytest.mark.parametrize("output, expected", [
    ("a-file", "a-file is a file, not a folder: give a folder to write {what} into"),
    ("a-file/model", "cannot write {what} into a-file/model: {parent} is a file, not a folder"),
])
@pytest.mark.parametrize("command, what", [("compile", "the compiled model"), ("bundle", "the site")])
def test_an_output_that_cannot_be_a_folder_is_refused_before_the_compile(tiny_gguf, tmp_path, command, what, output,
                                                                         expected):
    (tmp_path / "a-file").write_text("mine")
    result = tessera(command, tiny_gguf, "-o", output, cwd=tmp_path)
    one_line_error(result, expected.format(what=what, parent=tmp_path / "a-file"))
    assert "read tiny" not in result.stderr  # refused before the model was read, not after its compile
    assert (tmp_path / "a-file").read_text() == "mine"


def test_bundle_of_a_missing_model_keeps_the_earlier_bundle_of_that_name(tmp_path):
    earlier = tmp_path / "dist" / "models" / "tiny"
    earlier.mkdir(parents=True)
    (earlier / "bundle.json").write_text("{}")
    one_line_error(tessera("bundle", "tiny.gguf", "-o", "dist", cwd=tmp_path), "no GGUF file at tiny.gguf")
    assert (earlier / "bundle.json").read_text() == "{}"


@pytest.mark.parametrize("directory, expected", [
    ("no-such", "cannot read executable no-such/executable.json: No such file or directory"),
    ("empty.gguf", "cannot read executable empty.gguf/executable.json: Not a directory"),
    ("empty-folder", "cannot read executable empty-folder/executable.json: No such file or directory"),
])
def test_inspect_refuses_a_path_that_is_no_compiled_folder_in_one_line(paths, directory, expected):
    one_line_error(tessera("inspect", directory, cwd=paths), expected)


def test_serve_names_a_fifo_in_place_of_a_compiled_folders_chat_config(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "executable.json").write_text("{}")
    os.mkfifo(folder / "chat-config.json")
    one_line_error(tessera("serve", "model", "--port", "0", cwd=tmp_path), "model is not a compiled model that can be "
                   f"served: the chat configuration {folder}/chat-config.json is a FIFO, not a regular file")


def test_the_compile_cache_names_a_missing_file_and_never_opens_a_fifo(paths, monkeypatch):
    from tessera.app.compile import cached_compile
    from tessera.frontend import GGUFError

    monkeypatch.setenv("TESSERA_CACHE", str(paths / "cache"))
    with pytest.raises(GGUFError, match="^no GGUF file at .*missing.gguf$"):
        cached_compile(str(paths / "missing.gguf"), "wasm")
    with pytest.raises(GGUFError, match="fifo.gguf is not a regular file"):
        cached_compile(str(paths / "fifo.gguf"), "wasm")
