"""The ``gpusched`` command line: look at and act on the work this provider schedules."""

from __future__ import annotations

import argparse
import json
import sys

from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.slurm import CommandRunner, SlurmClient


def _slurm_status(args) -> int:
    client = SlurmClient(CommandRunner())
    statuses = client.statuses(args.job_ids)
    if args.json:
        print(json.dumps({k: v.to_dict() for k, v in statuses.items()}, indent=2))
    else:
        for status in statuses.values():
            print(status.describe())
            for task in status.tasks.values():
                print("  " + task.describe())
    return 0


def _slurm_cancel(args) -> int:
    SlurmClient(CommandRunner()).cancel(args.job_ids, signal=args.signal)
    return 0


def _slurm_tail(args) -> int:
    print(SlurmClient(CommandRunner()).tail(args.path, args.lines))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpusched", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    slurm = sub.add_parser("slurm", help="Slurm jobs").add_subparsers(dest="slurm_command", required=True)
    p = slurm.add_parser("status", help="state, exit code and restarts of jobs (one squeue call)")
    p.add_argument("job_ids", nargs="+")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_slurm_status)
    p = slurm.add_parser("cancel", help="scancel jobs")
    p.add_argument("job_ids", nargs="+")
    p.add_argument("--signal", help="send this signal instead of cancelling (e.g. USR1)")
    p.set_defaults(func=_slurm_cancel)
    p = slurm.add_parser("tail", help="last lines of a job output file")
    p.add_argument("path")
    p.add_argument("-n", "--lines", type=int, default=40)
    p.set_defaults(func=_slurm_tail)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except GpuschedError as exc:
        print(f"gpusched: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
