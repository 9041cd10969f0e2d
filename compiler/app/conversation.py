"""A conversation made to fit a model's context: what `tessera chat`, the OpenAI-compatible server and
runtime-js's engine (runtime-js/src/conversation.js, the same rules) send to the model.

When a conversation no longer fits, its oldest turns are left out, the system prompt kept, and the
caller tells the user (``FittedConversation.notice``), as Ollama and llama.cpp's server do. A turn
starts at a user message, so what remains still starts with one. The reply gets room too: the
prompt is cut to leave ``min(max_tokens, context_length // 2)`` positions for it where dropping
turns can, and it must leave one at least.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tessera.ir import TesseraError


class ChatError(TesseraError):
    """A turn that cannot be run: a bad request (no messages, an empty prompt, max_tokens < 1), or a
    last turn longer than the context window."""


@dataclass(frozen=True)
class FittedConversation:
    messages: list[dict]  # the system prompt, if any, then the newest turns that fit
    prompt_ids: list[int]  # their tokens, as ``encode`` gave them
    dropped: int  # messages left out: the oldest, after the system prompt
    context_length: int

    @property
    def notice(self) -> str | None:
        """What to tell the user when messages were left out; None when none were."""
        if not self.dropped:
            return None
        kept = " (the system prompt is kept)" if self.messages and self.messages[0].get("role") == "system" else ""
        left = "the oldest message was" if self.dropped == 1 else f"the {self.dropped} oldest messages were"
        return (f"the conversation no longer fits the model's context of {self.context_length} tokens: {left} "
                f"left out{kept}")


def check_max_tokens(max_tokens) -> int:
    """``max_tokens`` as a number of tokens to generate, at least one; ChatError otherwise."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ChatError(f"max_tokens must be a whole number of at least 1, not {max_tokens!r}")
    return max_tokens


def check_messages(messages) -> list[dict]:
    """A conversation: a non-empty list of {"role": str, "content": str} whose last message (the prompt)
    has some text; ChatError otherwise."""
    if not isinstance(messages, list) or not messages:
        raise ChatError("the conversation has no messages (messages must be a non-empty list)")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str) or not message["role"] \
                or not isinstance(message.get("content"), str):
            raise ChatError(f"message {index} is not an object with a role and a content, both strings")
    if not messages[-1]["content"].strip():
        raise ChatError("the prompt is empty: the last message has no text")
    return messages


def fit_conversation(messages: list[dict], encode: Callable[[list[dict]], list[int]], context_length: int,
                     max_tokens: int) -> FittedConversation:
    """``messages`` (checked by check_messages; max_tokens by check_max_tokens) made to fit
    ``context_length`` tokens with room for the reply: the oldest turns after the system prompt are
    left out until ``encode`` (the chat template and tokenizer) gives few enough tokens. ChatError when
    even the system prompt and the last turn do not fit."""
    check_messages(messages)
    check_max_tokens(max_tokens)
    head = 0
    while head < len(messages) - 1 and messages[head]["role"] == "system":
        head += 1
    # Where the kept part may start: the first message after the system prompt, or a later user message.
    starts = [head] + [i for i in range(head + 1, len(messages)) if messages[i]["role"] == "user"]
    # Every message a template lays out costs a token at least, so a start more than context_length
    # messages back cannot fit: left out before anything is rendered, a long history costs no more to
    # fit than a context's worth of it (a client resends the whole chat with every turn).
    reachable = [i for i in starts if len(messages) - i <= context_length]
    starts = reachable or starts[-1:]
    room = context_length - min(max_tokens, context_length // 2)  # for the prompt, leaving the reply its room
    limit = context_length - 1  # the most a prompt may have: one position for the reply at least

    def kept(start: int) -> tuple[list[dict], list[int]]:
        chosen = messages[:head] + messages[start:]
        return chosen, encode(chosen)

    chosen, ids = kept(starts[0])
    if len(ids) > room and len(starts) > 1:
        # The fewest turns left out that leave the reply its room (each turn left out takes tokens
        # away); when no number does, all turns but the last.
        low, high = 1, len(starts) - 1
        best = kept(starts[high])
        if len(best[1]) <= room:
            while low < high:  # best is kept(starts[high]), and fits
                middle = (low + high) // 2
                candidate = kept(starts[middle])
                if len(candidate[1]) <= room:
                    high, best = middle, candidate
                else:
                    low = middle + 1
        chosen, ids = best
    if not ids:
        raise ChatError("the prompt is empty once laid out by the chat template and tokenized")
    if len(ids) > limit:
        only = "only its last turn" + (" and the system prompt" if head else "")
        raise ChatError(f"the prompt has {len(ids)} tokens; the context window is {context_length} (with room for "
                        f"one reply token), even with {only}: shorten the message, or use a build with a larger "
                        "context (--context)")
    return FittedConversation(chosen, ids, len(messages) - len(chosen), context_length)
