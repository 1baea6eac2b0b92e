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


def make_cluster_instance(scaling: Path, dest: Path, layers: int = 200, types: int = 8, hosts: int = 256) -> dict:
    """A cluster-scale instance built from the scaling case L96_T4_D64: its model's 96 layers tiled to
    ``layers``, ``types`` device types derived from its 4 (each as is and as a variant with 1.3x the time,
    0.75x the memory and half the bandwidth), ``hosts`` hosts split evenly among them. Writes the three files
    under ``dest`` and returns the partitioner's arguments."""
    import yaml

    base = Path(scaling) / "L96_T4_D64"
    models = yaml.safe_load((base / "models.yml").read_text())
    device_types = yaml.safe_load((base / "device_types.yml").read_text())
    name, model = next(iter(models.items()))
    n = model["layers"]
    big_model = {
        "layers": layers,
        "mem_MB": [model["mem_MB"][i % n] for i in range(layers)],
        "parameters_in": model["parameters_in"],
        "parameters_out": [model["parameters_out"][i % n] for i in range(layers)],
    }
    new_types, new_devices = {}, {}
    for k, (tname, t) in enumerate(list(device_types.items())[: types // 2]):
        profile = next(p for p in t["model_profiles"][name])
        times = [profile["time_s"][i % n] for i in range(layers)]
        for variant, (tf, mf, bf) in enumerate([(1.0, 1.0, 1.0), (1.3, 0.75, 0.5)]):
            vname = f"{tname}-v{variant}"
            new_types[vname] = {
                "bw_Mbps": t["bw_Mbps"] * bf,
                "mem_MB": t["mem_MB"] * mf,
                "model_profiles": {name: [{**profile, "time_s": [x * tf for x in times]}]},
            }
            new_devices[vname] = [f"h{k}{variant}-{i}" for i in range(hosts // types)]
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "models.yml").write_text(yaml.safe_dump({name: big_model}))
    (dest / "device_types.yml").write_text(yaml.safe_dump(new_types))
    (dest / "devices.yml").write_text(yaml.safe_dump(new_devices))
    return {"model": name, "batch_size": profile["batch_size"], "buffers_in": 2, "buffers_out": 2}
