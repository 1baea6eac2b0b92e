"""The lease directory on a GPU host shared by several Unix users: another user's directory, links planted
in it and lease files of the wrong shape never lead to writing through their paths or to a GPU handed out twice."""

import json
import os
import stat

import pytest

from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.lease_store import default_state_dir
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.safe_files import UnsafePathError
from tests.gpu.test_cli import gpusched

NOBODY = 65534


def manager_for(path, **kwargs):
    return LeaseManager(SimulatedInventory("4x24GiB"), str(path), **kwargs)


def test_default_directory_is_per_user_and_private(monkeypatch, tmp_path):
    monkeypatch.delenv("GPUSCHED_STATE_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no fallback directory from an earlier squatting
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    path = default_state_dir()
    assert path == os.path.join(str(tmp_path), f"gpusched-{os.geteuid()}")
    m = LeaseManager(SimulatedInventory("2x24GiB"))
    assert m.state_dir == path and stat.S_IMODE(os.stat(path).st_mode) == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create a directory owned by another user")
def test_directory_created_first_by_another_user_is_refused(tmp_path):
    planted = tmp_path / "gpusched-0"
    planted.mkdir(mode=0o755)
    os.chown(planted, NOBODY, NOBODY)
    with pytest.raises(UnsafePathError) as err:
        manager_for(planted)
    assert str(planted) in str(err.value) and "owned by" in str(err.value) and "another user" in str(err.value)


def test_world_writable_directory_is_refused_even_when_shared(tmp_path):
    d = tmp_path / "leases"
    d.mkdir()
    os.chmod(d, 0o1777)  # what earlier versions made it
    for shared in (False, True):
        with pytest.raises(UnsafePathError, match="writable by every user"):
            manager_for(d, shared=shared)


def test_group_directory_only_when_configured_shared(tmp_path, monkeypatch):
    d = tmp_path / "group"
    d.mkdir()
    os.chmod(d, 0o2770)
    with pytest.raises(UnsafePathError, match="gpu_state_dir_shared"):
        manager_for(d)
    m = manager_for(d, shared=True)
    lease, _ = m.try_acquire(GPURequest(), "a")
    assert stat.S_IMODE(os.stat(lease.path).st_mode) == 0o660  # group members read and clean up
    m.release(lease)
    monkeypatch.setenv("GPUSCHED_STATE_DIR_SHARED", "1")
    assert manager_for(d).shared


def test_symlinked_directory_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        manager_for(tmp_path / "link")


def test_files_are_private_and_links_in_the_directory_are_never_written_through(tmp_path):
    m = manager_for(tmp_path / "leases")
    lease, _ = m.try_acquire(GPURequest(), "owner")
    assert stat.S_IMODE(os.stat(lease.path).st_mode) == 0o600
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched\n")
    os.symlink(victim, os.path.join(m.state_dir, "accounting.jsonl"))
    with pytest.raises(OSError):
        m.ledger.append({"job_class": "normal", "gpu_seconds": 1.0})
    os.remove(os.path.join(m.state_dir, "alloc.lock"))
    os.symlink(victim, os.path.join(m.state_dir, "alloc.lock"))
    with pytest.raises(OSError):
        m.try_acquire(GPURequest(), "other")
    assert victim.read_text() == "untouched\n"


@pytest.mark.parametrize(
    "content", ['{"memory": []}', '{"gpus": [0], "memory": []}', "[1, 2]", '{"lease_id": "x"', "", "\x00\x01garbage"]
)
def test_bad_lease_file_of_a_live_holder_counts_as_taken_and_never_crashes(tmp_path, content):
    m = manager_for(tmp_path / "leases")
    lease, _ = m.try_acquire(GPURequest(), "holder")  # holds GPU 0, its lock held by this process
    with open(lease.path, "w") as fh:
        fh.write(content)
    # GPU 0 must never be handed out again while the holder lives
    got = []
    for _ in range(4):
        other, reason = m.try_acquire(GPURequest(), "other")
        if other is None:
            assert os.path.basename(lease.path) in reason and "unreadable" in reason
            break
        got.append(other)
    assert all(0 not in g.gpus for g in got)
    if content.startswith('{"gpus": [0]'):
        assert len(got) == 3  # only the GPU the file still names is held
    else:
        assert got == []  # nothing is known: every GPU counts as taken
    assert [p for p, _ in m.unreadable] == [lease.path]
    out = gpusched("gpus", "--simulate", "4x24GiB", "--state-dir", m.state_dir)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert "UNREADABLE lease file" in out.stdout and os.path.basename(lease.path) in out.stdout
    for g in got:
        m.release(g)
    m.release(lease)
    assert m.try_acquire(GPURequest(gpus=4), "after")[0] is not None


def test_bad_file_of_a_dead_holder_is_cleaned_up(tmp_path):
    m = manager_for(tmp_path / "leases")
    bad = os.path.join(m.state_dir, "0123456789abcdef.json")
    with open(bad, "w") as fh:
        json.dump({"memory": []}, fh)
    lease, reason = m.try_acquire(GPURequest(gpus=4), "x")
    assert lease is not None, reason
    assert not os.path.exists(bad)


def test_bad_waiting_marks_and_yield_requests_do_not_crash(tmp_path):
    m = manager_for(tmp_path / "leases")
    for name, content in (
        ("waiting-00.json", '{"owner": 5, "until": "soon"}'),
        ("waiting-01.json", "[]"),
        ("activity.json", '{"0": "x"}'),
    ):
        with open(os.path.join(m.state_dir, name), "w") as fh:
            fh.write(content)
    assert m.yields.waiting() == []
    lease, _ = m.try_acquire(GPURequest(), "a")
    with open(os.path.join(m.state_dir, lease.lease_id + ".preempt"), "w") as fh:
        fh.write("not json")
    assert m.yields.request_for(lease.lease_id) is None
    with open(os.path.join(m.state_dir, "accounting.jsonl"), "w") as fh:
        fh.write(
            '{"job_class": "normal", "gpu_seconds": "lots"}\nnot json\n[]\n{"job_class": "idle", "gpu_seconds": 2.5}\n'
        )
    from airflow_provider_gpusched.core.gpu.accounting import accounting_totals

    assert accounting_totals(m.ledger.records())["idle"]["gpu_seconds"] == 2.5
    m.release(lease)


@pytest.mark.heavy  # 0.6 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
@pytest.mark.parametrize("squat", ["file", "directory of another user", "link"])
def test_a_squatted_default_lease_directory_leads_to_a_private_fallback(tmp_path, squat):
    """Issue 30, item 10: whoever creates <tmp>/gpusched-<uid> first no longer stops this user's local GPU work:
    the leases go to ~/.cache/gpusched/leases (private), with a warning, and stay there."""
    import subprocess
    import sys

    tmp, home = tmp_path / "tmp", tmp_path / "home"
    tmp.mkdir()
    home.mkdir()
    usual = tmp / f"gpusched-{os.geteuid()}"
    if squat == "file":
        usual.write_text("mine now")
    elif squat == "link":
        usual.symlink_to(tmp_path)
    else:
        if os.geteuid() != 0:
            pytest.skip("needs root to create a directory owned by another user")
        usual.mkdir(mode=0o777)
        os.chown(usual, NOBODY, NOBODY)
    env = {k: v for k, v in os.environ.items() if k not in ("GPUSCHED_STATE_DIR", "AIRFLOW__GPUSCHED__GPU_STATE_DIR")}
    env.update(TMPDIR=str(tmp), HOME=str(home))
    code = (
        "from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory\n"
        "from airflow_provider_gpusched.core.gpu.leases import LeaseManager\n"
        "from airflow_provider_gpusched.core.gpu.placement import GPURequest\n"
        "m = LeaseManager(SimulatedInventory('1x8GiB'))\n"
        "lease, why = m.try_acquire(GPURequest(gpus=1), 'me')\n"
        "print(m.state_dir, lease is not None)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 0, run.stderr
    fallback = home / ".cache" / "gpusched" / "leases"
    assert run.stdout.split() == [str(fallback), "True"]
    assert "using this user's private" in run.stderr and str(usual) in run.stderr
    assert stat.S_IMODE(os.stat(fallback).st_mode) == 0o700
    # the squatter leaves: the user's processes keep to the fallback (they must all agree on one directory)
    if squat == "file" or squat == "link":
        usual.unlink()
    else:
        usual.rmdir()
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert again.stdout.split() == [str(fallback), "True"] and "using this user's private" not in again.stderr
