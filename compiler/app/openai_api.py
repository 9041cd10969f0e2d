"""The OpenAI chat completions API as `tessera serve` speaks it (docs/serve.md): a request body checked
field by field into a ``Generation``, and the JSON of replies, stream chunks and errors.

Every check is here, at the HTTP layer, so that a bad request is a 400 that names its field before
anything reaches the engine; the chat session keeps its own checks for its other callers.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from dataclasses import dataclass

from tessera.ir import TesseraError

from .chat import Sampling
from .engine import Completion, Generation

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
MAX_STOP_STRINGS = 4
MAX_SEED = (1 << 63) - 1
# Fields that would change what a reply means and that this server cannot honour: refused, not ignored.
UNSUPPORTED = {"tools": "tool calls", "functions": "function calls", "audio": "audio output",
               "prediction": "predicted outputs", "logit_bias": "logit_bias"}


class APIError(TesseraError):
    """An error the API answers with: an HTTP status and OpenAI's error object."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class ChatRequest:
    generation: Generation
    stream: bool
    include_usage: bool


def parse_chat_request(body: bytes, model_id: str) -> ChatRequest:
    """The checked request of a POST /v1/chat/completions body; an APIError (400, or 404 for another
    model) that names the first bad field."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise APIError(400, f"the request body is not valid JSON: {error}") from None
    if not isinstance(doc, dict):
        raise APIError(400, "the request body must be a JSON object")
    model = doc.get("model")
    if model is not None and model != model_id:
        raise APIError(404, f"the model {model!r} does not exist: this server serves {model_id!r}", param="model",
                       code="model_not_found")
    for name, what in UNSUPPORTED.items():
        if doc.get(name) not in (None, [], {}):
            raise APIError(400, f"{what} are not supported by this server", param=name, code="unsupported_parameter")
    if doc.get("tool_choice") not in (None, "none"):
        raise APIError(400, "tool calls are not supported by this server", param="tool_choice",
                       code="unsupported_parameter")
    if doc.get("logprobs") or doc.get("top_logprobs"):
        raise APIError(400, "logprobs are not supported by this server", param="logprobs",
                       code="unsupported_parameter")
    response_format = doc.get("response_format")
    if response_format is not None and (not isinstance(response_format, dict) or response_format.get("type") != "text"):
        raise APIError(400, "only the text response_format is supported", param="response_format",
                       code="unsupported_parameter")
    for name in ("presence_penalty", "frequency_penalty"):
        if _number(doc, name, -2.0, 2.0, 0.0) != 0.0:
            raise APIError(400, f"{name} is not supported by this server (repetition_penalty is)", param=name,
                           code="unsupported_parameter")
    n = doc.get("n")
    if n is not None and (_integer(doc, "n", 1) != 1):
        raise APIError(400, f"n = {n}: this server returns one choice per request (n = 1)", param="n")
    stream = doc.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise APIError(400, f"stream must be true or false, not {stream!r}", param="stream")
    options = doc.get("stream_options")
    if options is not None:
        if not stream:
            raise APIError(400, "stream_options is only allowed when stream is true", param="stream_options")
        if not isinstance(options, dict) or not isinstance(options.get("include_usage", False), bool):
            raise APIError(400, "stream_options must be an object whose include_usage is true or false",
                           param="stream_options")
    max_tokens = _integer(doc, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _integer(doc, "max_tokens", 1)
    sampling = Sampling(temperature=_number(doc, "temperature", 0.0, 2.0, 1.0),
                        top_k=_integer(doc, "top_k", 0) or 0,
                        top_p=_number(doc, "top_p", 0.0, 1.0, 1.0, open_low=True),
                        repetition_penalty=_number(doc, "repetition_penalty", 0.0, 10.0, 1.0, open_low=True),
                        seed=_integer(doc, "seed", 0, MAX_SEED))
    generation = Generation(_messages(doc.get("messages")), max_tokens, sampling, _stop(doc.get("stop")))
    return ChatRequest(generation, stream, bool(options and options.get("include_usage")))


def _messages(messages) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise APIError(400, "messages must be a non-empty array of {role, content} objects", param="messages")
    checked = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise APIError(400, f"{where} is not an object", param=where)
        role = message.get("role")
        if role not in ROLES:
            raise APIError(400, f"{where}.role is {role!r}; this server takes {', '.join(ROLES)}",
                           param=f"{where}.role")
        checked.append({"role": ROLES[role], "content": _content(message.get("content"), f"{where}.content")})
    return checked


def _content(content, where: str) -> str:
    """A message's text: a string, or an array of text parts (joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise APIError(400, f"{where} has a {kind!r} part; this server takes text parts only", param=where)
            texts.append(part["text"])
        return "".join(texts)
    raise APIError(400, f"{where} must be a string or an array of text parts", param=where)


def _stop(stop) -> tuple[str, ...]:
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if (not isinstance(stops, list) or len(stops) > MAX_STOP_STRINGS
            or not all(isinstance(s, str) and s for s in stops)):
        raise APIError(400, f"stop must be a non-empty string or an array of at most {MAX_STOP_STRINGS} of them",
                       param="stop")
    return tuple(stops)


def _number(doc: dict, name: str, low: float, high: float, default: float, open_low: bool = False) -> float:
    value = doc.get(name)
    if value is None:
        return default
    if (isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
            or value < low or value > high or (open_low and value == low)):
        bounds = f"{'(' if open_low else '['}{low:g}, {high:g}]"
        raise APIError(400, f"{name} must be a number in {bounds}, not {value!r}", param=name)
    return float(value)


def _integer(doc: dict, name: str, low: int, high: int | None = None) -> int | None:
    value = doc.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        raise APIError(400, f"{name} must be a whole number of at least {low}"
                       + (f" and at most {high}" if high is not None else "") + f", not {value!r}", param=name)
    return value


class ReplyIds:
    """The id and creation time one reply's chunks share."""

    def __init__(self, model_id: str):
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model_id

    def chunk(self, delta: dict, finish_reason: str | None = None, usage: dict | None = None, choices=True) -> dict:
        body = {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "system_fingerprint": None,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
                if choices else []}
        if usage is not None:
            body["usage"] = usage
        return body

    def completion(self, completion: Completion) -> dict:
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "system_fingerprint": None,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": completion.text, "refusal": None},
                             "logprobs": None, "finish_reason": completion.finish_reason}],
                "usage": usage(completion)}


def usage(completion: Completion) -> dict:
    """OpenAI's usage, with the speeds under ``extra`` as the browser runtime (and WebLLM) report them."""
    prefilled = completion.prompt_tokens - completion.cached_tokens
    return {"prompt_tokens": completion.prompt_tokens, "completion_tokens": completion.completion_tokens,
            "total_tokens": completion.prompt_tokens + completion.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": completion.cached_tokens},
            "extra": {"prefill_tokens": prefilled, "prefill_tokens_per_s": completion.prefill_tokens_per_s,
                      "decode_tokens_per_s": completion.decode_tokens_per_s}}


def models_list(model_id: str, created: int) -> dict:
    return {"object": "list", "data": [model_card(model_id, created)]}


def model_card(model_id: str, created: int) -> dict:
    return {"id": model_id, "object": "model", "created": created, "owned_by": "tessera"}
