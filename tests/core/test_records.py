"""core/records.py: one dataclass per record, read back checked (refusals naming the source, the key path, what
was expected and what was there), written from the same definition, sealed records read at no cost by the
processes given their key, and pydantic kept out of a process until it reads or writes a record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Annotated

import pytest

from airflow_provider_gpusched.core.records import (
    RECORD_KEY_ENV,
    RUNTIME_ONLY,
    SEAL,
    Float,
    IndexKey,
    RecordType,
    new_record_key,
    record_class,
    says,
    take_record_key,
)
from airflow_provider_gpusched.core.safe_files import BadRecordError


@record_class
@dataclass
class Part:
    name: Annotated[str, says("a part name", min_length=1, max_length=8)]
    size: Annotated[int, says("a size >= 0", ge=0)] = 0


@record_class(extra="forbid")
@dataclass
class Sample:
    parts: Annotated[list[Part], says("a list of at most 3 parts", strict=None, max_length=3)]
    memory: Annotated[dict[IndexKey, int], says("GPU index -> bytes", strict=None)] = field(default_factory=dict)
    row: Annotated[tuple[Float, int], says("[time, count]", strict=None)] | None = None
    at: Annotated[Float, says("a time stamp")] = 0.0
    scratch: Annotated[str, RUNTIME_ONLY] = ""


SAMPLE = RecordType(Sample)
GOOD = {"parts": [{"name": "a", "size": 1}], "memory": {"0": 5}, "row": [1.5, 2], "at": 3}


def test_a_record_reads_back_as_its_dataclass_and_writes_as_json():
    got = SAMPLE.read(GOOD, "f.json")
    assert got == Sample([Part("a", 1)], {0: 5}, (1.5, 2), 3.0)
    assert SAMPLE.dump(got) == {"parts": [{"name": "a", "size": 1}], "memory": {"0": 5}, "row": [1.5, 2], "at": 3.0}


@pytest.mark.parametrize(
    ("change", "says_"),
    [
        ({"parts": [{"name": ""}]}, "f.json: key 'parts[0].name': expected a part name, got ''"),
        ({"parts": [{"name": "a", "size": True}]}, "key 'parts[0].size': expected a size >= 0, got True"),
        ({"parts": [{"name": "a"}] * 4}, "key 'parts': expected a list of at most 3 parts, got 4 items"),
        ({"parts": [{"size": 1}]}, "f.json: key 'parts[0].name' is missing"),
        ({"memory": {"x": 1}}, "key 'memory.x': expected a GPU index (digits), got 'x'"),
        ({"row": [1.5]}, "key 'row': expected [time, count], got [1.5]"),
        ({"at": float("nan")}, "key 'at': expected a time stamp, got nan"),
        ({"at": "3"}, "key 'at': expected a time stamp, got '3'"),
        ({"colour": "red"}, "f.json: key 'colour' is not a known key"),
    ],
)
def test_a_bad_record_is_refused_naming_the_key_path_what_was_expected_and_what_was_there(change, says_):
    with pytest.raises(BadRecordError) as refused:
        SAMPLE.read({**GOOD, **change}, "f.json")
    assert says_ in str(refused.value)


def test_runtime_only_fields_are_neither_written_nor_read():
    got = SAMPLE.read({**GOOD, "scratch": "from the file"}, "f.json")
    assert got.scratch == ""
    got.scratch = "in memory"
    assert "scratch" not in SAMPLE.dump(got)


def test_a_sealed_record_is_read_without_checking_and_a_forged_one_is_checked():
    key = new_record_key()
    sealed = SAMPLE.dump_sealed(SAMPLE.read(GOOD, "f"), key)
    assert SEAL in sealed
    assert SAMPLE.read(json.loads(json.dumps(sealed)), "f", key=key) == SAMPLE.read(GOOD, "f")
    forged = {**sealed, "parts": [{"name": ""}]}  # the body changed, the seal kept: checked, and refused
    with pytest.raises(BadRecordError, match="parts\\[0\\].name"):
        SAMPLE.read(forged, "f", key=key)
    with pytest.raises(BadRecordError, match="parts\\[0\\].name"):  # another key's seal proves nothing
        SAMPLE.read(SAMPLE.dump_sealed(Sample([Part("", 0)]), new_record_key()), "f", key=key)
    assert SAMPLE.read(sealed, "f") == SAMPLE.read(GOOD, "f")  # without the key: checked, the seal ignored


def test_the_record_key_is_taken_out_of_the_environment(monkeypatch):
    key = new_record_key()
    monkeypatch.setenv(RECORD_KEY_ENV, key.hex())
    assert take_record_key() == key and RECORD_KEY_ENV not in os.environ
    monkeypatch.setenv(RECORD_KEY_ENV, "not hex")
    assert take_record_key() is None


def test_importing_the_records_modules_does_not_import_pydantic():
    """A trial runner starts in about 0.1 s; pydantic's import alone would double it for every trial process."""
    code = (
        "import sys; import airflow_provider_gpusched.core.sweep.running.trial_run, airflow_provider_gpusched.core.board, "
        "airflow_provider_gpusched.core.gpu.lease_store, airflow_provider_gpusched.core.gpu.telemetry, "
        "airflow_provider_gpusched.core.gpu.timeline, airflow_provider_gpusched.core.sweep.results.view; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_batch_group_runner_reads_its_sealed_manifest_without_pydantic_and_keeps_the_key_from_the_trial(
    tmp_path,
):
    from airflow_provider_gpusched.core.sweep import SweepSpec
    from airflow_provider_gpusched.core.sweep.running.session import SweepSession
    from airflow_provider_gpusched.core.sweep.running.trial_run import group_argv, write_group_manifest

    seen = tmp_path / "seen.json"
    probe = (
        "import json, os, sys; "
        f"json.dump({{'key': os.environ.get('{RECORD_KEY_ENV}'), "
        "'pydantic': 'pydantic' in sys.modules}, "
        f"open({str(seen)!r}, 'w'))"
    )
    spec = SweepSpec(
        name="sealed",
        search="grid",
        space={"x": [1, 2]},
        command=[sys.executable, "-c", probe],
        results_root=str(tmp_path / "r"),
    )
    manifest = SweepSession(spec).prepare()
    key = new_record_key()
    group = write_group_manifest(manifest, manifest.pending, key)
    code = (
        "import sys; "
        "import airflow_provider_gpusched.core.sweep.running.trial_run as t; rc = t.main(sys.argv[1:]); "
        "print('PYDANTIC', 'pydantic' in sys.modules); sys.exit(rc)"
    )
    argv = group_argv(group, manifest.pending)
    done = subprocess.run(
        [sys.executable, "-c", code, *argv[3:]],
        env={**os.environ, RECORD_KEY_ENV: key.hex()},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "PYDANTIC False" in done.stdout  # the sealed group manifest was taken as the batch wrote it
    assert json.loads(seen.read_text()) == {"key": None, "pydantic": False}  # the trial never sees the key
    # the same group manifest with its seal broken is checked like any record (pydantic does it)
    with open(group.path) as fh:
        data = json.loads(fh.read())
    data[SEAL] = "0" * 64
    with open(group.path, "w") as fh:
        json.dump(data, fh)
    done = subprocess.run(
        [sys.executable, "-c", code, *argv[3:]],
        env={**os.environ, RECORD_KEY_ENV: key.hex()},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "PYDANTIC True" in done.stdout


def test_dump_writes_what_pydantic_would_for_every_record_type():
    """RecordType.dump needs no pydantic; for each record type it writes exactly pydantic's own JSON dump."""
    from airflow_provider_gpusched.core.board import BOARD_LEASE, BoardGPU, BoardLease
    from airflow_provider_gpusched.core.gpu.lease_store import LEASE, Lease
    from airflow_provider_gpusched.core.gpu.telemetry import TELEMETRY, GPUSeries, ProcessUse, TelemetryRecord
    from airflow_provider_gpusched.core.gpu.timeline import HISTORY, History, Segment

    lease = Lease("0" * 16, [0, 2], ["u0", "u2"], {0: 5, 2: 7}, False, "me", 12, work={"dag_id": "d"}, cpus=[1])
    lease.fd, lease.unreadable = 9, "runtime only"
    samples = [
        (LEASE, lease),
        (
            BOARD_LEASE,
            BoardLease(
                "h", "l", [1], {1: 3}, True, "idle", 1.5, "d", "r", "t", inventory=[BoardGPU(1, "u", "n", 9, True)]
            ),
        ),
        (
            TELEMETRY,
            TelemetryRecord(
                1,
                "h",
                "nvml",
                10.0,
                600.0,
                {0: GPUSeries(9, 1.0, [(1.0, 5, 3, None, 2.5)], [ProcessUse(4, None, "l")])},
            ),
        ),
        (HISTORY, History([Segment("idle", [0], 1.0, 2.0, "oom", label="x")], 3)),
    ]
    for record_type, value in samples:
        mine = record_type.dump(value)
        theirs = record_type.adapter.dump_python(value, mode="json", exclude=set(record_type.runtime) or None)
        assert mine == theirs, record_type.name
        assert record_type.read(json.loads(json.dumps(mine)), "x") == record_type.read(theirs, "x")
    assert "fd" not in SAMPLE.dump(SAMPLE.read(GOOD, "f")) and "unreadable" not in LEASE.dump(lease)


def test_a_private_lease_directory_seals_its_leases_and_reads_them_without_pydantic(tmp_path):
    """A user's own lease directory holds a key only they can read; their processes seal each lease file with it
    and take a sealed one as written, so a short process (`gpusched gpus`, a racing holder) needs no pydantic. A
    lease file changed behind the seal is checked in full, and refused when bad."""
    from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
    from airflow_provider_gpusched.core.gpu.leases import LeaseManager
    from airflow_provider_gpusched.core.gpu.placement import GPURequest

    state = tmp_path / "leases"
    manager = LeaseManager(SimulatedInventory("2x24GiB"), str(state))
    lease = manager.acquire(GPURequest(gpus=1), owner="me", timeout=5)
    key_file = state / "record-key"
    assert oct(key_file.stat().st_mode & 0o777) == "0o600" and key_file.stat().st_size == 32
    data = json.loads((state / f"{lease.lease_id}.json").read_text())
    assert SEAL in data
    code = (
        "import sys; from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory; "
        "from airflow_provider_gpusched.core.gpu.leases import LeaseManager; "
        f"m = LeaseManager(SimulatedInventory('2x24GiB'), {str(state)!r}); "
        "print([l.lease_id for l in m.leases()], 'pydantic' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"['{lease.lease_id}'] False"
    data["gpus"] = [-1]  # changed behind its seal: checked, refused, its GPUs still counted as taken
    (state / f"{lease.lease_id}.json").write_text(json.dumps(data))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("True")
    other = LeaseManager(SimulatedInventory("2x24GiB"), str(state))
    other.leases()
    assert any("key 'gpus[0]'" in why for _name, why in other.store.unreadable), other.store.unreadable
    manager.release(lease)


def test_a_key_file_another_user_could_read_or_replace_is_not_used(tmp_path):
    from airflow_provider_gpusched.core.records import private_key

    key = private_key(str(tmp_path))
    assert key is not None and private_key(str(tmp_path)) == key
    os.chmod(tmp_path / "record-key", 0o644)
    assert private_key(str(tmp_path)) is None
    os.remove(tmp_path / "record-key")
    os.symlink("/etc/hostname", tmp_path / "record-key")
    assert private_key(str(tmp_path)) is None
