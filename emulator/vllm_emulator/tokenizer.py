"""A deterministic stand-in tokenizer: counts tokens the way a BPE tokenizer roughly does, not characters.

Rules (applied left to right by one regular expression, so counting is linear and stable):

* a run of letters is cut into pieces of at most 5 letters, the first piece carrying one leading space;
* a run of digits is cut into pieces of at most 3 digits (as Llama 3 and GPT-4 tokenizers do);
* every other visible character (punctuation, symbols) is one token, with its leading space;
* a run of whitespace not attached to a following word is one token.

English prose comes out at about 1.3 tokens per word, close to real tokenizers; the exact number only
has to be stable, since the emulator's latency model is driven by it.

:func:`generate_text` produces text that tokenizes to exactly the requested number of tokens (one
short word per token), so ``count_tokens(generate_text(n)) == n``; the emulator streams one word per
token and the load generator builds prompts of an exact length with it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

__all__ = [
    "CHAT_MESSAGE_OVERHEAD",
    "CHAT_PROMPT_OVERHEAD",
    "WORDS",
    "count_chat_tokens",
    "count_tokens",
    "generate_text",
    "generate_tokens",
    "tokenize",
]

_TOKEN_RE = re.compile(r" ?[^\W\d_]{1,5}| ?\d{1,3}| ?[^\w\s]| ?_|\s+(?=\s\S)|\s+")

CHAT_MESSAGE_OVERHEAD = 4
"""Tokens a chat template adds per message (start marker, role, separator, end marker)."""
CHAT_PROMPT_OVERHEAD = 2
"""Tokens a chat template adds after the last message to open the assistant's turn."""

WORDS: tuple[str, ...] = (
    " the", " of", " and", " to", " in", " is", " that", " for", " it", " as",
    " with", " was", " on", " be", " at", " by", " this", " had", " not", " are",
    " but", " from", " or", " have", " an", " they", " which", " one", " you", " were",
    " all", " we", " her", " she", " there", " would", " their", " will", " when", " who",
    " him", " been", " has", " more", " if", " no", " out", " so", " said", " what",
    " up", " its", " about", " into", " than", " them", " can", " only", " other", " new",
    " some", " could", " time", " these", " two", " may", " then", " do", " first", " any",
    " my", " now", " such", " like", " our", " over", " man", " me", " even", " most",
    " made", " after", " also", " did", " many", " model", " token", " batch", " queue", " cache",
    " rate", " load", " slo", " gpu", " pod", " node", " scale", " fast", " slow", " data",
)  # fmt: skip
"""One-token words (each tokenizes to exactly one token, leading space included)."""


def tokenize(text: str) -> list[str]:
    """Split ``text`` into tokens; ``"".join(tokenize(text)) == text``."""
    return _TOKEN_RE.findall(text)


def count_tokens(text: str) -> int:
    """Number of tokens in ``text``."""
    if not text:
        return 0
    return len(_TOKEN_RE.findall(text))


def count_chat_tokens(messages: Iterable[Mapping[str, object]]) -> int:
    """Prompt tokens of a chat request: each message's text plus the template's fixed overheads.

    A message's ``content`` is a string or a list of parts; only ``{"type": "text", "text": ...}``
    parts are counted. Callers validate the shape first.
    """
    total = CHAT_PROMPT_OVERHEAD
    for message in messages:
        total += CHAT_MESSAGE_OVERHEAD
        content = message.get("content")
        if isinstance(content, str):
            total += count_tokens(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                    total += count_tokens(str(part["text"]))
    return total


def generate_tokens(n: int, offset: int = 0) -> list[str]:
    """``n`` one-token words, starting at position ``offset`` of a fixed cycle (deterministic)."""
    size = len(WORDS)
    return [WORDS[(offset + i) % size] for i in range(n)]


def generate_text(n: int, offset: int = 0) -> str:
    """Text of exactly ``n`` tokens."""
    return "".join(generate_tokens(n, offset))
