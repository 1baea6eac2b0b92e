"""The ``gpusched`` command line given careless input: one clear line on stderr and a non-zero exit, never a
traceback; `| head` is not an error; an unreachable controller costs one Slurm call, not two."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli import gpusched as in_process
from tests.conftest import REPO


def gpusched(*args, env_extra=None, process=False):
    """``gpusched ARGS`` in the repository: through its ``main()`` in this process (tests/cli.py: the same exit
    status, stdout and stderr, and an exception that escaped it fails the test), or, with ``process``, as a process
    of its own (where the test is about one)."""
    if not process:
        return in_process(*args, cwd=REPO, env=env_extra)
    return subprocess.run(
        [sys.executable, "-m", "airflow_provider_gpusched.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env_extra or {})},
        timeout=120,
        cwd=REPO,
    )


def clear_error(proc, *phrases):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("gpusched: error: "), proc.stderr
    for phrase in phrases:
        assert phrase in proc.stderr, proc.stderr


def test_gpus_state_dir_that_is_a_file_or_missing(tmp_path):
    clear_error(
        gpusched("gpus", "--simulate", "2x8GiB", "--state-dir", "/etc/passwd"), "/etc/passwd", "not a directory"
    )
    clear_error(gpusched("gpus", "--simulate", "2x8GiB", "--state-dir", str(tmp_path / "nosuch")), "does not exist")


def test_gpus_refuses_a_world_writable_state_dir(tmp_path):
    d = tmp_path / "open"
    d.mkdir()
    os.chmod(d, 0o777)
    clear_error(gpusched("gpus", "--simulate", "2x8GiB", "--state-dir", str(d)), "writable by every user")


def test_sweep_preview_of_a_directory_and_results_root_that_is_a_file(tmp_path):
    clear_error(gpusched("sweep", "preview", str(tmp_path)), "a YAML file, not a directory")
    spec = REPO / "dags" / "sweeps" / "lr_schedule.yaml"
    afile = tmp_path / "afile"
    afile.write_text("x")
    clear_error(gpusched("sweep", "preview", str(spec), "--results-root", str(afile)), "results_root", "is a file")
    bad = gpusched("sweep", "preview", str(spec), "--limit", "0")
    assert bad.returncode == 2 and "expected a whole number >= 1" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize(
    "content, phrase",
    [
        (None, "summary.json: missing"),
        ("{not json", "summary.json: malformed"),
        ("[1, 2]", "summary.json: malformed"),
        ('{"counts": {}}', "malformed: expected the keys 'table' and 'counts'"),
    ],
)
def test_sweep_results_says_missing_or_malformed(tmp_path, content, phrase):
    folder = tmp_path / "sweep"
    folder.mkdir()
    if content is not None:
        (folder / "summary.json").write_text(content)
    clear_error(gpusched("sweep", "results", str(folder)), phrase)


def test_sweep_results_of_a_missing_folder(tmp_path):
    clear_error(gpusched("sweep", "results", str(tmp_path / "nosuch")), "no such sweep folder")


@pytest.mark.heavy  # 1.0 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_sweep_results_into_a_closed_pipe_is_not_an_error(tmp_path):
    from airflow_provider_gpusched.core.sweep import Objective, SweepSpec
    from airflow_provider_gpusched.core.sweep.running.session import SweepSession

    spec = SweepSpec(
        name="many",
        test_config=[{"x": list(range(3000))}],
        command=["true"],
        objective=Objective("y"),
        results_root=str(tmp_path),
    )
    session = SweepSession(spec)
    session.prepare()
    session.collect()
    head = subprocess.Popen(["head", "-n", "1"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    cli = subprocess.Popen(
        [sys.executable, "-m", "airflow_provider_gpusched.cli", "sweep", "results", str(tmp_path / "many")],
        stdout=head.stdin,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )
    head.stdin.close()
    _, err = cli.communicate(timeout=60)
    head.wait(timeout=60)
    assert cli.returncode == 0 and b"Traceback" not in err and b"BrokenPipe" not in err, err


@pytest.mark.parametrize(
    "args, phrase",
    [
        (["-n", "0"], "expected a whole number >= 1"),
        (["-n", "-3"], "expected a whole number >= 1"),
    ],
)
def test_slurm_tail_line_counts(tmp_path, args, phrase):
    f = tmp_path / "out"
    f.write_text("a\nb\n")
    proc = gpusched("slurm", "tail", str(f), *args)
    assert proc.returncode == 2 and phrase in proc.stderr and "Traceback" not in proc.stderr


def test_slurm_tail_of_a_missing_file_or_a_directory(tmp_path):
    clear_error(gpusched("slurm", "tail", str(tmp_path / "nosuch.out")), "no such file")
    clear_error(gpusched("slurm", "tail", str(tmp_path)), "is a directory")
    f = tmp_path / "job.out"
    f.write_text("".join(f"line {i}\n" for i in range(10)))
    assert gpusched("slurm", "tail", str(f), "-n", "2").stdout.split("\n")[:2] == ["line 8", "line 9"]


def test_slurm_commands_refuse_option_like_ids():
    clear_error(gpusched("slurm", "cancel", "--", "--me"), "job_ids", "a Slurm job id")
    clear_error(gpusched("slurm", "status", "1;true"), "a Slurm job id")


@pytest.mark.slurm
def test_unreachable_controller_costs_one_call_and_says_so(slurm_cluster, tmp_path):
    conf = tmp_path / "slurm.conf"
    lines = [
        line
        for line in Path(slurm_cluster).read_text().splitlines()
        if not line.startswith(("SlurmctldPort", "MessageTimeout"))
    ]
    conf.write_text("\n".join([*lines, "SlurmctldPort=6999", "MessageTimeout=3"]) + "\n")  # nothing listens there
    env = {"SLURM_CONF": str(conf)}
    started = time.monotonic()
    subprocess.run(["squeue", "-h", "-j", "1"], env={**os.environ, **env}, capture_output=True)
    one_call = time.monotonic() - started
    started = time.monotonic()
    proc = gpusched("slurm", "status", "1", env_extra=env, process=True)  # its time: the process's own
    took = time.monotonic() - started
    clear_error(proc, "Unable to contact slurm controller")
    assert took < one_call * 1.5 + 3, (took, one_call)


IMPORTS_AFTER = r"""
import contextlib, io, json, sys
from airflow_provider_gpusched.cli import main
loaded_by_import = sorted(sys.modules)
output = io.StringIO()
with contextlib.redirect_stdout(output):
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
print(json.dumps({"import": loaded_by_import, "run": sorted(sys.modules), "output": output.getvalue()}))
"""


def _modules_loaded(*args, cwd=REPO):
    proc = subprocess.run(
        [sys.executable, "-c", IMPORTS_AFTER, *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.heavy  # 0.7 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_each_subcommand_imports_only_what_it_uses():
    """`gpusched partition` pays for the partitioner only: not for the Slurm client (asyncio), the sweep package
    or numpy and SciPy (needed only by the integer program for very large host-count spaces); the command line
    itself imports none of them."""
    heavy = (
        "numpy",
        "scipy",
        "yaml",
        "asyncio",
        "airflow_provider_gpusched.core.slurm",
        "airflow_provider_gpusched.core.sweep",
        "airflow_provider_gpusched.core.partition",
        "airflow",
    )
    seen = _modules_loaded("partition", "--help")
    assert not [m for m in seen["import"] if m in heavy or m.startswith(tuple(h + "." for h in heavy))]
    seen = _modules_loaded("partition", "-m", "google/vit-base-patch16-224", cwd=REPO / "dags" / "partition")
    loaded = set(seen["run"])
    assert "airflow_provider_gpusched.core.partition.solver" in loaded
    assert seen["output"].startswith("- "), seen["output"]  # it really printed a schedule
    assert not loaded & {
        "asyncio",
        "numpy",
        "scipy",
        "airflow_provider_gpusched.core.slurm",
        "airflow_provider_gpusched.core.sweep",
        "airflow",
    }, sorted(loaded & {"asyncio", "numpy", "scipy", "airflow"})
    seen = _modules_loaded("sweep", "preview", str(REPO / "dags" / "sweeps" / "lr_schedule.yaml"))
    loaded = set(seen["run"])
    assert "airflow_provider_gpusched.core.sweep.definition.sweep_spec" in loaded
    assert not loaded & {"numpy", "airflow_provider_gpusched.core.partition", "airflow_provider_gpusched.core.slurm"}


def test_sweep_preview_labels_lists_every_trial_in_one_string(tmp_path):
    out = gpusched(
        "sweep",
        "preview",
        str(REPO / "dags" / "sweeps" / "gpu_task_scheduler.yaml"),
        "--labels",
        "--results-root",
        str(tmp_path),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (
        "method-GAN,num_packing-1,num_zmode-1+method-ALI,num_packing-1,num_zmode-1+"
        "method-WGAN,num_packing-3,num_zmode-1+method-WGAN,num_packing-3,num_zmode-2"
    )
    spec = tmp_path / "rounds.yaml"
    spec.write_text("name: r\nsearch: optuna\nspace: {x: {uniform: [0, 1]}}\ncommand: [x]\nobjective: maximize y\n")
    out = gpusched("sweep", "preview", str(spec), "--labels", "--results-root", str(tmp_path))
    assert out.returncode != 0 and "makes its trials round by round: no labels before it runs" in out.stderr


def test_careless_inputs_found_by_the_second_hardening_round(tmp_path):
    """Issue 30, item 12: each gives one clear line and exit 2, never a traceback, a hang or silence."""
    clear_error(
        gpusched("gpus", "--simulate", "99999999999x24GiB", "--state-dir", str(tmp_path)),
        "simulate_gpus",
        "at most 1024 GPUs",
    )
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    try:
        clear_error(gpusched("sweep", "preview", str(fifo), process=True), "not a FIFO")
        clear_error(gpusched("slurm", "tail", str(fifo), process=True), "not a regular file")
    finally:
        fifo.unlink()  # pytest keeps temporary folders: a FIFO left there blocks whoever reads every file
    clear_error(
        gpusched(
            "queue", "list", "--no-slurm", "--simulate", "1x8GiB", "--state-dir", str(tmp_path), "--state", "BOGUS"
        ),
        "--state 'BOGUS': not a state of listed work",
        "running",
    )
    listed = gpusched(
        "queue",
        "list",
        "--no-slurm",
        "--simulate",
        "1x8GiB",
        "--state-dir",
        str(tmp_path),
        "--state",
        "RUNNING",
        "--state",
        "pending",
    )
    assert listed.returncode == 0, listed.stderr


def test_a_stop_reason_with_newlines_and_terminal_escapes_is_listed_escaped(tmp_path):
    os.chmod(tmp_path, 0o700)
    reason = "line one\nline two \x1b[2J\x1b[31mred"
    stop = gpusched(
        "queue",
        "stop",
        "--dag",
        "d",
        "--reason",
        reason,
        "--no-slurm",
        "--simulate",
        "1x8GiB",
        "--state-dir",
        str(tmp_path),
    )
    assert stop.returncode in (0, 1), stop.stderr
    listed = gpusched("queue", "list", "--no-slurm", "--simulate", "1x8GiB", "--state-dir", str(tmp_path))
    assert listed.returncode == 0, listed.stderr
    assert "\x1b" not in listed.stdout and "line one\\nline two \\x1b[2J" in listed.stdout, listed.stdout
