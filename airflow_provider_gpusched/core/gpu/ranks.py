"""How a distributed start's ranks start on this host's GPUs (the GPUs of a lease): one ``torchrun --standalone``,
or gpusched's own launcher for ``"srun"`` (there is no srun here: ``python -m
airflow_provider_gpusched.core.distributed ranks``, which sets the variables srun would)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence

from airflow_provider_gpusched.core import distributed
from airflow_provider_gpusched.core.checks import is_int
from airflow_provider_gpusched.core.distributed import DEFAULT_RANK_EXIT_GRACE, check_grace, check_mode
from airflow_provider_gpusched.core.errors import InvalidArgumentError


def torchrun_command(env: Mapping[str, str] | None = None, python: str | None = None) -> list[str]:
    """``torchrun`` on the PATH the work will have, else ``python -m torch.distributed.run``."""
    path = (env or os.environ).get("PATH")
    found = shutil.which("torchrun", path=path)
    return [found] if found else [python or sys.executable, "-m", "torch.distributed.run"]


def local_launch_argv(
    mode: str,
    argv: Sequence[str],
    nproc: int,
    rank_exit_grace: float = DEFAULT_RANK_EXIT_GRACE,
    *,
    torchrun: Sequence[str] | None = None,
    python: str | None = None,
) -> list[str]:
    """``argv`` started as ``nproc`` ranks on this host (the GPUs of a lease): ``torchrun --standalone`` (a free
    rendezvous port of its own), or gpusched's rank launcher for ``"srun"``."""
    check_mode(mode)
    if not is_int(nproc) or nproc < 1:
        raise InvalidArgumentError("nproc", nproc, "a whole number >= 1")
    grace = check_grace(rank_exit_grace)
    argv = [str(a) for a in argv]
    if mode == "torchrun":
        return [
            *(torchrun or torchrun_command()),
            "--standalone",
            "--nnodes=1",
            f"--nproc-per-node={nproc}",
            "--max-restarts=0",
            "--no-python",
            "--",
            *argv,
        ]
    launcher = distributed.__name__
    return [python or sys.executable, "-m", launcher, "ranks", f"--nproc={nproc}", f"--grace={grace:g}", "--", *argv]
