"""How to reach a cluster: :class:`ClusterAccess`, from an Airflow connection of the cncf provider's
``kubernetes`` type (its extras, which need no provider installed) or given in code, and the API client made from
it.

Extras read (the cncf provider's names, with or without its ``extra__kubernetes__`` prefix): ``kube_config_path``
(a kubeconfig file), ``kube_config`` (a kubeconfig's content, JSON or YAML), ``in_cluster`` (the pod's service
account), ``cluster_context``, ``namespace``, ``disable_verify_ssl``. Nothing given is an error naming the
connection: the machine's default kubeconfig is used only with ``use_default_kubeconfig: true`` (a scheduler that
happens to hold an admin's ~/.kube/config must not silently become the credentials of every DAG).

Pure Python, no Airflow imports; the ``kubernetes`` client is imported when a client is made.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_gpusched.core.errors import InvalidArgumentError

KNOWN_EXTRAS = (
    "kube_config_path",
    "kube_config",
    "in_cluster",
    "cluster_context",
    "namespace",
    "disable_verify_ssl",
    "disable_tcp_keepalive",
    "xcom_sidecar_container_image",
    "xcom_sidecar_container_resources",
    "use_default_kubeconfig",
)


def _truthy(value: Any) -> bool:
    return value is True or str(value).strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class ClusterAccess:
    """Where the cluster is and who we are there."""

    kubeconfig_path: str | None = None
    kubeconfig: Mapping[str, Any] | None = None
    in_cluster: bool = False
    context: str | None = None
    namespace: str = "default"
    verify_ssl: bool = True
    use_default_kubeconfig: bool = False
    #: where it came from, for messages ("connection 'k8s_lab'")
    source: str = "the cluster access"

    @classmethod
    def from_extras(cls, extras: Mapping[str, Any], source: str) -> ClusterAccess:
        given = {str(k).removeprefix("extra__kubernetes__"): v for k, v in (extras or {}).items()}
        unknown = sorted(set(given) - set(KNOWN_EXTRAS))
        if unknown:
            from airflow_provider_gpusched.core.errors import UnknownKeyError

            raise UnknownKeyError(f"{source} extra", unknown[0], KNOWN_EXTRAS)
        inline = given.get("kube_config")
        if isinstance(inline, str) and inline.strip():
            try:
                inline = json.loads(inline)
            except ValueError:
                import yaml

                from airflow_provider_gpusched.core.yaml_loader import safe_load

                try:
                    inline = safe_load(inline)
                except yaml.YAMLError as exc:
                    raise InvalidArgumentError(f"{source} extra kube_config", "...", f"a kubeconfig ({exc})") from None
        if inline is not None and not isinstance(inline, Mapping):
            raise InvalidArgumentError(f"{source} extra kube_config", inline, "a kubeconfig (a mapping)")
        access = cls(
            kubeconfig_path=given.get("kube_config_path") or None,
            kubeconfig=inline or None,
            in_cluster=_truthy(given.get("in_cluster", False)),
            context=given.get("cluster_context") or None,
            namespace=str(given.get("namespace") or "default"),
            verify_ssl=not _truthy(given.get("disable_verify_ssl", False)),
            use_default_kubeconfig=_truthy(given.get("use_default_kubeconfig", False)),
            source=source,
        )
        access.check()
        return access

    def check(self) -> None:
        ways = [
            w
            for w, on in (
                ("kube_config_path", self.kubeconfig_path),
                ("kube_config", self.kubeconfig),
                ("in_cluster", self.in_cluster),
            )
            if on
        ]
        if len(ways) > 1:
            raise InvalidArgumentError(
                self.source, ways, "one of kube_config_path, kube_config or in_cluster, not several"
            )
        if not ways and not self.use_default_kubeconfig:
            raise InvalidArgumentError(
                self.source,
                "no cluster",
                "kube_config_path, kube_config or in_cluster in its extras (or use_default_kubeconfig: true for this "
                "machine's ~/.kube/config)",
            )
        if self.kubeconfig_path and not os.path.isfile(self.kubeconfig_path):
            raise InvalidArgumentError(
                f"{self.source} extra kube_config_path", self.kubeconfig_path, "an existing kubeconfig file"
            )

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` for this access (a new one each call: give each thread its own)."""
        try:
            from kubernetes import client, config
        except ImportError:
            raise InvalidArgumentError(
                self.source,
                "kubernetes",
                "the Kubernetes client installed: pip install 'airflow-provider-gpusched[kubernetes]'",
            ) from None
        configuration = client.Configuration()
        if self.in_cluster:
            config.load_incluster_config(client_configuration=configuration)
        elif self.kubeconfig is not None:
            config.load_kube_config_from_dict(
                dict(self.kubeconfig), context=self.context, client_configuration=configuration
            )
        else:
            config.load_kube_config(
                config_file=self.kubeconfig_path, context=self.context, client_configuration=configuration
            )
        configuration.verify_ssl = self.verify_ssl
        return client.ApiClient(configuration)

    def to_dict(self) -> dict[str, Any]:
        """What a trigger carries to rebuild the access in the triggerer: the connection's id is not enough there
        when the access was given in code, and a kubeconfig's content never travels (only a path)."""
        return {
            "kubeconfig_path": self.kubeconfig_path,
            "in_cluster": self.in_cluster,
            "context": self.context,
            "namespace": self.namespace,
            "verify_ssl": self.verify_ssl,
            "use_default_kubeconfig": self.use_default_kubeconfig,
            "source": self.source,
        }


def kubeconfig_file(access: ClusterAccess) -> str:
    """A path for ``access``'s kubeconfig: its own, or its inline content written to a private temporary file."""
    if access.kubeconfig_path:
        return access.kubeconfig_path
    if access.kubeconfig is None:
        raise InvalidArgumentError(access.source, "no kubeconfig", "kube_config_path or kube_config")
    fd, path = tempfile.mkstemp(prefix="gpusched-kubeconfig-", suffix=".json")
    with os.fdopen(fd, "w") as fh:
        json.dump(dict(access.kubeconfig), fh)
    return path
