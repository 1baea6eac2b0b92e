"""Launching children on leased (simulated) GPUs, stopping them, and OOM retry."""

import contextlib
import os
import re
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from airflow_provider_gpusched.core.gpu.launch import GPUChild, gpu_environment
from airflow_provider_gpusched.core.gpu.oom import OOMRetryPolicy, find_oom
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.gpu.supervisor import GPUWorkFailed, GPUWorkSupervisor, Work
from airflow_provider_gpusched.core.pyfunc import write_call

GiB = 1024**3
NEEDS_MEMORY = textwrap.dedent("""
    import os, sys
    need = float(sys.argv[1]) * 2**30
    have = float(os.environ.get("GPUSCHED_GPU_MEMORY_BYTES", "inf"))
    print("CVD", os.environ["CUDA_VISIBLE_DEVICES"], "have", have)
    if have < need:
        sys.stderr.write("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 8.00 GiB total)\\n")
        sys.exit(1)
    print("trained")
""")


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(NEEDS_MEMORY)
    return str(path)


def test_multi_gpu_request_sees_two_distinct_gpus(manager, tmp_path):
    lines = []
    runner = GPUWorkSupervisor(manager, on_line=lines.append)
    result = runner.run(
        GPURequest(gpus=2),
        Work(
            argv=[
                sys.executable,
                "-c",
                "import os; print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ['CUDA_DEVICE_ORDER'])",
            ]
        ),
        str(tmp_path / "log"),
    )
    visible, order = lines[0].split()
    assert len(set(visible.split(","))) == 2 and order == "PCI_BUS_ID"
    assert [g["index"] for g in result.gpus] == [int(x) for x in visible.split(",")]
    assert all(g["uuid"].startswith("GPU-SIMULATED-") and g["simulated"] for g in result.gpus)
    assert manager.leases() == []


def test_setup_lines_run_in_the_shell_that_starts_the_work_and_arguments_stay_verbatim(manager, tmp_path):
    (tmp_path / "env.sh").write_text("export TRAIN_ENV='activated env'\n")
    tricky = ["a b", "it's", '"q"', "x; rm -rf /", "$HOME", "*"]
    lines = []
    result = GPUWorkSupervisor(manager, on_line=lines.append).run(
        GPURequest(gpus=1),
        Work(
            argv=[
                sys.executable,
                "-c",
                "import os, sys; print(os.environ['TRAIN_ENV'], os.environ['CUDA_VISIBLE_DEVICES'], sys.argv[1:])",
                *tricky,
            ],
            setup=[f"source {tmp_path}/env.sh", "cd /"],
        ),
        str(tmp_path / "log"),
    )
    assert result.exit_code == 0
    assert lines == [f"activated env {result.gpus[0]['index']} {tricky!r}"]
    lines.clear()
    GPUWorkSupervisor(manager, on_line=lines.append).run(  # a shell command line goes on in the same shell
        GPURequest(gpus=1),
        Work(shell_command='echo "$TRAIN_ENV" from "$PWD"', setup=f"source {tmp_path}/env.sh; cd /"),
        str(tmp_path / "log"),
    )
    assert lines == ["activated env from /"]


def test_cpus_are_reserved_like_host_memory_and_the_child_is_pinned_to_them(manager, tmp_path):
    import os

    from airflow_provider_gpusched.core.errors import InvalidArgumentError

    host = sorted(os.sched_getaffinity(0))
    first, why = manager.try_acquire(GPURequest(gpu_memory="1GiB", cpus=1), "a")
    assert first is not None and first.cpus == host[:1] and why == ""
    rest = len(host) - 1
    if rest:
        second, _ = manager.try_acquire(GPURequest(gpu_memory="1GiB", cpus=rest), "b")
        assert second.cpus == host[1:]
    third, why = manager.try_acquire(GPURequest(gpu_memory="1GiB", cpus=1), "c")
    assert (
        third is None
        and why
        == f"host CPUs: {len(host)} of {len(host)} are reserved by {1 + bool(rest)} lease(s); the request wants 1"
    )
    for lease in manager.leases():
        manager.release(lease)
    lines = []
    GPUWorkSupervisor(manager, on_line=lines.append).run(
        GPURequest(gpu_memory="1GiB", cpus=1),
        Work(
            argv=[
                sys.executable,
                "-c",
                (
                    "import os, subprocess, sys; print(sorted(os.sched_getaffinity(0)), os.environ['GPUSCHED_CPUS'], "
                    "os.environ['OMP_NUM_THREADS'], subprocess.run([sys.executable, '-c', 'import os; "
                    "print(sorted(os.sched_getaffinity(0)))'], capture_output=True, text=True).stdout.strip())"
                ),
            ]
        ),
        str(tmp_path / "log"),
    )
    assert lines == [f"{host[:1]} {host[0]} 1 {host[:1]}"]  # pinned, and what it starts inherits the pinning
    with pytest.raises(InvalidArgumentError, match="cpus"):
        manager.check_possible(GPURequest(cpus=len(host) + 1))
    with pytest.raises(InvalidArgumentError, match="cpus"):
        GPURequest(cpus=0)


def test_work_is_stopped_at_its_time_limit_and_fails_saying_so(manager, tmp_path):
    import time

    from airflow_provider_gpusched.core.gpu.supervisor import GPUWorkFailed

    started = time.monotonic()
    with pytest.raises(
        GPUWorkFailed, match=r"reached its time limit \(00:00:01\) after 1\.\d+s and was stopped"
    ) as failed:
        GPUWorkSupervisor(manager, grace=1).run(
            GPURequest(gpus=1), Work(argv=["sleep", "60"], time_limit=1), str(tmp_path / "log")
        )
    assert failed.value.timed_out and not failed.value.oom
    assert time.monotonic() - started < 10 and manager.leases() == []  # stopped, not waited for
    assert (
        GPUWorkSupervisor(manager)
        .run(GPURequest(gpus=1), Work(argv=["true"], time_limit=5), str(tmp_path / "log"))
        .exit_code
        == 0
    )  # within its limit: no effect


def test_setup_must_be_shell_lines():
    from airflow_provider_gpusched.core.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="setup"):
        Work(argv=["true"], setup=[["source", "x"]])


def test_shared_gpu_children_get_memory_hints(manager, tmp_path):
    lease, _ = manager.try_acquire(GPURequest(gpu_memory="6GiB"), "t")
    env = gpu_environment(lease, {0: 24 * GiB}, base={})
    assert env["GPUSCHED_GPU_MEMORY_BYTES"] == str(6 * GiB)
    assert env["GPUSCHED_GPU_MEMORY_FRACTION"] == "0.2500"
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false" and env["GPUSCHED_GPUS_SIMULATED"] == "1"


def test_oom_is_retried_with_a_bigger_reservation(manager, program, tmp_path):
    events = []
    runner = GPUWorkSupervisor(manager, oom_policy=OOMRetryPolicy(retries=2, factor=1.5), on_event=events.append)
    result = runner.run(GPURequest(gpu_memory="4GiB"), Work(argv=[sys.executable, program, "5"]), str(tmp_path / "log"))
    assert result.exit_code == 0 and result.oom_retries == 1
    assert [a.request for a in result.attempts] == ["4.0GiB on 1 GPU", "6.0GiB on 1 GPU"]
    assert any("retrying with 6.0GiB" in e for e in events)
    assert "trained" in Path(result.log_path).read_text()


def test_oom_escalates_to_a_whole_gpu_last(manager, program, tmp_path):
    runner = GPUWorkSupervisor(manager, oom_policy=OOMRetryPolicy(retries=2, factor=1.5))
    result = runner.run(GPURequest(gpu_memory="4GiB"), Work(argv=[sys.executable, program, "20"]), str(tmp_path / "l"))
    assert [a.request for a in result.attempts] == ["4.0GiB on 1 GPU", "6.0GiB on 1 GPU", "1 whole GPU"]


def test_oom_beyond_the_limit_and_ordinary_failures_are_not_retried(manager, program, tmp_path):
    runner = GPUWorkSupervisor(manager, oom_policy=OOMRetryPolicy(retries=1, factor=1.5))
    with pytest.raises(GPUWorkFailed) as err:
        runner.run(GPURequest(gpu_memory="4GiB"), Work(shell_command="echo oops >&2; exit 3"), str(tmp_path / "a"))
    assert len(err.value.attempts) == 1 and not err.value.oom and "exit code 3" in str(err.value)
    assert "oops" in str(err.value)
    # a program that needs more than a whole (simulated) GPU would allow: OOM every time
    script = tmp_path / "always.py"
    script.write_text("import sys; sys.exit('torch.cuda.OutOfMemoryError: CUDA out of memory')")
    with pytest.raises(GPUWorkFailed) as err:
        runner.run(GPURequest(gpu_memory="4GiB"), Work(argv=[sys.executable, str(script)]), str(tmp_path / "b"))
    assert err.value.oom and len(err.value.attempts) == 2
    assert "GPU out of memory" in str(err.value)


@pytest.mark.parametrize(
    "line",
    [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
        "torch.cuda.OutOfMemoryError: CUDA out of memory.",
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape",
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.2GiB.",
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "cudaErrorMemoryAllocation: out of memory",
    ],
)
def test_oom_messages_of_each_framework(line):
    assert find_oom(["step 1", line, "bye"]) == line


@pytest.mark.parametrize("line", ["MemoryError", "Killed", "RuntimeError: shape mismatch", "loss=0.3 memory 10GiB"])
def test_other_failures_are_not_oom(line):
    assert find_oom([line]) is None


def test_oom_policy_validation():
    from airflow_provider_gpusched.core.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="oom_factor"):
        OOMRetryPolicy(factor=1.0)
    with pytest.raises(InvalidArgumentError, match="oom_retries"):
        OOMRetryPolicy(retries=-1)


def test_stop_kills_grandchildren_and_escapees(tmp_path):
    script = tmp_path / "spawn.sh"
    script.write_text(
        "sleep 300 &\necho $! > " + str(tmp_path / "grandchild") + "\n"
        "setsid sleep 301 &\necho $! > " + str(tmp_path / "escapee") + "\n"
        "trap '' TERM\nwait\n"
    )  # the child itself ignores SIGTERM: SIGKILL after the grace
    child = GPUChild(["bash", str(script)], env=dict(os.environ), cwd=None, log_path=str(tmp_path / "log")).start()
    deadline = time.time() + 10
    while not (tmp_path / "escapee").exists() and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    pids = [child.pid, int((tmp_path / "grandchild").read_text()), int((tmp_path / "escapee").read_text())]
    assert all(psutil.pid_exists(p) for p in pids)
    started = time.time()
    code = child.stop(grace=1.0)
    assert code is not None and time.time() - started < 8
    time.sleep(0.2)
    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert alive == []


COUNT_SIGTERMS = """
import os, signal, subprocess, sys, time
out = sys.argv[1]
def note(*_):
    with open(out, "a") as f:
        f.write("%d\\n" % os.getpid())
signal.signal(signal.SIGTERM, note)
if len(sys.argv) > 2:  # the work: a helper process in its group, and one that left it
    subprocess.Popen([sys.executable, __file__, out])
    subprocess.Popen([sys.executable, __file__, out], start_new_session=True)
open(out + ".ready." + str(os.getpid()), "w").close()
deadline = time.monotonic() + 3  # long past the stop: a second SIGTERM would be written down
while time.monotonic() < deadline:
    time.sleep(0.05)
"""


def test_stop_sends_each_process_of_the_work_one_sigterm(tmp_path):
    """The shim passes SIGTERM on to every descendant; the launcher signals only the shim. Signalling the group too
    reached the work twice, and training code whose handler raises SystemExit (to checkpoint and exit) got a second
    SystemExit inside its own cleanup: seen as a preempted task whose error record was never written."""
    script = tmp_path / "count.py"
    script.write_text(COUNT_SIGTERMS)
    out = tmp_path / "sigterms"
    child = GPUChild(
        [sys.executable, str(script), str(out), "work"], env=dict(os.environ), cwd=None, log_path=str(tmp_path / "log")
    ).start()
    deadline = time.monotonic() + 30
    while len(list(tmp_path.glob("sigterms.ready.*"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(list(tmp_path.glob("sigterms.ready.*"))) == 3
    child.stop(grace=5.0)  # each handles SIGTERM and lives on until the grace period's SIGKILL
    received = out.read_text().split()
    assert sorted(received) == sorted(p.name.rsplit(".", 1)[1] for p in tmp_path.glob("sigterms.ready.*")), received


def test_stop_event_stops_the_run_and_frees_the_gpu(manager, tmp_path):
    runner = GPUWorkSupervisor(manager, grace=1.0)
    threading.Timer(1.0, runner.stop).start()
    with pytest.raises(GPUWorkFailed):
        runner.run(GPURequest(gpus=4), Work(argv=["sleep", "300"]), str(tmp_path / "log"))
    assert manager.leases() == []


def test_python_callable_runs_on_the_gpu_and_returns_its_value(manager, tmp_path):
    def train(lr, epochs=1):
        import os

        return {"lr": lr, "epochs": epochs, "gpus": os.environ["CUDA_VISIBLE_DEVICES"]}

    call_dir = str(tmp_path / "call")
    write_call(call_dir, train, (0.1,), {"epochs": 3})
    result = GPUWorkSupervisor(manager).run(
        GPURequest(gpu_memory="1GiB"), Work(call_dir=call_dir), str(tmp_path / "log")
    )
    assert result.value == {"lr": 0.1, "epochs": 3, "gpus": "0"}


def test_string_commands_need_shell_said_explicitly(tmp_path):
    with pytest.raises(TypeError, match="shell=True"):
        GPUChild("echo hi; rm -rf /", env={}, cwd=None, log_path=str(tmp_path / "l"))
    from airflow_provider_gpusched.core.errors import GpuschedError

    with pytest.raises(GpuschedError, match="shell_command"):
        Work(argv="echo hi")


def test_oom_recognised_from_gpu_memory_evidence_without_a_message(tmp_path):
    """The child dies without printing an OOM message, but the GPU's process list shows it at its
    reservation (as NVML would): that counts as an OOM and is retried bigger."""
    from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
    from airflow_provider_gpusched.core.gpu.leases import LeaseManager

    usage = tmp_path / "usage.json"
    script = tmp_path / "silent.py"
    script.write_text(
        textwrap.dedent(f"""
        import json, os, sys, time
        have = int(os.environ["GPUSCHED_GPU_MEMORY_BYTES"])
        gpu = os.environ["CUDA_VISIBLE_DEVICES"]
        with open({str(usage)!r}, "w") as fh:  # what NVML would report for this process
            json.dump({{gpu: {{"memory_used": have, "processes": [{{"pid": os.getpid(), "used_memory": have}}]}}}}, fh)
        time.sleep(0.5)
        if have < 5 * 2**30:
            sys.exit(1)   # died silently
        print("ok")
    """)
    )
    manager = LeaseManager(SimulatedInventory("4x24GiB", usage_file=str(usage)), str(tmp_path / "leases"))
    runner = GPUWorkSupervisor(manager, sample_interval=0.1)
    result = runner.run(GPURequest(gpu_memory="4GiB"), Work(argv=[sys.executable, str(script)]), str(tmp_path / "log"))
    assert result.oom_retries == 1
    assert "GPU memory evidence" in result.attempts[0].oom


LEAVES_PROCESSES = """
import os, subprocess, sys, time
out = sys.argv[1]
pids = [subprocess.Popen(["sleep", "300"]).pid]                              # cmd &: same session
pids.append(subprocess.Popen(["sleep", "301"], start_new_session=True).pid)  # setsid: a session of its own
r, w = os.pipe()
if os.fork() == 0:                                                            # a double fork, in its own session
    os.setsid()
    if os.fork() == 0:
        os.write(w, str(os.getpid()).encode())
        os.execvp("sleep", ["sleep", "302"])
    os._exit(0)
os.close(w)
os.wait()
pids.append(int(os.read(r, 32)))
open(out, "w").write(" ".join(map(str, pids)))
"""


def test_work_that_ends_leaves_no_process_running_before_its_gpu_is_given_out(manager, tmp_path):
    """Issue 30: a child that exits 0 after starting `cmd &`, a setsid child and a double-forked one: all three are
    stopped (found by session and by the lease id in their environment) before the lease is released."""
    runner = GPUWorkSupervisor(manager, grace=1.0)
    lines = []
    runner.on_line = lines.append
    result = runner.run(
        GPURequest(gpus=1),
        Work(argv=[sys.executable, "-c", LEAVES_PROCESSES, str(tmp_path / "pids")]),
        str(tmp_path / "log"),
    )
    assert result.exit_code == 0
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert len(pids) == 3
    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert alive == [] and manager.leases() == []
    assert any("left 3 process(es) running after it ended" in line for line in lines), lines
    assert "left 3 process(es)" in (tmp_path / "log").read_text()


def test_processes_of_other_leases_and_of_the_caller_are_left_alone(tmp_path):
    import subprocess

    from airflow_provider_gpusched.core.gpu.launch import leftover_processes

    other = subprocess.Popen(["sleep", "60"], env={**os.environ, "GPUSCHED_LEASE_ID": "0" * 16}, start_new_session=True)
    mine = subprocess.Popen(["sleep", "60"], env={**os.environ, "GPUSCHED_LEASE_ID": "1" * 16}, start_new_session=True)
    # a child that exited and left a process in its session (its leader gone, reaped)
    gone = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!"], stdout=subprocess.PIPE, start_new_session=True)
    left = int(gone.stdout.readline())
    gone.wait()
    try:
        assert leftover_processes(-1, "1" * 16) == [mine.pid]
        assert leftover_processes(gone.pid, None) == [left]  # what the exited child left in its session
        # a live process with the id of the session asked about is not the exited child: its pid came round again,
        # and that session is somebody else's work (never stopped for the child's)
        assert leftover_processes(other.pid, None) == []
        assert os.getpid() not in leftover_processes(os.getsid(0), None)
    finally:
        for p in (other, mine):
            p.kill()
            p.wait()
        with contextlib.suppress(ProcessLookupError):
            os.kill(left, signal.SIGKILL)


def test_a_traceback_names_the_error_line_not_the_echoed_source_line():
    # as PyTorch 2.11 printed it on an H100 (tests/real_gpu): the source line echoed first mentions the error
    error = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has a total capacity"
    lines = [
        "Traceback (most recent call last):",
        '  File "train.py", line 9, in <module>',
        '    block = torch.empty(n, device="cuda")  # may raise torch.cuda.OutOfMemoryError',
        error,
    ]
    assert find_oom(lines) == error


def test_gpu_time_counts_a_memory_slice_as_its_share_of_the_gpu(manager, tmp_path):
    from airflow_provider_gpusched.core.gpu.accounting import accounting_totals

    sliced = GPUWorkSupervisor(manager).run(
        GPURequest(gpu_memory="6GiB"), Work(shell_command="sleep 0.5"), str(tmp_path / "slice")
    )
    whole = GPUWorkSupervisor(manager).run(GPURequest(gpus=2), Work(shell_command="sleep 0.5"), str(tmp_path / "whole"))
    (a,), (b,) = sliced.attempts, whole.attempts
    assert a.gpu_seconds == pytest.approx(0.25 * a.seconds, rel=0.01)  # 6 of 24 GiB
    assert b.gpu_seconds == pytest.approx(2 * b.seconds, rel=0.01)
    totals = accounting_totals(manager.ledger.records())["normal"]
    assert totals["gpu_seconds"] == pytest.approx(a.gpu_seconds + b.gpu_seconds, abs=0.01)


def test_a_trial_records_its_share_of_the_gpus():
    from airflow_provider_gpusched.core.sweep.records.store import gpu_share_from_env

    assert gpu_share_from_env("0,1", "0.2500") == 0.5
    assert gpu_share_from_env("3", None) == 1.0
    assert gpu_share_from_env("", "0.5") is None and gpu_share_from_env(None, None) is None
    assert gpu_share_from_env("0", "junk") == 1.0 and gpu_share_from_env("0", "7") == 1.0  # not a fraction: whole


ESCAPES = r"""
import os, subprocess, sys, time
out = sys.argv[1]
clean = {"PATH": os.environ["PATH"]}
procs = [
    subprocess.Popen(["setsid", "env", "-i", "sleep", "310"]),                        # setsid env -i
    subprocess.Popen(["setsid", "env", "-u", "GPUSCHED_LEASE_ID", "sleep", "311"]),   # env -u
    # a shell that leaves its session late, after the work has ended, with no lease id
    subprocess.Popen(["setsid", "env", "-i", "/bin/sh", "-c", "sleep 0.5; exec sleep 312"]),
]
pids = [p.pid for p in procs]
r, w = os.pipe()
if os.fork() == 0:                                     # a double fork with a clean environment
    os.setsid()
    if os.fork() == 0:
        os.write(w, (str(os.getpid()) + " ").encode())
        os.execve("/bin/sleep", ["sleep", "313"], clean)
    os._exit(0)
os.wait()
if os.fork() == 0:                                     # a daemon: double fork, chdir /, closes fds, clears env
    os.setsid()
    if os.fork() == 0:
        os.chdir("/")
        os.write(w, (str(os.getpid()) + " ").encode())
        os.closerange(0, 2)
        os.environ.clear()
        os.execve("/bin/sleep", ["sleep", "314"], {})
    os._exit(0)
os.wait()
os.close(w)
time.sleep(0.3)
pids += [int(x) for x in os.read(r, 64).split()]
open(out, "w").write(" ".join(map(str, pids)))
"""


def test_no_escape_outlives_the_work_even_without_the_lease_id(manager, tmp_path):
    """Issue 53, item 11: `setsid env -i`, `env -u GPUSCHED_LEASE_ID`, a late-starting setsid shell, a double fork
    with a clean environment and a daemon that clears its environment: none carries the lease id or stays in the
    child's session, yet all are stopped before the lease is released (the shim is their subreaper)."""
    runner = GPUWorkSupervisor(manager, grace=1.0)
    lines = []
    runner.on_line = lines.append
    result = runner.run(
        GPURequest(gpus=1), Work(argv=[sys.executable, "-c", ESCAPES, str(tmp_path / "pids")]), str(tmp_path / "log")
    )
    assert result.exit_code == 0
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert len(pids) == 5
    time.sleep(0.8)  # the late shell would have left by now
    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    late = [p for p in psutil.pids() if _cmdline(p)[:2] == ["sleep", "312"]]
    assert alive == [] and late == [] and manager.leases() == []
    said = [line for line in lines if "running after it ended" in line]  # the 5, and the late shell's own sleep
    assert len(said) == 1 and "contained" in said[0] and int(re.search(r"left (\d+) process", said[0])[1]) >= 5, lines


def _cmdline(pid):
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []


def test_the_shim_passes_the_works_exit_and_signals_on(tmp_path):
    """The child's exit code and death by signal reach the launcher unchanged through the containment shim; a
    command that cannot run says so in the log."""

    def run(argv):
        child = GPUChild(argv, env=dict(os.environ), cwd=None, log_path=str(tmp_path / "log")).start()
        return child.wait(30), child

    assert run(["sh", "-c", "exit 7"])[0] == 7
    assert run(["sh", "-c", "kill -KILL $$"])[0] == -9
    code, child = run(["/nonexistent/trainer"])
    assert code == 127 and "cannot run '/nonexistent/trainer'" in (tmp_path / "log").read_text()


def test_a_process_the_driver_still_shows_on_the_leased_gpu_after_the_work_is_reported(tmp_path):
    """Issue 53, item 11: where the driver shows a process on a leased GPU after the work and all it started are
    gone (it got out through something outside the containment: ssh, a scheduler), the task log says so. The
    simulated driver's usage file stands in for NVML; the process is a real one that is not the work's."""
    import json
    import subprocess

    from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
    from airflow_provider_gpusched.core.gpu.leases import LeaseManager

    usage = tmp_path / "usage.json"
    outsider = subprocess.Popen(["sleep", "120"])
    try:
        script = (
            f"import json; json.dump({{'0': {{'memory_used': '3GiB', 'processes': [{{'pid': {outsider.pid}, "
            f"'used_memory': '3GiB'}}]}}}}, open({str(usage)!r}, 'w'))"
        )
        manager = LeaseManager(SimulatedInventory("1x24GiB", usage_file=str(usage)), str(tmp_path / "leases"))
        lines = []
        runner = GPUWorkSupervisor(manager, grace=1.0)
        runner.on_line = lines.append
        result = runner.run(GPURequest(gpus=1), Work(argv=[sys.executable, "-c", script]), str(tmp_path / "log"))
        assert result.exit_code == 0
        said = [line for line in lines if "the driver still shows" in line]
        assert said and f"GPU 0 pid {outsider.pid} (3.0GiB)" in said[0], lines
        usage.write_text(json.dumps({}))
        lines.clear()
        runner.run(GPURequest(gpus=1), Work(argv=[sys.executable, "-c", "print('clean')"]), str(tmp_path / "log"))
        assert not [line for line in lines if "the driver still shows" in line]
    finally:
        outsider.kill()
        outsider.wait()


def test_the_shim_stays_standalone_python_3_6_code():
    """A Slurm job script carries the shim's source to compute nodes whose python3 may be old and lack this package:
    the standard library only, and syntax Python 3.6 reads (annotations a 3.6 interpreter would evaluate are
    quoted)."""
    import ast

    from airflow_provider_gpusched.core import contain

    source = contain.shim_source()
    tree = ast.parse(source, feature_version=(3, 6))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= {"contextlib", "ctypes", "os", "signal", "sys", "time"}, imported
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.arg)):
            note = node.returns if isinstance(node, ast.FunctionDef) else node.annotation
            # evaluated when the def runs: only names 3.6 has at run time (a subscript such as list[int] is not)
            assert note is None or isinstance(note, (ast.Name, ast.Constant)), ast.unparse(note)
