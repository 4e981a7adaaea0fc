"""The deterministic tokenizer and the exact-length text generator."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vllm_emulator.tokenizer import (
    CHAT_MESSAGE_OVERHEAD,
    CHAT_PROMPT_OVERHEAD,
    WORDS,
    count_chat_tokens,
    count_tokens,
    generate_text,
    generate_tokens,
    tokenize,
)


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", []),
        ("Hello, world!", ["Hello", ",", " world", "!"]),
        ("internationalization", ["inter", "natio", "naliz", "ation"]),
        ("12345", ["123", "45"]),
        ("a   b", ["a", "  ", " b"]),
        ("a\n\nb", ["a", "\n", "\n", "b"]),
        ("x_y", ["x", "_", "y"]),
        ("  ", ["  "]),
    ],
)
def test_tokenize_rules(text: str, tokens: list[str]) -> None:
    assert tokenize(text) == tokens
    assert count_tokens(text) == len(tokens)


def test_counts_tokens_not_characters() -> None:
    sentence = "The quick brown fox jumps over the lazy dog."
    assert count_tokens(sentence) == 10
    assert count_tokens(sentence) < len(sentence) / 3


@given(st.text(max_size=300))
def test_tokenize_is_lossless_and_deterministic(text: str) -> None:
    pieces = tokenize(text)
    assert "".join(pieces) == text
    assert count_tokens(text) == len(pieces) == len(tokenize(text))
    assert all(pieces)


@given(st.integers(min_value=0, max_value=2000), st.integers(min_value=0, max_value=10_000))
def test_generated_text_has_exactly_the_requested_tokens(n: int, offset: int) -> None:
    assert count_tokens(generate_text(n, offset)) == n
    assert len(generate_tokens(n, offset)) == n


def test_every_word_is_one_token() -> None:
    assert all(count_tokens(word) == 1 for word in WORDS)
    assert len(set(WORDS)) == len(WORDS)


def test_chat_counting_adds_template_overheads() -> None:
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hello there"}, {"type": "image_url"}]},
        {"role": "assistant", "content": None},
    ]
    expected = (
        CHAT_PROMPT_OVERHEAD
        + 3 * CHAT_MESSAGE_OVERHEAD
        + count_tokens("Be brief.")
        + count_tokens("Hello there")
    )
    assert count_chat_tokens(messages) == expected
