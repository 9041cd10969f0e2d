"""Fuzz targets: the loaders that read files a user did not write (issue 17, "loaders trust no
file"), each a function of one input's bytes. Any outcome is fine but three: an exception that is
not a TesseraError (a traceback a user would see), a hang, or memory out of proportion to the input.
run.py drives them with atheris; test_fuzz.py replays the committed corpora and runs each briefly.

- ``gguf``: the bytes as a .gguf file: its vocabulary read and built into a tokenizer, then
  load_gguf and the model it binds (what `tessera compile` does before exporting the graph).
- ``executable``: the bytes as executable.json in a compiled folder (a tiny model built once).
- ``tensor_cache``: the bytes as tensor-cache.json beside that folder's weight shard.
- ``chat_config``: the bytes as chat-config.json beside that folder's executable and tokenizer.
- ``template``: the bytes up to the first NUL as a chat template, the rest, split at each \\x01, as
  the messages' contents (user and assistant in turn), rendered with its budget.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import warnings

from tessera.ir import TesseraError

HERE = os.path.dirname(os.path.abspath(__file__))
CORPORA = os.path.join(HERE, "corpus")
SEED_GGUF = os.path.join(CORPORA, "gguf", "tiny-llama.gguf")


class _Scratch:
    """One folder per process: the compiled seed model, and the file each input is written to."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="tessera-fuzz-")
        self._model = None
        self._replaced: str | None = None  # the file the last input took the place of

    def path(self, name: str) -> str:
        return os.path.join(self.root, name)

    def model(self) -> str:
        """A compiled copy of the seed GGUF, its original files kept beside it as *.orig."""
        if self._model is None:
            from tessera.app import compile_model

            folder = self.path("model")
            compile_model(SEED_GGUF, folder, "webgpu", context_length=32)
            for name in os.listdir(folder):
                if name.endswith(".json"):
                    shutil.copy(os.path.join(folder, name), os.path.join(folder, name + ".orig"))
            self._model = folder
        return self._model

    @functools.cached_property
    def vocab_size(self) -> int:
        from tessera.app.chat_files import read_tokenizer

        return read_tokenizer(os.path.join(self.model(), "tokenizer.json")).get_vocab_size()

    def model_with(self, name: str, data: bytes) -> str:
        """The compiled folder with ``name`` replaced by ``data``, the file the last input replaced
        (another target's, in a test that runs several) restored."""
        folder = self.model()
        if self._replaced not in (None, name):
            shutil.copy(os.path.join(folder, self._replaced + ".orig"), os.path.join(folder, self._replaced))
        self._replaced = name
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
        return folder


_SCRATCH: _Scratch | None = None


def scratch() -> _Scratch:
    global _SCRATCH
    if _SCRATCH is None:
        _SCRATCH = _Scratch()
    return _SCRATCH


def fuzz_gguf(data: bytes) -> None:
    from tessera.frontend import load_gguf, load_tokenizer
    from tessera.frontend.tokenizer import build_tokenizer
    from tessera.models import model_from_gguf

    path = scratch().path("input.gguf")
    with open(path, "wb") as f:
        f.write(data)
    build_tokenizer(load_tokenizer(path))  # as a vocabulary-only file is read
    model_from_gguf(load_gguf(path))


def fuzz_executable(data: bytes) -> None:
    from tessera.vm import Executable

    Executable.load(scratch().model_with("executable.json", data))


def fuzz_tensor_cache(data: bytes) -> None:
    from tessera.vm.executable import load_tensor_cache

    load_tensor_cache(os.path.join(scratch().model_with("tensor-cache.json", data), "tensor-cache.json"))


def fuzz_chat_config(data: bytes) -> None:
    """What ChatSession reads of chat-config.json before a chat, and the conversation it renders."""
    from tessera.app.chat_files import read_chat_config
    from tessera.frontend.chat_format import ChatFormat
    from tessera.frontend.tokenizer import render_chat

    folder = scratch().model_with("chat-config.json", data)
    config = read_chat_config(os.path.join(folder, "chat-config.json"), vocab_size=scratch().vocab_size)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    if config.get("chat_format"):
        ChatFormat.from_json(config["chat_format"]).render(messages)
    if config.get("chat_template"):
        render_chat(config["chat_template"], messages, bos_token=config.get("bos_token", ""),
                    eos_token=config.get("eos_token", ""))


def fuzz_template(data: bytes) -> None:
    from tessera.frontend.chat_template import render_chat_template

    template, _, rest = data.partition(b"\0")
    contents = rest.split(b"\x01") if rest else [b"Hello"]
    messages = [{"role": ("user", "assistant")[i % 2], "content": c.decode("utf-8", "replace")}
                for i, c in enumerate(contents)]
    render_chat_template(template.decode("utf-8", "replace"), messages, bos_token="<s>", eos_token="</s>")


TARGETS = {"gguf": fuzz_gguf, "executable": fuzz_executable, "tensor_cache": fuzz_tensor_cache,
           "chat_config": fuzz_chat_config, "template": fuzz_template}


def run_one(target: str, data: bytes) -> None:
    """The target on ``data``; a TesseraError is a refusal, the outcome a bad file should have."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            TARGETS[target](data)
        except TesseraError:
            pass
