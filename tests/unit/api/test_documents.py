"""Documents read in bulk: JSON by a JSON parser, YAML by the C loader, and one-line errors."""

from __future__ import annotations

import pytest
import yaml

from variant_autoscaler.api.documents import load_document, load_yaml
from variant_autoscaler.errors import ConfigError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": [1, 2.5, "x"], "b": null}', {"a": [1, 2.5, "x"], "b": None}),
        ("a:\n  - 1\n  - x\n", {"a": [1, "x"]}),
        ("{a: 1, b: [x, y]}", {"a": 1, "b": ["x", "y"]}),  # YAML flow style, brace first
        ("[1, 2]", [1, 2]),
        ("", None),
    ],
)
def test_json_and_yaml_read_alike(text: str, expected: object) -> None:
    assert load_document(text, source="f") == expected


def test_errors_are_one_line_and_name_the_source() -> None:
    with pytest.raises(ConfigError, match=r"^plan\.json is not valid JSON: ") as bad_json:
        load_document('{"a": ', source="plan.json")
    with pytest.raises(ConfigError, match=r"^s\.yaml is not valid YAML or JSON: ") as bad_yaml:
        load_document("a: [unclosed\n", source="s.yaml")
    for exc in (bad_json.value, bad_yaml.value):
        assert "\n" not in str(exc)


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    with pytest.raises(ConfigError, match=r"nested too deeply|not valid"):
        load_document("[" * 100_000 + "]" * 100_000, source="deep.json")
    with pytest.raises(ConfigError, match=r"nested too deeply|not valid"):
        load_document("a: " + "[" * 100_000, source="deep.yaml")


def test_load_yaml_uses_a_safe_loader() -> None:
    with pytest.raises(yaml.constructor.ConstructorError):
        load_yaml("!!python/object/apply:os.system ['true']")
