"""Reading YAML or JSON documents in bulk: JSON with a JSON parser, YAML with libyaml's C loader.

PyYAML's pure-Python loader reads JSON too (JSON is YAML), but slowly: reading a 1,000-variant ``plan``
file took several times as long as planning it (docs/benchmarks.md, "plan -f"). Every reader of plan,
scenario and ConfigMap documents goes through :func:`load_document` or :func:`load_yaml`.
"""

from __future__ import annotations

from typing import Any

import orjson
import yaml

from variant_autoscaler.errors import ConfigError

__all__ = ["load_document", "load_yaml"]

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> object:
    """YAML text, with libyaml's C loader where present (a safe loader; raises ``yaml.YAMLError``)."""
    return yaml.load(text, Loader=_Loader)


def load_document(text: str, *, source: str) -> object:
    """The data of ``text`` (YAML or JSON); a one-line ConfigError naming ``source`` when it is neither."""
    json_error: orjson.JSONDecodeError | None = None
    if text.lstrip()[:1] in ("{", "["):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            json_error = exc  # YAML in flow style ({a: 1}) also starts with a brace: try it next
    try:
        return load_yaml(text)
    except yaml.YAMLError as exc:
        if json_error is not None:  # meant as JSON: its parser's message is the useful one
            raise ConfigError(f"{source} is not valid JSON: {_one_line(str(json_error))}") from None
        raise ConfigError(f"{source} is not valid YAML or JSON: {_one_line(str(exc))}") from None
    except RecursionError:
        raise ConfigError(f"{source} is nested too deeply to be read") from None


def _one_line(message: str) -> str:
    return " ".join(message.split())
