"""Tokenizers from GGUF metadata, as Hugging Face ``tokenizers`` objects (tokenizer.json), and the chat
template rendered with jinja2, as transformers renders it (chat_template.py).

Three kinds of vocabulary (``tokenizer.ggml.model``), each built as llama.cpp tokenizes it:

- ``gpt2``: byte-level BPE (SmolLM2, Qwen2, Llama 3). The file's merges; text split first by the
  patterns its pre-tokenizer type (``tokenizer.ggml.pre``) names (pretokenizers.py), llama.cpp's
  "default" ones when it names none; a name not in that table is refused.
- ``gemma4``: Gemma 4's pieces, SentencePiece's spelling ("▁", ``<0xNN>`` byte fallback) with BPE
  merges in the file, as llama.cpp tokenizes them: no "▁" in front, text cut at newline runs only.
- ``llama``: SentencePiece BPE (Llama 2, TinyLlama, Mistral). No merges in the file, only a score per
  piece: llama.cpp repeatedly joins the adjacent pair whose join is the best-scored piece, which is
  BPE with the merges ranked by the score of what they make. Spaces are "▁" and the text gets one
  in front (``tokenizer.ggml.add_space_prefix``, default true); a character no piece covers is
  spelled by its UTF-8 bytes, the pieces ``<0x00>`` to ``<0xFF>``.
"""

from __future__ import annotations

from .gguf_reader import GGUFError, TokenizerSpec
from .pretokenizers import PRE_TOKENIZERS, PreTokenizer, pre_tokenizer_of

# GGUF token types (llama.cpp's llama_token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
SPACE = "\u2581"  # "▁", SentencePiece's spelling of a space


def build_tokenizer(spec: TokenizerSpec):
    """The GGUF vocabulary as a Hugging Face tokenizer: byte-level BPE ("gpt2"), SentencePiece ("llama") or
    Gemma 4's ("gemma4")."""
    builders = {"gpt2": _byte_level, "llama": _sentencepiece, "gemma4": _gemma4}
    if spec.model not in builders:
        raise GGUFError(f"tokenizer.ggml.model {spec.model!r} is not supported (supported: gpt2, byte-level BPE; "
                        "llama, SentencePiece BPE; gemma4, SentencePiece pieces with BPE merges)")
    try:
        tokenizer = builders[spec.model](spec)
        _add_marked_tokens(tokenizer, spec)
    except GGUFError:
        raise
    except Exception as error:  # the tokenizers library raises a plain Exception (a merge of unknown tokens...)
        raise GGUFError(f"the file's vocabulary is not one a tokenizer can be built from: {error}") from None
    return tokenizer


def _byte_level(spec: TokenizerSpec):
    from tokenizers import Tokenizer, decoders, models

    pre = pre_tokenizer_of(spec.pre)
    if pre is None:
        raise GGUFError(f"tokenizer.ggml.pre {spec.pre!r} is not a pre-tokenizer Tessera knows (its "
                        f"{len(PRE_TOKENIZERS)}, by llama.cpp's names, are in tessera/frontend/pretokenizers.py)")
    vocab = {token: index for index, token in enumerate(spec.tokens)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=_merge_pairs(spec), fuse_unk=False, byte_fallback=False,
                                     ignore_merges=pre.ignore_merges))
    tokenizer.pre_tokenizer = byte_level_pre_tokenizer(pre)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def byte_level_pre_tokenizer(pre: PreTokenizer):
    """`pre` as a Hugging Face pre-tokenizer: its splits in turn, each keeping its matches and what lies
    between them, then the text spelled by GPT-2's byte symbols."""
    from tokenizers import Regex, pre_tokenizers

    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), behavior="isolated") for split in pre.splits]
                                   + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def _sentencepiece(spec: TokenizerSpec):
    from tokenizers import Tokenizer, decoders, models, normalizers

    if not spec.scores or len(spec.scores) != len(spec.tokens):
        raise GGUFError(f"a SentencePiece vocabulary needs tokenizer.ggml.scores, one per token; the file has "
                        f"{len(spec.scores or [])} for {len(spec.tokens)} tokens")
    vocab = {token: index for index, token in enumerate(spec.tokens)}
    unknown = spec.unknown_token_id
    if unknown is None:
        unknown = next((i for i, kind in enumerate(spec.token_types) if kind == UNKNOWN), None)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=sentencepiece_merges(spec.tokens, spec.scores),
                                     unk_token=spec.tokens[unknown] if unknown is not None else None,
                                     fuse_unk=True, byte_fallback=True))
    # A normalizer rather than the Metaspace pre-tokenizer: it puts the "▁" in front of every piece
    # of text, the one after a special token too, and in front of text that starts with a space,
    # as llama.cpp (and Llama 2's own tokenizer.json) do.
    spaces = [normalizers.Replace(" ", SPACE)]
    decode = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if spec.add_space_prefix:
        spaces.insert(0, normalizers.Prepend(SPACE))
        decode.append(decoders.Strip(" ", 1, 0))
    tokenizer.normalizer = normalizers.Sequence(spaces)
    tokenizer.decoder = decoders.Sequence(decode)
    return tokenizer


def _gemma4(spec: TokenizerSpec):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    vocab = {token: index for index, token in enumerate(spec.tokens)}
    unknown = spec.unknown_token_id
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=_merge_pairs(spec), fuse_unk=True, byte_fallback=True,
                                     unk_token=spec.tokens[unknown] if unknown is not None else None))
    # Spaces are "▁" with none put in front; llama.cpp cuts the text only where newline runs start and end.
    tokenizer.normalizer = normalizers.Replace(" ", SPACE)
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[^\n]+|[\n]+"), behavior="isolated")
    tokenizer.decoder = decoders.Sequence([decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()])
    return tokenizer


def _merge_pairs(spec: TokenizerSpec) -> list[tuple[str, str]]:
    """The file's merges, "left right", cut at the first space after the first character as llama.cpp
    cuts them (a left side may itself be a space)."""
    pairs = []
    for merge in spec.merges:
        cut = merge.find(" ", 1)
        if cut < 0:
            raise GGUFError(f"tokenizer.ggml.merges holds {merge!r}, which is not two tokens and a space")
        pairs.append((merge[:cut], merge[cut + 1:]))
    return pairs


def sentencepiece_merges(tokens: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """BPE merges that make llama.cpp's SentencePiece choices: every split of a piece into two pieces,
    best score of the joined piece first (ties: the lower id first, then the shorter left half)."""
    index = {token: i for i, token in enumerate(tokens)}
    ranked = []
    for i, token in enumerate(tokens):
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in index and right in index:
                ranked.append((-scores[i], i, cut, left, right))
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


def _add_marked_tokens(tokenizer, spec: TokenizerSpec) -> None:
    """Tokens the vocabulary marks are matched whole in the text, before any splitting: control and
    unknown ones (<|im_start|>, <s>, <unk>) as special tokens, which decoding may skip; user-defined
    ones (Qwen2's [PAD151646]) as plain text that is never split."""
    from tokenizers import AddedToken

    special = [AddedToken(token, special=True, normalized=False)
               for token, kind in zip(spec.tokens, spec.token_types) if kind in (CONTROL, UNKNOWN)]
    tokenizer.add_special_tokens(special)
    user = [AddedToken(token, special=False, normalized=False)
            for token, kind in zip(spec.tokens, spec.token_types) if kind == USER_DEFINED]
    if user:
        tokenizer.add_tokens(user)


def render_chat(template: str, messages: list[dict], add_generation_prompt: bool = True, **extra) -> str:
    """The conversation as the model's chat template lays it out (jinja2, sandboxed and within a budget:
    frontend/chat_template.py)."""
    from .chat_template import render_chat_template

    return render_chat_template(template, messages, add_generation_prompt, **extra)
