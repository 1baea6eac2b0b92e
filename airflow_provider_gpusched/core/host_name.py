"""This host's name, as the fleet, the GPU timeline and the lease records spell it."""

from __future__ import annotations

import os
import socket

#: set it where hosts share one name (containers on the machine's network)
HOST_NAME_ENV = "GPUSCHED_HOST_NAME"


def this_host() -> str:
    """This host's name in the fleet: ``$GPUSCHED_HOST_NAME`` where set (hosts that share one name, such as
    containers on the machine's network), else as Airflow's default ``hostname_callable`` gives it
    (``socket.getfqdn``)."""
    return os.environ.get(HOST_NAME_ENV) or socket.getfqdn()
