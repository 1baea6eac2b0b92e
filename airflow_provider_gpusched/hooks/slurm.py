"""SlurmHook: a :class:`~airflow_provider_gpusched.core.slurm.SlurmClient` built from an Airflow connection.

Connection (type ``slurm``), one of three transports (docs/slurm.md "Which transport"):

* **CLI**: no *host*: Slurm's commands on this machine (``slurm_conf`` extra: its config file).
* **ssh**: *host* is a login host (commands run through ``ssh [login@]host --``), *login*/*port* for ssh.
* **REST**: *host* is slurmrestd's URL (``http(s)://...``; or the extra ``transport: "rest"`` with ``rest_url``),
  *login* the Slurm user, *password* the JWT (``scontrol token``), kept as the connection's secret and never carried
  in a trigger. Extras: ``api_version`` (``v0.0.38``), ``job_environment`` (a JSON object: every job's environment;
  PATH at least) and ``working_dir`` (a job's directory when it names none).

The extra fields give defaults for every job (partition, account, qos, sbatch options). Without a connection named
``slurm_default`` the hook uses the local CLI.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_provider_gpusched import settings
from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.slurm import (
    SlurmClient,
    SlurmJobSpec,
    SlurmTransport,
    SSHTransport,
    client_from_description,
)
from airflow_provider_gpusched.core.slurm.options import slurm_class_settings


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
        self._token: str | None = None

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
        if extras.get("transport") == "rest" or str(conn.host or "").startswith(("http://", "https://")):
            self._runner_description = self._rest_description(conn, extras)
            self._token = conn.password or ""
        elif extras.get("transport") not in (None, "", "cli", "ssh"):
            raise InvalidArgumentError(
                f"connection {self.slurm_conn_id!r} extra 'transport'", extras["transport"], "'cli', 'ssh' or 'rest'"
            )
        elif conn.host:
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
                raise self._named(exc) from None
            self._runner_description = runner.describe()
        else:
            self._runner_description = SlurmTransport(slurm_conf=slurm_conf).describe()

    def _rest_description(self, conn, extras: dict[str, Any]) -> dict[str, Any]:
        """The REST transport of a connection, checked (errors name the connection and the field)."""
        from airflow_provider_gpusched.core.slurm.rest import SlurmRestTransport

        url = str(extras.get("rest_url") or conn.host or "")
        if conn.port and url and url.count(":") < 2:
            url = f"{url.rstrip('/')}:{conn.port}"
        environment = extras.get("job_environment")
        if isinstance(environment, str) and environment.strip():
            environment = self._json_object(environment, "extra 'job_environment'")
        given: dict[str, Any] = {"url": url, "user": conn.login or "", "conn_id": self.slurm_conn_id}
        if environment:
            given["environment"] = environment
        for key in ("api_version", "working_dir"):
            if extras.get(key):
                given[key] = extras[key]
        try:
            return SlurmRestTransport(**given).describe()
        except InvalidArgumentError as exc:
            raise self._named(exc) from None

    def _named(self, exc: InvalidArgumentError) -> InvalidArgumentError:
        """A transport's refusal of a setting, with the connection named."""
        return InvalidArgumentError(f"connection {self.slurm_conn_id!r} {exc.argument}", exc.value, exc.expected)

    def _json_object(self, raw: str, what: str) -> dict[str, Any]:
        """``raw`` read as a JSON object; otherwise an error naming the connection and ``what`` (its field)."""
        try:
            value = json.loads(raw)
        except ValueError as exc:
            raise InvalidArgumentError(
                f"connection {self.slurm_conn_id!r} {what}", raw, f"a JSON object ({exc})"
            ) from None
        if not isinstance(value, dict):
            raise InvalidArgumentError(f"connection {self.slurm_conn_id!r} {what}", raw, "a JSON object")
        return value

    def _extras_of(self, conn) -> dict[str, Any]:
        """The connection's extra as a dict; bad JSON is an error naming the connection (Airflow's own
        ``extra_dejson`` would log it and carry on without the connection's defaults)."""
        raw = conn.extra
        if raw in (None, ""):
            return {}
        if isinstance(raw, dict):
            return dict(raw)
        return self._json_object(raw, "extra")

    @property
    def runner_description(self) -> dict[str, Any]:
        """How to reach Slurm, as plain data (triggers carry it instead of looking up the connection)."""
        self._load()
        assert self._runner_description is not None
        return dict(self._runner_description)

    def get_conn(self) -> SlurmClient:
        if self._client is None:
            self._client = client_from_description(self.runner_description, token=self._token)
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
        """Slurm answers through this connection: for REST, the URL reached, the token accepted (not expired, for
        this user) and the API version spoken, or the message says which of them to fix."""
        try:
            return True, self.get_conn().check_connection()
        except Exception as exc:  # noqa: BLE001
            return False, str(exc)


async def rest_token(description: dict[str, Any]) -> str | None:
    """The REST transport's token, looked up again in its connection (a trigger carries no secret); None for the
    other transports."""
    if not description.get("rest_url"):
        return None
    conn_id = description.get("conn_id")
    if not conn_id:
        return None
    conn = await BaseHook.aget_connection(conn_id)
    return conn.password or ""
