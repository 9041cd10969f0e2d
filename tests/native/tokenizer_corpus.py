"""Deterministic test strings for comparing tokenizers: many scripts, emoji (ZWJ sequences, skin
tones, flags), code, whitespace runs, digits of many lengths, contractions, punctuation, and special
tokens inside text. Same seed, same strings."""

from __future__ import annotations

import random

SCRIPTS = {
    "latin": [(0x61, 0x7A), (0x41, 0x5A), (0xC0, 0xFF), (0x100, 0x17F)],
    "cyrillic": [(0x410, 0x44F)],
    "greek": [(0x391, 0x3A9), (0x3B1, 0x3C9), (0x3AC, 0x3AF)],
    "cjk": [(0x4E00, 0x9FFF), (0x3041, 0x3096), (0x30A1, 0x30FA)],
    "arabic": [(0x621, 0x64A), (0x660, 0x669)],
    "devanagari": [(0x905, 0x939), (0x93E, 0x94D), (0x966, 0x96F)],
    "thai": [(0xE01, 0xE2E), (0xE30, 0xE3A), (0xE50, 0xE59)],
    "hangul": [(0xAC00, 0xD7A3)],
}

EMOJI = ["😀", "😂", "🥲", "👍", "👍🏽", "👋🏿", "❤️", "✨", "🚀", "🇫🇷", "🇯🇵", "👨‍👩‍👧‍👦", "🧑🏻‍💻",
         "🏳️‍🌈", "👩‍❤️‍👨", "🐈‍⬛", "1️⃣", "©", "™", "🫠"]

WORDS = ["the", "The", "hello", "world", "tokenizer", "Tessera", "compile", "naïve", "café", "Straße", "über",
         "привет", "мир", "γειά", "κόσμε", "你好", "世界", "こんにちは", "مرحبا", "नमस्ते", "สวัสดี", "안녕하세요",
         "HTTP", "JSONParser", "x86_64", "e.g.", "U.S.A.", "snake_case", "camelCase", "kebab-case"]

CONTRACTIONS = ["I'm", "don't", "they're", "we've", "she'll", "he'd", "it's", "It's", "IT'S", "DON'T", "'s", "'t",
                "'re", "'ve", "'m", "'ll", "'d", "can't", "y'all", "o'clock", "rock 'n' roll", "’s", "don’t"]

PUNCT = list("!?.,;:…—–-()[]{}\"'`~@#$%^&*_+=|\\/<>«»¿¡·•§¶°")

WHITESPACE = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2009", "\u200b",
              "\u0085", "\u2028", " \n ", "\n \n", "    ", "\t \t", " \u00a0 ", "\f", "\v"]

CODE = [
    "def f(x):\n    return x * 2\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    "const x = await fetch(`/api/${id}`);",
    "SELECT * FROM users WHERE id = 42;",
    "#include <stdio.h>\nint main(void) { printf(\"hi\\n\"); }",
    "if a != b and not c:\n        pass  # comment",
    "<div class=\"a\">Hello &amp; bye</div>",
    "x = [1, 2, 3]  # list\ny = {'a': 1}",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "$ ls -la | grep '.py' && echo done",
    "    indented\n        more\n\t\ttabs",
    "λx.x + 1 ≠ 2 ≥ 3 → ∞",
]


def _word(rng: random.Random, script: str) -> str:
    ranges = SCRIPTS[script]
    return "".join(chr(rng.randint(*rng.choice(ranges))) for _ in range(rng.randint(1, 8)))


def _digits(rng: random.Random) -> str:
    n = rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 16, 20, 33, 40])
    s = "".join(rng.choice("0123456789") for _ in range(n))
    return rng.choice([s, s, f"{s}.{rng.randint(0, 99)}", f"-{s}", f"{s[:3]},{s[3:6]}", "٣٤٥", "१२३", "½", "²³"])


def _piece(rng: random.Random, specials: list[str]) -> str:
    kind = rng.random()
    if kind < 0.30:
        return _word(rng, rng.choice(list(SCRIPTS)))
    if kind < 0.42:
        return rng.choice(WORDS)
    if kind < 0.50:
        return rng.choice(EMOJI)
    if kind < 0.58:
        return _digits(rng)
    if kind < 0.66:
        return rng.choice(CONTRACTIONS)
    if kind < 0.76:
        return "".join(rng.choice(PUNCT) for _ in range(rng.randint(1, 3)))
    if kind < 0.90:
        return rng.choice(WHITESPACE)
    if kind < 0.95 and specials:
        return rng.choice(specials)
    return rng.choice(CODE)


def corpus(count: int, specials: list[str] | None = None, seed: int = 1234) -> list[str]:
    """`count` strings; the first ones are fixed edge cases, the rest random mixes of pieces."""
    rng = random.Random(seed)
    specials = specials or []
    fixed = ["", " ", "  ", "\n", "\r\n", "\t", "a", "A", "0", "00", "000", "0000", "1234567890", "Hello world",
             " Hello world", "Hello  world", "Hello\u00a0world", "hello\r\nworld\r\n", "   leading", "trailing   ",
             "I'm here. It's 'quoted' and they'RE", "👨‍👩‍👧‍👦👍🏽🇫🇷", "\u200d", "\ufeffBOM", "a\u0301", "ﬁ",
             "x" * 300, " " * 50 + "x", "\n" * 10, "🙂" * 20, "3.14159265358979", "$1,000,000.00"]
    for s in specials:
        fixed += [s, f"{s}{s}", f" {s} ", f"Hi{s}there", f"{s}\nx", s[:-1]]
    out = fixed[:count]
    while len(out) < count:
        n = rng.choice([1, 2, 3, 5, 8, 13, 30])
        sep = rng.choice(["", " ", " ", " ", "\n", ""])
        out.append(sep.join(_piece(rng, specials) for _ in range(n)))
    return out
