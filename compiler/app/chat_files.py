"""A compiled model's chat files, chat-config.json and tokenizer.json, read as untrusted files.

Both are regular files of bounded size (a FIFO or /dev/zero in their place is refused before it is
opened); chat-config.json must match docs/chat-config.schema.json, and its token ids must be ids of
the tokenizer. runtime-js checks the same (format.js, validateChatConfig).
"""

from __future__ import annotations

from tessera import facts
from tessera.ir import TesseraError
from tessera.vm import check_against_schema, parse_json, read_regular

# chat-config.json holds the chat template (a few KB, Gemma's about 10): 16 MiB is far beyond any.
MAX_CHAT_CONFIG_BYTES = facts.MAX_JSON_BYTES["chat_config"]
# tokenizer.json of a 256k vocabulary with its merges is tens of MB.
MAX_TOKENIZER_BYTES = facts.MAX_JSON_BYTES["tokenizer"]


class ChatFilesError(TesseraError):
    """A chat-config.json or tokenizer.json that cannot be used."""


def read_chat_config(path: str, vocab_size: int | None = None) -> dict:
    """``path``'s chat configuration, checked; with ``vocab_size``, every token id it names is below it."""
    config = parse_json(read_regular(path, "chat configuration", MAX_CHAT_CONFIG_BYTES, error=ChatFilesError), path,
                        ChatFilesError)
    check_against_schema(config, "chat-config", path, ChatFilesError)
    if vocab_size is not None:
        ids = [("stop_token_ids", i) for i in config["stop_token_ids"]] + \
              ([("bos_token_id", config["bos_token_id"])] if config.get("bos_token_id") is not None else [])
        for key, token in ids:
            if token >= vocab_size:
                raise ChatFilesError(f"{path}: {key} names token {token}, but the tokenizer has {vocab_size} tokens")
    return config


def read_tokenizer(path: str):
    """``path``'s tokenizer (Hugging Face tokenizer.json), as a ``tokenizers.Tokenizer``."""
    from tokenizers import Tokenizer

    data = read_regular(path, "tokenizer", MAX_TOKENIZER_BYTES, error=ChatFilesError)
    try:
        return Tokenizer.from_str(data.decode("utf-8"))
    except Exception as error:  # a UnicodeDecodeError, or the tokenizers library's plain Exception
        raise ChatFilesError(f"{path} is not a tokenizer the tokenizers library reads: {error}") from None
