"""Nothing the tests start outlives the run, however it ends (issue 76: Ctrl-C after 45 minutes left Slurm clusters,
the stack's scheduler, dag-processor and triggerer and the MLflow server running). scripts/test.sh for real, on a
probe that starts a real sshd (tests/service_probe.py) and is then stopped as a developer (Ctrl-C), a supervisor
(SIGTERM) or a CI job's timeout (SIGKILL: no trap runs, and the next start stops what it left) stops it."""

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests import services
from tests.polling import wait_until

REPO = Path(__file__).resolve().parents[1]


def _as_a_terminal_job():
    """Ctrl-C and Ctrl-\\ do what they do in a terminal's job. A suite started as a background job of a
    non-interactive shell (`.ci/run &`, nohup) has SIGINT and SIGQUIT ignored, every process under it inherits that,
    and a shell cannot trap a signal ignored when it started: the probe would sleep through its Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def start_probe(tmp_path):
    probe = tmp_path / "probe.json"
    env = {k: v for k, v in os.environ.items() if k not in ("GPUSCHED_TIER", "PYTEST_XDIST_WORKER", services.OWNER_ENV)}
    env.update(GPUSCHED_PROBE_FILE=str(probe), GPUSCHED_NO_MLFLOW_VENV="1", GPUSCHED_WORKERS="0")
    proc = subprocess.Popen(
        ["bash", "scripts/test.sh", "-p", "no:cacheprovider", "-q", "tests/service_probe.py"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's job is: Ctrl-C reaches the whole group
        preexec_fn=_as_a_terminal_job,
    )
    try:
        wait_until(lambda: probe.exists() and probe.read_text(), timeout=180, what="the probe's sshd")
    except AssertionError:  # (the probe never started its service: say why, and leave nothing behind)
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(proc.communicate()[0][-3000:]) from None
    return proc, json.loads(probe.read_text())


def sshd_answers(port):
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.heavy  # scripts/test.sh and a pytest session started for real, twice
@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_a_stopped_run_leaves_nothing_running(tmp_path, how):
    proc, started = start_probe(tmp_path)
    assert services.alive(started["pgid"]) and sshd_answers(started["port"])
    os.killpg(proc.pid, getattr(signal, how))  # the whole job, as Ctrl-C in a terminal or a CI runner's kill
    out = proc.communicate(timeout=120)[0]
    if how == "SIGKILL":  # nothing ran on the way out: the service is left, and recorded as this run's
        assert services.alive(started["pgid"]), out[-3000:]
        assert [r for _, r in services.records() if r["owner"] == proc.pid]
        # the next start stops it first
        again = subprocess.run(
            ["bash", "scripts/test.sh", "-p", "no:cacheprovider", "-q", "--collect-only", "tests/service_probe.py"],
            cwd=REPO,
            env={k: v for k, v in os.environ.items() if k not in ("GPUSCHED_TIER", services.OWNER_ENV)}
            | {"GPUSCHED_NO_MLFLOW_VENV": "1", "GPUSCHED_WORKERS": "0"},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        assert f"stopped what the tests left running: sshd (started by process {proc.pid})" in again.stderr
    else:
        assert proc.returncode in (130, 143, 2), (proc.returncode, out[-3000:])
    wait_until(lambda: not services.alive(started["pgid"]), timeout=30, what="the sshd to be gone")
    assert not sshd_answers(started["port"])
    assert not [r for _, r in services.records() if r["owner"] == proc.pid]  # no record left either


def _sleeper():
    return subprocess.Popen(["sleep", "60"], start_new_session=True)


def _records_of(pid):
    return [(p, r) for p, r in services.records() if r.get("pgid") == pid]


def test_the_reaper_signals_only_the_process_group_it_recorded(monkeypatch, tmp_path):
    """A record outlives its processes (a reboot, a wrapped pid): the reaper stops a group only while its leader is
    the process that was recorded, and runs nothing of a record of another boot."""
    monkeypatch.setenv(services.OWNER_ENV, "999999999")  # an owner that is gone: reap() without --owner takes it
    # records of their own: reap() without an owner takes every record whose owner is gone, and a suite this suite
    # runs and stops (the stopped-run test above, on another worker) may leave one for a moment (CI, 214b9b2)
    monkeypatch.setattr(services, "DIR", tmp_path / "records")
    ours, reused, other_boot = _sleeper(), _sleeper(), _sleeper()
    try:
        for proc in (ours, reused, other_boot):
            services.register("sleeper", pgid=proc.pid)
        ((path, record),) = _records_of(reused.pid)
        path.write_text(json.dumps({**record, "leader_started": record["leader_started"] - 1}))  # another process
        ((path, record),) = _records_of(other_boot.pid)
        path.write_text(json.dumps({**record, "boot": "another-boot"}))
        stopped = services.reap()
        assert len(stopped) == 3 and not any(_records_of(p.pid) for p in (ours, reused, other_boot))
        assert ours.wait(timeout=30) == -signal.SIGTERM
        assert reused.poll() is None and other_boot.poll() is None  # not theirs to stop
    finally:
        for proc in (ours, reused, other_boot):
            proc.kill()
            proc.wait()


def test_a_record_keeps_only_what_its_stop_command_needs(monkeypatch):
    monkeypatch.setenv("CI_DEPLOY_TOKEN", "secret")
    path = services.register("nothing", stop=["true"], env={**os.environ, "GPUSCHED_SLURM_ROOT": "/x"})
    try:
        record = json.loads(path.read_text())
        assert "CI_DEPLOY_TOKEN" not in record["env"] and record["env"]["GPUSCHED_SLURM_ROOT"] == "/x"
        assert (path.stat().st_mode & 0o077) == 0 and (services.DIR.stat().st_mode & 0o077) == 0
    finally:
        services.stopped(path)
