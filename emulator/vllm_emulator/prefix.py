"""Prompt prefix keys for the V1 engine's prefix cache: chained hashes of full token blocks.

As vLLM does, the key of block ``i`` hashes the key of block ``i - 1`` together with the block's own
tokens, so two prompts share the key of block ``i`` exactly when their first ``(i + 1)·block_size``
tokens are equal. Only full blocks get a key. Keys are Python hashes: stable within a process (the
cache lives in one process), which is all that matters here.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence

from vllm_emulator.tokenizer import tokenize

__all__ = ["block_keys", "chat_tokens"]


def block_keys(tokens: Sequence[Hashable], block_size: int) -> tuple[int, ...]:
    """The keys of the full blocks of ``tokens`` (token strings or ids)."""
    keys: list[int] = []
    previous = 0
    for start in range(0, len(tokens) - block_size + 1, block_size):
        previous = hash((previous, tuple(tokens[start : start + block_size])))
        keys.append(previous)
    return tuple(keys)


def chat_tokens(messages: Iterable[Mapping[str, object]]) -> list[str]:
    """A chat prompt as tokens: each message's role and text between template markers.

    As many tokens as :func:`~vllm_emulator.tokenizer.count_chat_tokens` counts: four per message
    (start, role, separator, end) around its text, and two to open the answer.
    """
    out: list[str] = []
    for message in messages:
        out += ["<|start|>", str(message.get("role")), "<|sep|>"]
        content = message.get("content")
        if isinstance(content, str):
            out += tokenize(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                    out += tokenize(str(part["text"]))
        out.append("<|end|>")
    out += ["<|start|>", "assistant"]
    return out
