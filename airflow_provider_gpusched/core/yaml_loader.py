"""Reading YAML: libyaml's C loader where PyYAML was built with it (about 8x faster on the partitioner's
inputs), the pure-Python safe loader otherwise. Both build the same plain data and raise the same
``yaml.YAMLError`` subclasses with line and column marks."""

from __future__ import annotations

from typing import IO, Any


def safe_load(stream: str | bytes | IO) -> Any:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(stream, Loader=loader)  # noqa: S506 - a safe loader, C or Python
