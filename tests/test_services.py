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
