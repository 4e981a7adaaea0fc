"""Reading YAML or JSON documents in bulk: JSON with a JSON parser, YAML with libyaml's C loader.

PyYAML's pure-Python loader reads JSON too (JSON is YAML), but slowly: most of a 1,000-variant ``plan``
file's run time went into it (docs/optimizer.md). Every reader of plan, scenario and ConfigMap documents
goes through :func:`load_document`.
"""

from __future__ import annotations

import orjson
import yaml

from variant_autoscaler.errors import ConfigError

__all__ = ["load_document"]

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_document(text: str, *, source: str) -> object:
    """The data of ``text`` (YAML or JSON); ConfigError naming ``source`` when it is neither."""
    if text.lstrip()[:1] in ("{", "["):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass  # YAML in flow style ({a: 1}) also starts with a brace
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source} is not valid YAML or JSON: {_one_line(str(exc))}") from None
    except RecursionError:
        raise ConfigError(f"{source} is nested too deeply to be read") from None


def _one_line(message: str) -> str:
    return " ".join(message.split())
