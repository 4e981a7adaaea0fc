"""OpenAI request validation and response bodies."""

from __future__ import annotations

import json

import pytest

from vllm_emulator.protocol import ApiError, ChunkEncoder, parse_chat, parse_completion
from vllm_emulator.tokenizer import count_chat_tokens, count_tokens

MODEL = "org/m"


def body(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def test_completion_prompt_forms() -> None:
    assert parse_completion(body(model=MODEL, prompt="Hello there"), MODEL, 100).prompt_tokens == (2,)
    assert parse_completion(body(model=MODEL, prompt=[1, 2, 3]), MODEL, 100).prompt_tokens == (3,)
    assert parse_completion(body(model=MODEL, prompt=["a b", "c"]), MODEL, 100).prompt_tokens == (2, 1)
    assert parse_completion(body(model=MODEL, prompt=[[1], [2, 3]]), MODEL, 100).prompt_tokens == (1, 2)


def test_completion_options() -> None:
    parsed = parse_completion(
        body(model=MODEL, prompt="x", max_tokens=7, stream=True, stream_options={"include_usage": True},
             temperature=0.3, n=1),
        MODEL,
        100,
    )  # fmt: skip
    assert (parsed.max_tokens, parsed.stream, parsed.include_usage, parsed.kind) == (
        7,
        True,
        True,
        "completion",
    )


def test_chat_counts_the_template() -> None:
    messages = [{"role": "user", "content": "How are you today?"}]
    parsed = parse_chat(body(model=MODEL, messages=messages, max_completion_tokens=3), MODEL, 100)
    assert parsed.prompt_tokens == (count_chat_tokens(messages),)
    assert parsed.prompt_tokens[0] > count_tokens("How are you today?")
    assert parsed.max_tokens == 3


@pytest.mark.parametrize(
    ("raw", "status", "param"),
    [
        (b"{not json", 400, None),
        (b"[1, 2]", 400, None),
        (body(prompt="x"), 400, "model"),
        (body(model=MODEL), 400, "prompt"),
        (body(model="other", prompt="x"), 404, "model"),
        (body(model=7, prompt="x"), 400, "model"),
        (body(model=MODEL, prompt=""), 400, "prompt"),
        (body(model=MODEL, prompt=[]), 400, "prompt"),
        (body(model=MODEL, prompt={"a": 1}), 400, "prompt"),
        (body(model=MODEL, prompt="x", max_tokens=0), 400, "max_tokens"),
        (body(model=MODEL, prompt="x", max_tokens="5"), 400, "max_tokens"),
        (body(model=MODEL, prompt="x", max_tokens=True), 400, "max_tokens"),
        (body(model=MODEL, prompt="x", max_tokens=100), 400, "max_tokens"),  # 1 + 100 > 100
        (body(model=MODEL, prompt=list(range(100))), 400, "messages"),  # no room for output
        (body(model=MODEL, prompt="x", n=2), 400, "n"),
        (body(model=MODEL, prompt="x", stream="yes"), 400, "stream"),
        (body(model=MODEL, prompt="x", stream_options={"include_usage": True}), 400, "stream_options"),
        (body(model=MODEL, prompt=["a", "b"], stream=True), 400, "prompt"),
    ],
)
def test_completion_errors(raw: bytes, status: int, param: str | None) -> None:
    with pytest.raises(ApiError) as info:
        parse_completion(raw, MODEL, 100)
    assert info.value.status == status
    assert info.value.param == param
    error = info.value.body()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]


@pytest.mark.parametrize(
    "fields",
    [
        {"model": MODEL},
        {"model": MODEL, "messages": []},
        {"model": MODEL, "messages": "hi"},
        {"model": MODEL, "messages": [{"content": "no role"}]},
        {"model": MODEL, "messages": [{"role": "user", "content": 5}]},
    ],
)
def test_chat_errors(fields: dict[str, object]) -> None:
    with pytest.raises(ApiError) as info:
        parse_chat(body(**fields), MODEL, 100)
    assert info.value.status == 400


def test_unknown_model_error_is_openais() -> None:
    with pytest.raises(ApiError) as info:
        parse_chat(body(model="nope", messages=[{"role": "user", "content": "x"}]), MODEL, 100)
    assert info.value.body() == {
        "error": {
            "message": "The model `nope` does not exist.",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
    }


@pytest.mark.parametrize("kind", ["completion", "chat"])
def test_stream_chunks_are_valid_server_sent_events(kind: str) -> None:
    enc = ChunkEncoder(kind, 'id-"1"', 123, "m/x", prompt_tokens=9)
    events = [enc.token(" a", None), enc.token(' "b"', "length"), enc.usage(2)]
    if kind == "chat":
        events.insert(0, enc.role())
    for event in events:
        assert event.startswith("data: ") and event.endswith("\n\n")
        json.loads(event[len("data: ") :])
    last_token = json.loads(events[-2][6:])
    assert last_token["choices"][0]["finish_reason"] == "length"
    assert last_token["id"] == 'id-"1"'
    text = (
        last_token["choices"][0]["delta"]["content"] if kind == "chat" else last_token["choices"][0]["text"]
    )
    assert text == ' "b"'
    usage = json.loads(events[-1][6:])
    assert usage["choices"] == [] and usage["usage"] == {
        "prompt_tokens": 9,
        "completion_tokens": 2,
        "total_tokens": 11,
    }
    assert enc.done() == "data: [DONE]\n\n"


def test_prefix_keys_are_shared_exactly_by_equal_full_blocks() -> None:
    shared = "word " * 40  # 40 tokens
    a = parse_completion(body(model=MODEL, prompt=shared + "alpha beta"), MODEL, 1000, block_size=16)
    b = parse_completion(body(model=MODEL, prompt=shared + "gamma"), MODEL, 1000, block_size=16)
    (keys_a,), (keys_b,) = a.prompt_keys, b.prompt_keys
    assert len(keys_a) == a.prompt_tokens[0] // 16 == 2
    assert keys_a == keys_b  # the first 32 tokens are equal
    other = parse_completion(body(model=MODEL, prompt="x" + shared), MODEL, 1000, block_size=16)
    assert other.prompt_keys[0][0] != keys_a[0]
    ids = parse_completion(body(model=MODEL, prompt=[[1] * 40, [1] * 33]), MODEL, 1000, block_size=16)
    assert ids.prompt_keys[0][:2] == ids.prompt_keys[1]
    assert parse_completion(body(model=MODEL, prompt=shared), MODEL, 1000).prompt_keys == ()


def test_chat_prefix_keys_follow_the_template_tokens() -> None:
    system = {"role": "system", "content": "be brief " * 30}
    one = parse_chat(body(model=MODEL, messages=[system, {"role": "user", "content": "a"}]), MODEL, 999, 16)
    two = parse_chat(body(model=MODEL, messages=[system, {"role": "user", "content": "b c"}]), MODEL, 999, 16)
    assert len(one.prompt_keys[0]) == one.prompt_tokens[0] // 16
    assert one.prompt_keys[0][:3] == two.prompt_keys[0][:3]
