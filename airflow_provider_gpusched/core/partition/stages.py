"""Running a partitioned pipeline's stages where the partitioner put them, each told its layers and its
neighbours' addresses (``host:port``) so that a pipeline runtime can connect them.

``stage_plan(schedule stages, ...)`` gives each stage its environment:

==============================  ===========================================================
``GPUSCHED_STAGE``              the stage's number, 1-based
``GPUSCHED_STAGES``             how many stages
``GPUSCHED_STAGE_HOST``         the host the partitioner chose (devices.yml)
``GPUSCHED_STAGE_FIRST/LAST``   its layers, 1-based, inclusive
``GPUSCHED_STAGE_ADDR``         where it listens (``host:port``)
``GPUSCHED_STAGE_PREV_ADDR``    the previous stage's address ('' for the first)
``GPUSCHED_STAGE_NEXT_ADDR``    the next stage's address ('' for the last)
==============================  ===========================================================

On Slurm a pipeline is one job (all stages start together, as a pipeline needs: a stage waiting in the queue
would hold the others' GPUs idle): ``python -m airflow_provider_gpusched.core.partition.stages --plan JSON --
COMMAND...`` runs inside it and starts each stage as a job step on its host (``srun --nodelist=HOST``), with the
stage's environment, prefixes each output line with ``[stage N on HOST]``, and ends when every stage has; when
one fails the others are stopped and it exits with that stage's status, naming it. With ``pinned`` false the
stages all run on the job's first node (a stand-in where the hosts are not Slurm nodes), addressed by its name.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import IO, Any

from airflow_provider_gpusched.core.checks import is_int

_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


def stage_plan(
    stages: Sequence[dict[str, Any]], *, base_port: int = 29700, address_of: dict[str, str] | None = None
) -> list[dict[str, str]]:
    """Each stage's environment (the table above). ``stages`` as PipelinePartitionOperator returns them
    (``host``, ``layers``); stage N listens on ``base_port + N - 1`` at ``address_of[host]`` (default: the
    host's own name)."""
    if not is_int(base_port) or not 1024 <= base_port <= 65535 - len(stages):
        raise ValueError(f"base_port: expected a port from 1024 to {65535 - len(stages)}, got {base_port!r}")
    address_of = address_of or {}
    addresses = []
    for n, s in enumerate(stages):
        host = str(address_of.get(s["host"], s["host"]))
        if not _HOST.match(host):
            raise ValueError(f"stage {n + 1}: host {host!r}: expected a host name (letters, digits, '.', '-', '_')")
        addresses.append(f"{host}:{base_port + n}")
    plan = []
    for n, s in enumerate(stages):
        first, last = s["layers"]
        plan.append(
            {
                "GPUSCHED_STAGE": str(n + 1),
                "GPUSCHED_STAGES": str(len(stages)),
                "GPUSCHED_STAGE_HOST": str(s["host"]),
                "GPUSCHED_STAGE_FIRST": str(first),
                "GPUSCHED_STAGE_LAST": str(last),
                "GPUSCHED_STAGE_ADDR": addresses[n],
                "GPUSCHED_STAGE_PREV_ADDR": addresses[n - 1] if n else "",
                "GPUSCHED_STAGE_NEXT_ADDR": addresses[n + 1] if n + 1 < len(stages) else "",
            }
        )
    return plan


def launch_command(
    plan: list[dict[str, str]], command: Sequence[str], *, pinned: bool, python: str | None = None
) -> list[str]:
    """The job's command: this module's launcher with the plan, then the stage command after ``--``."""
    return [
        python or sys.executable,
        "-m",
        "airflow_provider_gpusched.core.partition.stages",
        "--plan",
        json.dumps({"pinned": pinned, "stages": plan}, separators=(",", ":")),
        "--",
        *command,
    ]


def _read_plan(text: str) -> tuple[bool, list[dict[str, str]]]:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise SystemExit(f"gpusched stages: --plan: not JSON ({exc})") from None
    stages = doc.get("stages") if isinstance(doc, dict) else None
    if (
        not isinstance(stages, list)
        or not stages
        or not all(
            isinstance(s, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in s.items())
            and _HOST.match(s.get("GPUSCHED_STAGE_HOST", ""))
            for s in stages
        )
    ):
        raise SystemExit(
            'gpusched stages: --plan: expected {"pinned": bool, "stages": [{env of each stage, '
            "GPUSCHED_STAGE_HOST a host name}]}"
        )
    unknown = {k for s in stages for k in s if not k.startswith("GPUSCHED_STAGE")}
    if unknown:
        raise SystemExit(f"gpusched stages: --plan: unexpected variables {sorted(unknown)}")
    return bool(doc.get("pinned")), stages


def run(plan_text: str, command: list[str]) -> int:
    pinned, stages = _read_plan(plan_text)
    if not command:
        raise SystemExit("gpusched stages: give the stage command after --")
    here = os.environ.get("SLURMD_NODENAME", "")
    if not pinned and not here:
        raise SystemExit("gpusched stages: not inside a Slurm job (no SLURMD_NODENAME)")
    procs: list[tuple[dict[str, str], subprocess.Popen[Any]]] = []
    lock = threading.Lock()

    def pump(label: str, stream: IO[bytes]) -> None:
        for raw in iter(stream.readline, b""):
            with lock:
                sys.stdout.write(f"[{label}] {raw.decode(errors='replace').rstrip()}\n")
                sys.stdout.flush()

    threads = []
    for s in stages:
        env = dict(os.environ)
        if not pinned:  # every stage on this node, addressed by its name
            s = {**s, **{k: re.sub(r"^[^:]+:", f"{here}:", v) if v else v for k, v in s.items() if k.endswith("_ADDR")}}
        env.update(s)
        node = s["GPUSCHED_STAGE_HOST"] if pinned else here
        argv = [
            "srun",
            "--nodes=1",
            "--ntasks=1",
            "--overlap",
            f"--nodelist={node}",
            f"--job-name=stage-{s['GPUSCHED_STAGE']}",
            "--",
            *command,
        ]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        procs.append((s, proc))
        t = threading.Thread(target=pump, args=(f"stage {s['GPUSCHED_STAGE']} on {node}", proc.stdout), daemon=True)
        t.start()
        threads.append(t)
    failed: tuple[dict[str, str], int] | None = None
    pending = list(procs)
    while pending:
        for item in list(pending):
            s, proc = item
            try:
                code = proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                continue
            pending.remove(item)
            if code != 0 and failed is None:
                failed = (s, code)
                for _, other in pending:  # the pipeline cannot go on without this stage
                    other.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(timeout=5)
    if failed is not None:
        s, code = failed
        print(
            f"gpusched stages: stage {s['GPUSCHED_STAGE']} of {s['GPUSCHED_STAGES']} (host "
            f"{s['GPUSCHED_STAGE_HOST']}, layers {s['GPUSCHED_STAGE_FIRST']}-{s['GPUSCHED_STAGE_LAST']}) failed with "
            f"exit status {code}; the other stages were stopped",
            file=sys.stderr,
            flush=True,
        )
        return code if 0 < code < 256 else 1
    print(f"gpusched stages: all {len(stages)} stages finished", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(
        prog="python -m airflow_provider_gpusched.core.partition.stages",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--plan", required=True, help='JSON: {"pinned": bool, "stages": [stage env, ...]}')
    args = parser.parse_args(argv)
    return run(args.plan, command)


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["launch_command", "main", "run", "stage_plan"]
