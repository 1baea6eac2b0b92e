"""How ``gpusched queue`` reaches Slurm (:meth:`SlurmBackend.command_handle`): through ``--slurm-conn-id`` (an
Airflow connection: local CLI or an ssh login host, read by the backend's Airflow side), else the local ``squeue``
when it is on the PATH; ``--no-slurm`` leaves it out. (The options themselves are declared with the command's
others in cli_queue.py: building the command line loads no backend.)"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any

from airflow_provider_gpusched.core.command_handle import CommandHandle


def command_handle(args: Any, connect: Callable[[str], CommandHandle]) -> CommandHandle:
    """A Slurm client, how it is reached, or why there is none."""
    conn_id = getattr(args, "slurm_conn_id", None)
    if getattr(args, "no_slurm", False):
        return CommandHandle(unavailable="Slurm not looked at (--no-slurm)", conn_id=conn_id)
    if conn_id:
        return connect(conn_id)
    if shutil.which("squeue"):
        from airflow_provider_gpusched.core.slurm import SlurmClient, SlurmTransport

        return CommandHandle(SlurmClient(SlurmTransport()), "the local Slurm commands")
    return CommandHandle(
        unavailable="Slurm not looked at: no squeue on the PATH (--slurm-conn-id ID to use a connection)"
    )
