"""The pipeline-partition reference data (SPEC, examples, 998 small cases, 24 scaling cases with the
reference tool's figures), vendored as one gzip'd JSON file so a clean clone tests and benchmarks the
same instances. ``materialize(dest)`` writes the files out."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

PACK = Path(__file__).with_name("pipeline-partition.json.gz")


def materialize(dest: Path) -> Path:
    """Write every file of the pack under ``dest`` (once) and return ``dest``."""
    dest = Path(dest)
    marker = dest / ".complete"
    if marker.exists():
        return dest
    with gzip.open(PACK, "rt") as fh:
        files = json.load(fh)
    for rel, text in files.items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    marker.write_text("")
    return dest
