"""How to reach Slurm, chosen in one place: the transport a description names (the CLI here, ssh to a login host,
or slurmrestd), and the client of that transport."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_gpusched.core.slurm.client import SlurmClient
from airflow_provider_gpusched.core.slurm.rest import SlurmRestClient, SlurmRestTransport
from airflow_provider_gpusched.core.slurm.transport import SlurmTransport, SSHTransport


def transport_from_description(desc: Mapping[str, Any], token: str | None = None) -> SlurmTransport:
    """Inverse of :meth:`SlurmTransport.describe` (``token``: the REST transport's, which no description carries)."""
    desc = dict(desc)
    if desc.get("rest_url"):
        url = desc.pop("rest_url")
        keys = ("timeout", "user", "api_version", "environment", "working_dir", "conn_id")
        return SlurmRestTransport(url=url, token=token or "", **{k: v for k, v in desc.items() if k in keys})
    if desc.get("host"):
        return SSHTransport(**desc)
    return SlurmTransport(**{k: v for k, v in desc.items() if k in ("slurm_conf", "timeout")})


def client_for(transport: SlurmTransport) -> SlurmClient:
    """The client of a transport: the CLI's (here or over ssh) or slurmrestd's."""
    if isinstance(transport, SlurmRestTransport):
        return SlurmRestClient(transport)
    return SlurmClient(transport)


def client_from_description(desc: Mapping[str, Any], token: str | None = None) -> SlurmClient:
    """:func:`client_for` the transport ``desc`` describes."""
    return client_for(transport_from_description(desc, token=token))
