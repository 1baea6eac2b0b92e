"""SlurmHook: a :class:`~airflow_provider_gpusched.core.slurm.SlurmClient` built from an Airflow connection.

Connection (type ``slurm``): *host* is an optional login host (commands then run through
``ssh [login@]host --``; empty means "Slurm's CLI is on this machine"), *login*/*port* are for ssh, and
the extra fields give defaults for every job (partition, account, qos, sbatch options) plus a
``slurm_conf`` path. Without a connection named ``slurm_default`` the hook uses the local CLI.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_provider_gpusched import settings
from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.job_classes import slurm_class_settings
from airflow_provider_gpusched.core.slurm import (
    SlurmClient,
    SlurmJobSpec,
    SlurmTransport,
    SSHTransport,
    transport_from_description,
)


class SlurmHook(BaseHook):
    conn_name_attr = "slurm_conn_id"
    default_conn_name = "slurm_default"
    conn_type = "slurm"
    hook_name = "Slurm"

    def __init__(self, slurm_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.slurm_conn_id = slurm_conn_id
        self._client: SlurmClient | None = None
        self._extras: dict[str, Any] | None = None
        self._runner_description: dict[str, Any] | None = None

    def _load(self) -> None:
        if self._extras is not None:
            return
        try:
            conn = self.get_connection(self.slurm_conn_id)
        except AirflowNotFoundException:
            if self.slurm_conn_id != self.default_conn_name:
                raise
            self.log.info("No connection %r: running Slurm commands on this host", self.slurm_conn_id)
            self._extras = {}
            self._runner_description = SlurmTransport().describe()
            return
        extras = self._extras_of(conn)
        # the UI stores conn-fields as extra__slurm__<name> in some versions; accept both spellings
        for key in list(extras):
            if key.startswith("extra__slurm__"):
                extras.setdefault(key[len("extra__slurm__") :], extras.pop(key))
        self._extras = extras
        slurm_conf = extras.get("slurm_conf") or None
        if conn.host:
            options = extras.get("ssh_options") or ""
            if not isinstance(options, str):
                raise InvalidArgumentError(
                    f"connection {self.slurm_conn_id!r} extra 'ssh_options'", options, "a string of ssh options"
                )
            try:
                runner = SSHTransport(
                    slurm_conf=slurm_conf,
                    host=conn.host,
                    user=conn.login or None,
                    port=conn.port or None,
                    ssh_options=shlex.split(options),
                )
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(
                    f"connection {self.slurm_conn_id!r} {exc.argument}", exc.value, exc.expected
                ) from None
            self._runner_description = runner.describe()
        else:
            self._runner_description = SlurmTransport(slurm_conf=slurm_conf).describe()

    def _extras_of(self, conn) -> dict[str, Any]:
        """The connection's extra as a dict; bad JSON is an error naming the connection (Airflow's own
        ``extra_dejson`` would log it and carry on without the connection's defaults)."""
        raw = conn.extra
        if raw in (None, ""):
            return {}
        if isinstance(raw, dict):
            return dict(raw)
        try:
            extras = json.loads(raw)
        except ValueError as exc:
            raise InvalidArgumentError(
                f"connection {self.slurm_conn_id!r} extra", raw, f"a JSON object ({exc})"
            ) from None
        if not isinstance(extras, dict):
            raise InvalidArgumentError(f"connection {self.slurm_conn_id!r} extra", raw, "a JSON object")
        return extras

    @property
    def runner_description(self) -> dict[str, Any]:
        """How to reach Slurm, as plain data (triggers carry it instead of looking up the connection)."""
        self._load()
        assert self._runner_description is not None
        return dict(self._runner_description)

    def get_conn(self) -> SlurmClient:
        if self._client is None:
            self._client = SlurmClient(transport_from_description(self.runner_description))
        return self._client

    def job_defaults(self) -> dict[str, Any]:
        """Defaults the connection gives every job (explicit operator arguments win)."""
        self._load()
        assert self._extras is not None
        defaults: dict[str, Any] = {}
        for key in ("partition", "account", "qos"):
            if self._extras.get(key):
                defaults[key] = str(self._extras[key])
        options = self._extras.get("sbatch_options")
        if options:
            if not isinstance(options, str):
                raise InvalidArgumentError(
                    f"connection {self.slurm_conn_id!r} extra 'sbatch_options'", options, "a string of sbatch options"
                )
            defaults["sbatch_args"] = shlex.split(options)
        return defaults

    def class_settings(self, job_class: str, priority: int = 0) -> dict[str, Any]:
        """What ``job_class`` means on this cluster: the ``[gpusched] job_classes`` mapping, with the
        connection extras ``idle_partition``/``idle_qos`` on top for the idle class."""
        self._load()
        assert self._extras is not None
        overrides = (
            {"partition": self._extras.get("idle_partition"), "qos": self._extras.get("idle_qos")}
            if job_class == "idle"
            else {}
        )
        return slurm_class_settings(job_class, settings.job_class_mapping(), priority, overrides)

    def apply_defaults(self, spec: SlurmJobSpec, job_class: str = "normal", priority: int = 0) -> SlurmJobSpec:
        """Explicit job settings win over the job class, which wins over the connection's defaults."""
        return spec.with_defaults(**self.class_settings(job_class, priority)).with_defaults(**self.job_defaults())

    def test_connection(self) -> tuple[bool, str]:
        try:
            out = self.get_conn().runner.run(["sinfo", "-h", "-o", "%P %a %D %G"]).stdout
        except Exception as exc:  # noqa: BLE001
            return False, str(exc)
        return True, "sinfo: " + "; ".join(out.split("\n")[:5])
