"""How a byte-level BPE vocabulary cuts text into words before its merges, by the name its GGUF gives
(``tokenizer.ggml.pre``), as llama.cpp (llama-vocab.cpp) cuts it.

A pre-tokenizer is a list of regular expressions applied in turn: each one cuts every piece the last
one left into its matches and the text between them, all kept (Hugging Face's ``Split`` with
behavior "isolated"). The expressions are written for three engines at once, Oniguruma (Hugging Face
``tokenizers``), JavaScript (runtime-js) and PCRE2 (runtime-native), so case-insensitive groups are
spelled out (``'[sS]`` rather than ``(?i:'s)``), as llama.cpp spells them.

``ignore_merges``: a word that is itself a token is that token, whatever the merges would make of it
(Llama 3's rule).
"""

from __future__ import annotations

from dataclasses import dataclass

_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
# GPT-2's split: contractions, letters, digits and other runs each with one optional leading space.
GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"


def _tiktoken_style(digits: str, letters: str = r"\p{L}+", other: str = r"[^\s\p{L}\p{N}]+") -> str:
    """The split of Llama 3, Qwen2 and their kin: a letter run may take one leading non-letter, digits
    come in groups (`digits`), other runs take trailing newlines, whitespace keeps its last space for
    the next word."""
    return (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?" + letters + "|" + digits + r"| ?" + other
            + r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


LLAMA3_SPLIT = _tiktoken_style(r"\p{N}{1,3}")
QWEN2_SPLIT = _tiktoken_style(r"\p{N}")
QWEN35_SPLIT = _tiktoken_style(r"\p{N}", letters=r"[\p{L}\p{M}]+", other=r"[^\s\p{L}\p{M}\p{N}]+")

# DeepSeek LLM's letters: the Latin, Greek, Cyrillic, Armenian, Georgian, Cherokee, Glagolitic, Coptic
# ... ranges of its tokenizer.json (cased letters), as code point ranges.
_DEEPSEEK_LETTER_RANGES = (
    "A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373"
    "\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481"
    "\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf"
    "\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d"
    "\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4"
    "\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107"
    "\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f"
    "\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d"
    "\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17"
    "\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb"
    "\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943")
# CJK ideographs, a span of the BMP below them, Hangul syllables.
_DEEPSEEK_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
_FALCON_PUNCTUATION = r"[\p{P}\$\+<=>\^~\|`]+"


@dataclass(frozen=True)
class PreTokenizer:
    splits: tuple[str, ...]
    ignore_merges: bool = False


_STARCODER = PreTokenizer((r"\p{N}", GPT2_SPLIT))  # digits one by one, then GPT-2's split
_GPT2 = PreTokenizer((GPT2_SPLIT,))
_QWEN2 = PreTokenizer((QWEN2_SPLIT,))
_LLAMA3 = PreTokenizer((LLAMA3_SPLIT,), ignore_merges=True)
_BLOOM = (r" ?[^(\s|.,!?…。，、।۔،)]+",)

PRE_TOKENIZERS: dict[str, PreTokenizer] = {
    # What llama.cpp uses for a vocabulary whose file names no pre-tokenizer.
    "default": PreTokenizer((r"[\p{P}\$\+<=>\^~\|]+", GPT2_SPLIT, r"\p{N}+", "[0-9][0-9][0-9]")),
    **dict.fromkeys(("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
                     "mellum", "modern-bert", "mpt", "olmo", "jais", "trillion", "granite-docling", "exaone4",
                     "jina-v1-en", "jina-v2-code", "roberta-bpe"), _GPT2),
    **dict.fromkeys(("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
                     "mellum2"), _STARCODER),
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                     "jina-v5-nano"), _LLAMA3),
    **dict.fromkeys(("dbrx", "smaug-bpe", "chatglm-bpe"), PreTokenizer((LLAMA3_SPLIT,))),
    **dict.fromkeys(("glm4", "glm5"), PreTokenizer((LLAMA3_SPLIT,), ignore_merges=True)),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan",
                     "solar-open", "grok-2"), _QWEN2),
    "qwen35": PreTokenizer((QWEN35_SPLIT,)),
    "falcon": PreTokenizer((_FALCON_PUNCTUATION, GPT2_SPLIT, "[0-9][0-9][0-9]")),
    "deepseek-llm": PreTokenizer(("[\r\n]", r"\s?[" + _DEEPSEEK_LETTER_RANGES + "]+",
                                  "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+", r"\s+$",
                                  _DEEPSEEK_CJK, r"\p{N}+")),
    "deepseek-coder": PreTokenizer(("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _DEEPSEEK_CJK, r"\p{N}")),
    **dict.fromkeys(("poro-chat", "bloom", "gpt3-finnish"), PreTokenizer(_BLOOM)),
    "viking": PreTokenizer(_BLOOM + (r"\p{N}",)),
    "seed-coder": PreTokenizer((_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+"
                                r"|\s*[\r\n]+|\s+(?!\S)|\s+",)),
}


def pre_tokenizer_of(name: str | None) -> PreTokenizer | None:
    """The pre-tokenizer a GGUF's ``tokenizer.ggml.pre`` names (llama.cpp's "default" when it names
    none); None for a name this table lacks."""
    return PRE_TOKENIZERS.get(name or "default")
