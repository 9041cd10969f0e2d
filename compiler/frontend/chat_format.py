"""A chat template reduced to fixed strings around each message, for runtimes that do not run Jinja.

Most chat templates lay a conversation out as fixed text around each message's content: ChatML puts
``<|im_start|>ROLE\\n`` before and ``<|im_end|>\\n`` after it. ``reduce_chat_template`` finds those
strings by rendering the template with marker contents and splitting the output at the markers, then
checks the result on a few hundred random conversations, byte for byte, against the Jinja rendering.
The reduced form (``chat_format`` in chat-config.json, docs/format.md) renders as::

    begin + (default_system if the first role is not "system") +
    for each message: roles[role].prefix + content + roles[role].suffix +
    generation_prompt + end

with ``content`` stripped of surrounding whitespace (Python's ``str.strip``) when ``trim_content`` is
set (Gemma's template trims). A template whose text around a message depends on the message's
position (Llama 2 folds the system prompt into the first user turn) is refused, with the reason.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .chat_template import ChatTemplateError, TemplateRaised, check_template_syntax, render_chat_template

FORMAT_VERSION = 1
ROLES = ("system", "user", "assistant")
# How many random conversations must render identically before a reduction is accepted.
DEFAULT_SAMPLES = 240


class _Irreducible(Exception):
    """Why a template cannot be reduced."""


@dataclass(frozen=True)
class RoleFormat:
    prefix: str
    suffix: str


@dataclass(frozen=True)
class ChatFormat:
    begin: str
    default_system: str | None
    roles: dict[str, RoleFormat]
    generation_prompt: str
    end: str = ""
    trim_content: bool = False
    version: int = FORMAT_VERSION

    def render(self, messages: list[dict]) -> str:
        """The conversation laid out as the template would, with the generation prompt."""
        parts = [self.begin]
        if self.default_system is not None and messages and messages[0]["role"] != "system":
            parts.append(self.default_system)
        for message in messages:
            role = self.roles.get(message["role"])
            if role is None:
                # As the template itself would refuse it (Gemma's has no system role): an error a chat reports.
                raise TemplateRaised(f"the chat format has no role {message['role']!r} (it has "
                                     f"{', '.join(map(repr, self.roles))})")
            content = message["content"].strip() if self.trim_content else message["content"]
            parts += [role.prefix, content, role.suffix]
        parts += [self.generation_prompt, self.end]
        return "".join(parts)

    def to_json(self) -> dict:
        return {"version": self.version, "begin": self.begin, "default_system": self.default_system,
                "roles": {name: {"prefix": r.prefix, "suffix": r.suffix} for name, r in self.roles.items()},
                "generation_prompt": self.generation_prompt, "end": self.end, "trim_content": self.trim_content}

    @classmethod
    def from_json(cls, obj: dict) -> ChatFormat:
        if obj.get("version") != FORMAT_VERSION:
            raise ChatTemplateError(f"chat_format version {obj.get('version')!r} is not {FORMAT_VERSION}")
        roles = {name: RoleFormat(r["prefix"], r["suffix"]) for name, r in obj["roles"].items()}
        return cls(obj["begin"], obj["default_system"], roles, obj["generation_prompt"], obj.get("end", ""),
                   bool(obj.get("trim_content", False)))


@dataclass(frozen=True)
class Reduction:
    """The reduced form, or None with the reason it could not be had."""

    format: ChatFormat | None
    reason: str | None = None
    checked: int = 0  # conversations compared byte for byte


def reduce_chat_template(template: str, bos_token: str = "", eos_token: str = "",
                         samples: int = DEFAULT_SAMPLES, seed: int = 0) -> ChatFormat | None:
    """The template as fixed strings around each message, or None (analyze_chat_template says why)."""
    return analyze_chat_template(template, bos_token, eos_token, samples, seed).format


def analyze_chat_template(template: str, bos_token: str = "", eos_token: str = "",
                          samples: int = DEFAULT_SAMPLES, seed: int = 0) -> Reduction:
    """Reduce the template and verify the reduction on ``samples`` random conversations."""
    try:
        renderer = _Renderer(template, bos_token or "", eos_token or "")
        fmt = _derive(renderer)
        checked = _verify(renderer, fmt, samples, seed)
    except _Irreducible as error:
        return Reduction(None, str(error))
    return Reduction(fmt, None, checked)


def render_jinja(template: str, messages: list[dict], bos_token: str = "", eos_token: str = "",
                 add_generation_prompt: bool = True) -> str:
    """The template's own rendering, with the variables the reduction assumes (raise_exception raises
    TemplateRaised)."""
    return render_chat_template(template, messages, add_generation_prompt, bos_token=bos_token, eos_token=eos_token)


class _Renderer:
    def __init__(self, template, bos_token, eos_token):
        self.template, self.bos_token, self.eos_token = template, bos_token, eos_token
        try:  # a syntax error is a reason, not a crash of the compile
            check_template_syntax(template)
        except ChatTemplateError as error:
            raise _Irreducible(str(error)) from None

    def render(self, messages, add_generation_prompt=True):
        return render_jinja(self.template, messages, self.bos_token, self.eos_token, add_generation_prompt)

    def accepts(self, roles) -> bool:
        try:
            self.render([{"role": r, "content": "x"} for r in roles])
        except TemplateRaised:
            return False
        except Exception as error:
            raise _Irreducible(f"the template fails on roles {','.join(roles)}: {type(error).__name__}: "
                               f"{error}") from None
        return True

    def segments(self, roles, add_generation_prompt=True) -> list[str] | None:
        """The text around marker contents: len(roles) + 1 pieces, or None if the template refuses."""
        markers = [f"\u27e6tessera-{i}-{role}\u27e7" for i, role in enumerate(roles)]
        messages = [{"role": r, "content": m} for r, m in zip(roles, markers)]
        try:
            text = self.render(messages, add_generation_prompt)
        except TemplateRaised:
            return None
        except Exception as error:
            raise _Irreducible(f"the template fails on roles {','.join(roles)}: {type(error).__name__}: "
                               f"{error}") from None
        pieces = []
        for marker in markers:
            if text.count(marker) != 1:
                raise _Irreducible(f"the template does not print each message's content once, unchanged "
                                   f"(roles {','.join(roles)}: {marker!r} appears {text.count(marker)} times)")
            before, text = text.split(marker)
            pieces.append(before)
        pieces.append(text)
        return pieces


def _strip_prefix(text, prefix, what):
    if not text.startswith(prefix):
        raise _Irreducible(f"{what}: {text!r} does not start with {prefix!r}")
    return text[len(prefix):]


def _strip_suffix(text, suffix, what):
    if not text.endswith(suffix):
        raise _Irreducible(f"{what}: {text!r} does not end with {suffix!r}")
    return text[:len(text) - len(suffix)]


def _derive(r: _Renderer) -> ChatFormat:
    if not r.accepts(["user"]):
        raise _Irreducible("the template refuses a conversation of one user message")
    trim = _trims_content(r)
    # The end of a conversation: suffix(last) + end without the generation prompt, with it
    # suffix(last) + generation_prompt + end. The shortest `end` that explains both.
    no_prompt = r.segments(["user"], add_generation_prompt=False)
    with_prompt = r.segments(["user"])
    if no_prompt is None or with_prompt is None:
        raise _Irreducible("the template refuses a single user message with or without add_generation_prompt")
    tail, tail_gen = no_prompt[-1], with_prompt[-1]
    for k in range(len(tail) + 1):
        end, user_suffix = tail[len(tail) - k:], tail[:len(tail) - k]
        if len(tail_gen) >= len(tail) and tail_gen.endswith(end) and tail_gen.startswith(user_suffix):
            generation_prompt = tail_gen[len(user_suffix):len(tail_gen) - len(end)]
            break
    else:  # pragma: no cover - k == len(tail) always matches when tail_gen ends with tail
        raise _Irreducible(f"the generation prompt is not an insertion: {tail!r} vs {tail_gen!r}")
    if no_prompt[0] != with_prompt[0]:
        raise _Irreducible("add_generation_prompt changes the text before the first message")

    ua = r.segments(["user", "assistant"], add_generation_prompt=False)
    if ua is None:
        raise _Irreducible("the template refuses user, assistant")
    assistant_prefix = _strip_prefix(ua[1], user_suffix, "between user and assistant")
    assistant_suffix = _strip_suffix(ua[2], end, "after a final assistant message")
    uau = r.segments(["user", "assistant", "user"])
    if uau is None:
        raise _Irreducible("the template refuses user, assistant, user")
    user_prefix = _strip_prefix(uau[2], assistant_suffix, "between assistant and user")
    first_user = _strip_suffix(with_prompt[0], user_prefix,
                               "before a first user message (its prefix differs from a later user message's)")
    roles = {"user": RoleFormat(user_prefix, user_suffix), "assistant": RoleFormat(assistant_prefix, assistant_suffix)}
    begin, default_system = first_user, None

    su = r.segments(["system", "user"])
    if su is not None:
        try:
            system_suffix = _strip_suffix(su[1], user_prefix, "between system and user")
        except _Irreducible as error:
            raise _Irreducible(f"the first user message after a system message is laid out differently from "
                               f"other user messages (the template folds the system prompt into the first user "
                               f"turn, as Llama 2's does): {error}") from None
        # A system message after the first tells its prefix apart from `begin`; else their common part is `begin`.
        mid = r.segments(["user", "assistant", "system", "user"])
        system_prefix = None
        if mid is not None and mid[2].startswith(assistant_suffix):
            candidate = mid[2][len(assistant_suffix):]
            if su[0].endswith(candidate) and first_user.startswith(su[0][:len(su[0]) - len(candidate)]):
                system_prefix = candidate
        if system_prefix is None:
            n = 0
            while n < min(len(su[0]), len(first_user)) and su[0][n] == first_user[n]:
                n += 1
            system_prefix = su[0][n:]
        begin = su[0][:len(su[0]) - len(system_prefix)]
        default_system = first_user[len(begin):] or None
        roles = {"system": RoleFormat(system_prefix, system_suffix), **roles}
    return ChatFormat(begin, default_system, roles, generation_prompt, end, trim)


def _trims_content(r: _Renderer) -> bool:
    marker = "\u27e6tessera-trim\u27e7"
    padded = " \n\t" + marker + " \n"
    text = r.render([{"role": "user", "content": padded}])
    if padded in text:
        return False
    if marker in text:
        return True
    raise _Irreducible("the template does not print the message's content unchanged")


# Contents that exercise what a reduction could get wrong: whitespace at the edges (trimming),
# newlines, text that looks like Jinja or like the template's own markers, non-ASCII, nothing.
_PIECES = ["", "hello", "Hello, world!", "line one\nline two", "\n", "  padded  ", "\t tab", "{{ messages }}",
           "{% if true %}x{% endif %}", "{# comment #}", "}}{{", "{", "}", "h\u00e9llo w\u00f6rld", "\u4f60\u597d",
           "\U0001f600 emoji", "\u00a0nbsp\u3000", "\u2028sep", "<|im_end|>", "[INST]", "<s>", "</s>", "\\n",
           "'quote\"", "0", "system", "user", "assistant"]


def random_conversations(rng: random.Random, count: int, system_first: bool, system_alone: bool = True):
    """Conversations in the usual orders: an optional system message, user/assistant turns, a final user."""
    for _ in range(count):
        roles = ["system"] if system_first and rng.random() < 0.4 else []
        roles += ["user", "assistant"] * rng.choice([0, 0, 1, 1, 2, 3]) + ["user"]
        yield [{"role": role, "content": _random_content(rng)} for role in roles]


def _random_content(rng: random.Random) -> str:
    if rng.random() < 0.15:
        return rng.choice(["", " ", "\n"])
    return "".join(rng.choice(_PIECES) + rng.choice(["", " ", "\n", ""]) for _ in range(rng.randint(1, 4)))


def _verify(r: _Renderer, fmt: ChatFormat, samples: int, seed: int) -> int:
    rng = random.Random(seed)
    system_first = "system" in fmt.roles
    fixed = [["user"], ["user", "assistant", "user"], ["system", "user"], ["system", "user", "assistant", "user"]]
    conversations = [[{"role": role, "content": f"m{i}"} for i, role in enumerate(roles)]
                     for roles in fixed if system_first or "system" not in roles]
    conversations += list(random_conversations(rng, samples, system_first))
    checked = 0
    for index, messages in enumerate(conversations):
        try:
            expected = r.render(messages)
        except TemplateRaised:
            continue
        except Exception as error:
            raise _Irreducible(f"the template fails on conversation {index}: {type(error).__name__}: {error}") \
                from None
        got = fmt.render(messages)
        if got != expected:
            at = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
            roles = ",".join(m["role"] for m in messages)
            raise _Irreducible(f"the reduction differs from the template on conversation {index} (roles {roles}) "
                               f"at character {at}: template {expected[max(0, at - 20):at + 20]!r}, reduced "
                               f"{got[max(0, at - 20):at + 20]!r}")
        checked += 1
    if checked < min(samples, 200):
        raise _Irreducible(f"the template accepted only {checked} of {len(conversations)} sample conversations")
    return checked
