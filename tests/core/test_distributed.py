"""Distributed starts without Slurm or Airflow: the job shape and its checks, the launch script, gpusched's own
rank launcher, rank information, and a Python call's per-rank outcomes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from airflow_provider_gpusched.core import pyfunc
from airflow_provider_gpusched.core.distributed import (
    RankInfo,
    check_grace,
    local_launch_argv,
    rank_info,
    slurm_launch_argv,
)
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.slurm import SlurmJobSpec


def test_job_shape_becomes_sbatch_options():
    spec = SlurmJobSpec(
        command=["python", "train.py"],
        nodes="2-4",
        gpus_per_node="a100:4",
        cpus_per_gpu=8,
        exclusive=True,
        constraint="a100&ib",
        nodelist=["gpu01", "gpu[03-04]"],
        exclude="gpu02",
        distributed="torchrun",
    )
    args = spec.sbatch_argv()
    for option in (
        "--nodes=2-4",
        "--ntasks-per-node=4",
        "--gpus-per-node=a100:4",
        "--cpus-per-gpu=8",
        "--exclusive",
        "--constraint=a100&ib",
        "--nodelist=gpu01,gpu[03-04]",
        "--exclude=gpu02",
    ):
        assert option in args
    assert spec.nproc_per_node == 4
    plain = SlurmJobSpec(command="true", nodes=3, ntasks_per_node=2, gpus=1)
    assert "--ntasks-per-node=2" in plain.sbatch_argv() and "--gres=gpu:1" in plain.sbatch_argv()
    assert "gpusched_launch" not in plain.render_script()
    assert SlurmJobSpec(command="true", distributed="srun").nproc_per_node == 1  # no GPUs: one rank a node
    assert SlurmJobSpec(command="true", distributed="srun", ntasks_per_node=6, gpus=2).nproc_per_node == 6


@pytest.mark.parametrize(
    "field, value",
    [
        ("nodes", 0),
        ("nodes", "4-2"),
        ("nodes", "two"),
        ("nodes", True),
        ("ntasks_per_node", 0),
        ("gpus_per_node", -1),
        ("gpus_per_node", "a100:x"),
        ("gpus_per_task", 0),
        ("cpus_per_gpu", 1.5),
        ("exclusive", "yes"),
        ("constraint", "a100 ib"),
        ("constraint", "-oX"),
        ("nodelist", "-n1"),
        ("nodelist", ["n1", "n;2"]),
        ("exclude", 3),
        ("distributed", "mpirun"),
        ("rank_exit_grace", -1),
        ("rank_exit_grace", float("nan")),
        ("torchrun", "torchrun"),
        ("torchrun", []),
    ],
)
def test_each_shape_option_is_refused_by_name(field, value):
    with pytest.raises(InvalidArgumentError) as err:
        SlurmJobSpec(command="true", **{field: value})
    assert err.value.argument == field


@pytest.mark.parametrize(
    "fields, argument",
    [
        ({"gpus": 2, "gpus_per_node": 2}, "gpus/gpus_per_node"),
        ({"gres": "gpu:2", "gpus_per_node": 2}, "gres/gpus_per_node"),
        ({"cpus_per_gpu": 2, "cpus_per_task": 2}, "cpus_per_gpu/cpus_per_task"),
        ({"distributed": "torchrun", "gpus_per_task": 1}, "gpus_per_task"),
    ],
)
def test_conflicting_shape_options_are_refused(fields, argument):
    with pytest.raises(InvalidArgumentError) as err:
        SlurmJobSpec(command="true", **fields)
    assert err.value.argument == argument


def test_a_distributed_start_needs_a_command_not_a_script():
    with pytest.raises(InvalidArgumentError, match="not a whole script"):
        SlurmJobSpec(script="srun hostname", distributed="srun")


def test_the_job_script_passes_the_command_to_every_rank_as_arguments():
    argv = ["python", "train.py", "--note", "a b; c", "it's", "$(reboot)"]
    script = SlurmJobSpec(command=argv, nodes=2, gpus_per_node=2, distributed="srun", rank_exit_grace=7).render_script()
    assert script.splitlines()[-1] == "gpusched_launch python train.py --note 'a b; c' 'it'\"'\"'s' '$(reboot)'"
    assert 'srun --kill-on-bad-exit=1 --wait=7 --ntasks-per-node=2 -- "${shim[@]}" bash -c' in script
    shell = SlurmJobSpec(command="echo $RANK; hostname", distributed="torchrun", gpus=2).render_script()
    assert shell.splitlines()[-1] == "gpusched_launch bash -c 'echo $RANK; hostname'"
    assert "--nproc-per-node=2" in shell and '--rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT"' in shell
    assert "--wait=0" in SlurmJobSpec(command="x", distributed="srun", rank_exit_grace=0).render_script()


def test_the_launch_function_runs_verbatim_arguments_through_a_fake_srun(tmp_path):
    """bash runs the real launch function; a stand-in srun (first on PATH) records how it was called."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text('#!/bin/bash\nprintf "%s\\n" "$@" > "$SRUN_ARGS"\n')
    (fake / "scontrol").write_text("#!/bin/bash\necho n7; echo n8\n")
    for tool in ("srun", "scontrol"):
        os.chmod(fake / tool, 0o755)
    record = tmp_path / "args"
    argv = slurm_launch_argv("srun", ["prog", "a b", "--", "x;y"], 2, 5)
    env = {
        **os.environ,
        "PATH": f"{fake}:{os.environ['PATH']}",
        "SRUN_ARGS": str(record),
        "SLURM_JOB_ID": "77",
        "SLURM_JOB_NODELIST": "n[7-8]",
        "SLURM_JOB_NUM_NODES": "2",
    }
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    called = record.read_text().splitlines()
    assert called[:4] == ["--kill-on-bad-exit=1", "--wait=5", "--ntasks-per-node=2", "--"]
    assert called[-4:] == ["prog", "a b", "--", "x;y"]
    assert "rendezvous n7:20077" in proc.stderr  # the first node, a port from the job id (free here)


@pytest.mark.parametrize(
    "srun_says, srun_exits, job_exits",
    [
        ("srun: First task exited 5s ago", 0, 1),  # --wait stopped a rank, yet srun said 0 (seen under load): fails
        ("srun: error: n8: task 1: Killed", 137, 137),  # srun's own failure stands
        ("rank 1: First task exited is only text", 0, 0),  # a rank's own words are not srun's
        ("", 0, 0),
    ],
)
def test_ranks_stopped_by_the_grace_fail_the_job_whatever_srun_exits_with(tmp_path, srun_says, srun_exits, job_exits):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text(f'#!/bin/bash\necho "rank output"\necho "{srun_says}" >&2\nexit {srun_exits}\n')
    os.chmod(fake / "srun", 0o755)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    argv = slurm_launch_argv("srun", ["prog"], 1, 5)
    env = {
        **os.environ,
        "PATH": f"{fake}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "78",
        "SLURM_JOB_NUM_NODES": "2",
        "TMPDIR": str(scratch),
    }
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == job_exits, proc.stderr
    assert proc.stdout == "rank output\n"  # stdout untouched; srun's stderr passed on, line by line
    assert srun_says in proc.stderr
    stopped = "rank(s) still running 5s after the first rank ended were stopped (rank_exit_grace); the job fails"
    assert (stopped in proc.stderr) == (job_exits == 1)
    assert list(scratch.iterdir()) == []  # the note file is gone


def test_local_launch_commands():
    torchrun = local_launch_argv("torchrun", ["python", "t.py"], 4, 9, torchrun=["torchrun"])
    assert torchrun == [
        "torchrun",
        "--standalone",
        "--nnodes=1",
        "--nproc-per-node=4",
        "--max-restarts=0",
        "--no-python",
        "--",
        "python",
        "t.py",
    ]
    ranks = local_launch_argv("srun", ["prog", "x"], 2, 0, python="/py")
    assert ranks == [
        "/py",
        "-m",
        "airflow_provider_gpusched.core.distributed",
        "ranks",
        "--nproc=2",
        "--grace=0",
        "--",
        "prog",
        "x",
    ]
    with pytest.raises(InvalidArgumentError):
        local_launch_argv("srun", ["x"], 0)


def _ranks(tmp_path, code: str, nproc: int, grace: float) -> tuple[int, str, float]:
    script = tmp_path / "rank.py"
    script.write_text(code)
    started = time.monotonic()
    proc = subprocess.run(
        local_launch_argv("srun", [sys.executable, str(script), str(tmp_path)], nproc, grace),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started


def test_gpuscheds_rank_launcher_sets_the_variables_of_every_rank(tmp_path):
    code = (
        "import json, os, sys; keys = ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'NODE_RANK', "
        "'MASTER_ADDR', 'MASTER_PORT'); json.dump({k: os.environ[k] for k in keys}, "
        "open(os.path.join(sys.argv[1], 'r%s.json' % os.environ['RANK']), 'w'))"
    )
    code_, out, _ = _ranks(tmp_path, code, 3, 5)
    assert code_ == 0, out
    ranks = [json.loads((tmp_path / f"r{r}.json").read_text()) for r in range(3)]
    assert [r["RANK"] for r in ranks] == [r["LOCAL_RANK"] for r in ranks] == ["0", "1", "2"]
    assert {r["WORLD_SIZE"] for r in ranks} == {r["LOCAL_WORLD_SIZE"] for r in ranks} == {"3"}
    assert {r["MASTER_ADDR"] for r in ranks} == {"127.0.0.1"} and len({r["MASTER_PORT"] for r in ranks}) == 1


def test_a_failing_rank_stops_the_others_at_once(tmp_path):
    code = "import os, sys, time\nif os.environ['RANK'] == '1': sys.exit(5)\ntime.sleep(60)\n"
    status, out, took = _ranks(tmp_path, code, 3, 30)
    assert status == 5 and took < 20, (status, took, out)
    assert "rank 1 exited with 5; stopping the other ranks" in out


def test_ranks_that_outlive_the_first_by_the_grace_are_stopped(tmp_path):
    code = "import os, time\nif os.environ['RANK'] == '2': time.sleep(60)\n"
    status, out, took = _ranks(tmp_path, code, 3, 1)
    assert status == 1 and took < 20, (status, took, out)
    assert "rank(s) 2 still running 1 s after rank" in out


def test_rank_launcher_usage_errors():
    def run(*a):
        return subprocess.run(
            [sys.executable, "-m", "airflow_provider_gpusched.core.distributed", *a],
            capture_output=True,
            text=True,
            timeout=30,
        )

    assert run("ranks", "--nproc=0", "--", "true").returncode == 2
    bad = run("ranks", "--nproc=2", "--grace=soon", "--", "true")
    assert bad.returncode == 2 and "bad option '--grace=soon'" in bad.stderr
    missing = run("ranks", "--nproc=1", "--", "/no/such/program")
    assert missing.returncode == 127 and "cannot run '/no/such/program'" in missing.stderr


def test_rank_info_from_the_environment(monkeypatch):
    env = {
        "RANK": "5",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "8",
        "LOCAL_WORLD_SIZE": "4",
        "GROUP_RANK": "1",
        "GROUP_WORLD_SIZE": "2",
        "MASTER_ADDR": "n1",
        "MASTER_PORT": "20077",
    }
    info = RankInfo.from_env(env)
    assert (info.rank, info.local_rank, info.world_size, info.node_rank, info.num_nodes) == (5, 1, 8, 1, 2)
    assert info.master_addr == "n1" and info.master_port == 20077 and not info.is_main
    assert "rank 5 of 8" in info.describe()
    assert RankInfo.from_env({"RANK": "x", "WORLD_SIZE": "2"}) is None and RankInfo.from_env({}) is None
    for name in env:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(GpuschedError, match="not in a distributed start"):
        rank_info()
    assert check_grace(0) == 0.0


def _rank_call(tmp_path, func, nproc=2, grace=5.0, env=None):
    folder = str(tmp_path / "call")
    pyfunc.write_call(folder, func, (), {}, rank_exit_grace=grace)
    argv = local_launch_argv(
        "srun", [sys.executable, "-m", "airflow_provider_gpusched.core.pyfunc", folder], nproc, grace + 15
    )
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})
    return proc, pyfunc.read_outcome(folder), folder


def where_am_i(rank_info=None):
    return {"rank": rank_info.rank, "world": rank_info.world_size}


def fails_on_one(rank_info=None):
    import time

    if rank_info.rank == 1:
        raise KeyError("missing shard")
    time.sleep(30)


def hangs_on_one(rank_info=None):
    import time

    if rank_info.rank == 1:
        time.sleep(60)
    return rank_info.rank


def test_a_python_call_on_every_rank_returns_rank_zeros_value(tmp_path):
    proc, outcome, _ = _rank_call(tmp_path, where_am_i, nproc=3)
    assert proc.returncode == 0, proc.stderr
    assert outcome.finished and outcome.value == {"rank": 0, "world": 3}


def test_the_first_rank_to_raise_is_the_error_with_its_rank_and_host(tmp_path):
    proc, outcome, _ = _rank_call(tmp_path, fails_on_one, nproc=3)
    assert proc.returncode != 0
    error = outcome.error
    assert error.rank == 1 and error.host and error.exc_type == "KeyError"
    assert str(error).startswith("KeyError: 'missing shard' (rank 1 of 3 on ")
    assert "fails_on_one" in error.remote_traceback


def test_a_rank_that_outlives_the_others_stops_itself_saying_where(tmp_path):
    started = time.monotonic()
    proc, outcome, _ = _rank_call(tmp_path, hangs_on_one, nproc=2, grace=1)
    assert time.monotonic() - started < 30
    assert outcome.error is not None and outcome.error.exc_type == "RankStillRunning" and outcome.error.rank == 1
    assert "still running 1 s after rank 0 ended" in str(outcome.error)
    assert "hangs_on_one" in outcome.error.remote_traceback  # the stack of where it was


def test_a_rank_record_that_is_not_one_is_reported_not_trusted(tmp_path):
    folder = tmp_path / "call"
    pyfunc.write_call(str(folder), where_am_i, rank_exit_grace=1)
    (folder / "error.rank-3.json").write_text("[1, 2]")
    outcome = pyfunc.read_outcome(str(folder))
    assert outcome.error.exc_type == "UnreadableError" and "error.rank-3.json" in str(outcome.error)
    (folder / "error.rank-3.json").write_text("{not json")
    assert "not valid JSON" in str(pyfunc.read_outcome(str(folder)).error) or "error.rank-3.json" in str(
        pyfunc.read_outcome(str(folder)).error
    )
    pyfunc.write_call(str(folder), where_am_i, rank_exit_grace=1)  # a new call clears the old ranks' records
    assert not list(folder.glob("error.rank-*.json")) and not pyfunc.read_outcome(str(folder)).finished


def test_a_distributed_call_outside_a_distributed_start_says_so(tmp_path):
    folder = tmp_path / "call"
    pyfunc.write_call(str(folder), where_am_i, rank_exit_grace=1)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_provider_gpusched.core.pyfunc", str(folder)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "RANK and WORLD_SIZE are not set" in str(pyfunc.read_outcome(str(folder)).error)


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGKILL"])
def test_the_launchers_note_file_is_gone_however_the_job_ends(tmp_path, signal_name):
    """Issue 53, item 18: the launcher's temporary file stayed in /tmp when its job was cancelled. It is unlinked
    as soon as it is open, so a SIGKILL (scancel after KillWait) leaves nothing either."""
    import signal

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text("#!/bin/bash\nexec sleep 60\n")
    os.chmod(fake / "srun", 0o755)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {
        **os.environ,
        "PATH": f"{fake}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "79",
        "SLURM_JOB_NUM_NODES": "1",
        "TMPDIR": str(scratch),
    }
    proc = subprocess.Popen(
        slurm_launch_argv("srun", ["prog"], 1, 5), env=env, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    line = proc.stderr.readline()  # "[gpusched] srun start: ...": the note file was made before it
    assert "srun start" in line
    time.sleep(0.3)
    os.killpg(proc.pid, getattr(signal, signal_name))  # as scancel signals every process of the job
    proc.wait(timeout=30)
    assert list(scratch.iterdir()) == []
