"""The OpenAI-compatible request validation and response bodies of the emulator (no I/O here).

Only the fields that change what the emulator does are interpreted (``model``, ``prompt`` /
``messages``, ``max_tokens`` / ``max_completion_tokens``, ``n``, ``stream``, ``stream_options``);
sampling parameters (``temperature``, ``top_p``, ...) are accepted and ignored, as they do not change
the timing of a real server either.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vllm_emulator.prefix import block_keys, chat_tokens
from vllm_emulator.tokenizer import count_chat_tokens, count_tokens, tokenize

__all__ = [
    "MAX_PROMPTS",
    "ApiError",
    "ParsedRequest",
    "error_body",
    "max_body_bytes",
    "parse_chat",
    "parse_completion",
]


class ApiError(Exception):
    """An error answered to the client as an OpenAI error body."""

    def __init__(
        self, status: int, message: str, *, type_: str = "invalid_request_error", param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param

    def body(self) -> dict[str, Any]:
        code: str | int = self.status
        if self.status == 404 and self.param == "model":
            code = "model_not_found"
        return error_body(self.message, self.type, self.param, code)


def error_body(message: str, type_: str, param: str | None, code: str | int) -> dict[str, Any]:
    """OpenAI's error format: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    """A validated request: one prompt token count per choice, and how to answer."""

    kind: str  # "completion" or "chat"
    model: str
    prompt_tokens: tuple[int, ...]
    max_tokens: int | None
    stream: bool
    include_usage: bool
    prompt_keys: tuple[tuple[int, ...], ...] = ()
    """Per prompt, its full blocks' prefix keys (only when the parser was given a block size)."""


MAX_PROMPTS = 256
"""Prompts one completions request may carry (each becomes a sequence; vLLM has no such cap, but an
emulator that turns a 20,000-prompt list into 20,000 sequences helps nobody)."""


def max_body_bytes(max_model_len: int) -> int:
    """The largest request body accepted: room for several full-length prompts of ordinary text (a
    token is a few bytes of JSON) plus the request's other fields; anything larger cannot be a valid
    request for this model length and is refused (413) before it is read or tokenised."""
    return 1024 * 1024 + 64 * max_model_len


def _decode(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"malformed JSON body: {exc}") from None
    except RecursionError:
        raise ApiError(400, "malformed JSON body: nested too deeply") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def _int_field(body: Mapping[str, Any], name: str, *, minimum: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"'{name}' must be an integer", param=name)
    if value < minimum:
        raise ApiError(400, f"'{name}' must be >= {minimum}, got {value}", param=name)
    return value


def _common(body: Mapping[str, Any], served_model: str) -> tuple[str, bool, bool]:
    model = body.get("model")
    if model is None:
        raise ApiError(400, "missing required field 'model'", param="model")
    if not isinstance(model, str):
        raise ApiError(400, "'model' must be a string", param="model")
    if model != served_model:
        raise ApiError(404, f"The model `{model}` does not exist.", param="model")
    n = _int_field(body, "n", minimum=1)
    if n is not None and n != 1:
        raise ApiError(400, "only n=1 is supported by the emulator", param="n")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise ApiError(400, "'stream' must be a boolean", param="stream")
    include_usage = False
    options = body.get("stream_options")
    if options is not None:
        if not stream:
            raise ApiError(
                400, "Stream options can only be defined when `stream=True`.", param="stream_options"
            )
        if not isinstance(options, dict):
            raise ApiError(400, "'stream_options' must be an object", param="stream_options")
        flag = options.get("include_usage", False)
        if flag is not None and not isinstance(flag, bool):
            raise ApiError(400, "'stream_options.include_usage' must be a boolean", param="stream_options")
        include_usage = bool(flag)
    return model, stream, include_usage


def _check_length(prompt_tokens: int, max_tokens: int | None, max_model_len: int) -> None:
    if max_tokens is None:
        if prompt_tokens >= max_model_len:
            raise ApiError(
                400,
                f"This model's maximum context length is {max_model_len} tokens. However, your request has "
                f"{prompt_tokens} input tokens. Please reduce the length of the input messages.",
                param="messages",
            )
        return
    total = prompt_tokens + max_tokens
    if total > max_model_len:
        raise ApiError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{total} tokens ({prompt_tokens} in the messages, {max_tokens} in the completion). Please "
            "reduce the length of the messages or completion.",
            param="max_tokens",
        )


def _prompt_counts(prompt: object) -> tuple[int, ...]:
    """Token counts of a completions ``prompt``: a string, token ids, or a list of either."""
    if isinstance(prompt, str):
        return (count_tokens(prompt),) if prompt else ()
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
            return (len(prompt),)
        if all(isinstance(p, str) for p in prompt):
            return tuple(count_tokens(p) for p in prompt)
        if all(
            isinstance(p, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in p)
            for p in prompt
        ):
            return tuple(len(p) for p in prompt)
    raise ApiError(400, "'prompt' must be a string, a list of strings, or token ids", param="prompt")


def _prompt_keys(prompt: object, block_size: int) -> tuple[tuple[int, ...], ...]:
    """Prefix keys of each prompt of a (validated) completions ``prompt``."""
    if isinstance(prompt, str):
        return (block_keys(tokenize(prompt), block_size),)
    assert isinstance(prompt, list)
    if all(isinstance(p, int) for p in prompt):
        return (block_keys(prompt, block_size),)
    return tuple(
        block_keys(tokenize(p) if isinstance(p, str) else p, block_size)
        for p in prompt
        if isinstance(p, str | list)
    )


def parse_completion(raw: bytes, served_model: str, max_model_len: int, block_size: int = 0) -> ParsedRequest:
    """Validate a ``POST /v1/completions`` body; raises :class:`ApiError`.

    With ``block_size > 0`` the prompts' prefix keys are computed too (for the V1 engine's cache).
    """
    body = _decode(raw)
    if "prompt" not in body:
        raise ApiError(400, "missing required field 'prompt'", param="prompt")
    model, stream, include_usage = _common(body, served_model)
    prompt = body["prompt"]
    if (
        isinstance(prompt, list)
        and len(prompt) > MAX_PROMPTS
        and not all(isinstance(p, int) and not isinstance(p, bool) for p in prompt)
    ):
        raise ApiError(400, f"at most {MAX_PROMPTS} prompts per request, got {len(prompt)}", param="prompt")
    counts = _prompt_counts(prompt)
    if not counts or any(c == 0 for c in counts):
        raise ApiError(400, "the prompt must not be empty", param="prompt")
    if stream and len(counts) > 1:
        raise ApiError(400, "streaming is supported for a single prompt only", param="prompt")
    max_tokens = _int_field(body, "max_tokens", minimum=1)
    for count in counts:
        _check_length(count, max_tokens, max_model_len)
    keys = _prompt_keys(body["prompt"], block_size) if block_size > 0 else ()
    return ParsedRequest("completion", model, counts, max_tokens, stream, include_usage, keys)


def parse_chat(raw: bytes, served_model: str, max_model_len: int, block_size: int = 0) -> ParsedRequest:
    """Validate a ``POST /v1/chat/completions`` body; raises :class:`ApiError`."""
    body = _decode(raw)
    if "messages" not in body:
        raise ApiError(400, "missing required field 'messages'", param="messages")
    model, stream, include_usage = _common(body, served_model)
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list", param="messages")
    if len(messages) > max_model_len:  # every message costs tokens: more cannot fit
        raise ApiError(400, f"{len(messages)} messages cannot fit {max_model_len} tokens", param="messages")
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ApiError(400, "every message must be an object with a string 'role'", param="messages")
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise ApiError(400, "a message's 'content' must be a string or a list of parts", param="messages")
    max_tokens = _int_field(body, "max_completion_tokens", minimum=1)
    if max_tokens is None:
        max_tokens = _int_field(body, "max_tokens", minimum=1)
    count = count_chat_tokens(messages)
    _check_length(count, max_tokens, max_model_len)
    keys = (block_keys(chat_tokens(messages), block_size),) if block_size > 0 else ()
    return ParsedRequest("chat", model, (count,), max_tokens, stream, include_usage, keys)


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def completion_body(
    request_id: str, *, created: int, model: str, choices: list[tuple[str, str]], prompt: int, completion: int
) -> dict[str, Any]:
    """A non-streaming ``text_completion``; ``choices`` holds ``(text, finish_reason)`` pairs."""
    return {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": i, "text": text, "logprobs": None, "finish_reason": reason, "stop_reason": None}
            for i, (text, reason) in enumerate(choices)
        ],
        "usage": usage(prompt, completion),
    }


def chat_body(
    request_id: str, *, created: int, model: str, text: str, reason: str, prompt: int, completion: int
) -> dict[str, Any]:
    """A non-streaming ``chat.completion``."""
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": None,
            }
        ],
        "usage": usage(prompt, completion),
    }


class ChunkEncoder:
    """Server-sent-event lines for one streamed request, one ``data:`` event per token."""

    __slots__ = ("_head", "_kind", "_prompt", "_tail_open")

    def __init__(self, kind: str, request_id: str, created: int, model: str, prompt_tokens: int) -> None:
        self._kind = kind
        self._prompt = prompt_tokens
        obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
        self._head = (
            f'data: {{"id":{json.dumps(request_id)},"object":"{obj}","created":{created},'
            f'"model":{json.dumps(model)},"choices":'
        )
        self._tail_open = '[{"index":0,'

    def role(self) -> str:
        """The chat stream's opening event (the assistant role, empty content)."""
        return (
            f'{self._head}{self._tail_open}"delta":{{"role":"assistant","content":""}},'
            '"logprobs":null,"finish_reason":null}]}\n\n'
        )

    def token(self, text: str, finish_reason: str | None) -> str:
        reason = "null" if finish_reason is None else json.dumps(finish_reason)
        if self._kind == "chat":
            payload = f'"delta":{{"content":{json.dumps(text)}}}'
        else:
            payload = f'"text":{json.dumps(text)}'
        return f'{self._head}{self._tail_open}{payload},"logprobs":null,"finish_reason":{reason}}}]}}\n\n'

    def usage(self, completion_tokens: int) -> str:
        return f'{self._head}[],"usage":{json.dumps(usage(self._prompt, completion_tokens))}}}\n\n'

    @staticmethod
    def done() -> str:
        return "data: [DONE]\n\n"
