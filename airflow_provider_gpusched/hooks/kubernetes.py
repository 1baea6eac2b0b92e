"""KubernetesGpuHook: a cluster's :class:`~airflow_provider_gpusched.core.kubernetes.access.ClusterAccess` and Job
client from an Airflow connection of the cncf provider's ``kubernetes`` type (kubeconfig file, inline kubeconfig or
in-cluster: docs/kubernetes.md), read without that provider installed."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from airflow_provider_gpusched.core.kubernetes.access import ClusterAccess
from airflow_provider_gpusched.core.kubernetes.jobs import JobClient


class KubernetesGpuHook(BaseHook):
    conn_name_attr = "kubernetes_conn_id"
    default_conn_name = "kubernetes_default"
    conn_type = "kubernetes"
    hook_name = "Kubernetes (gpusched)"

    def __init__(self, kubernetes_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kubernetes_conn_id = kubernetes_conn_id
        self._access: ClusterAccess | None = None

    def access(self) -> ClusterAccess:
        if self._access is None:
            conn = self.get_connection(self.kubernetes_conn_id)
            self._access = ClusterAccess.from_extras(conn.extra_dejson, f"connection {self.kubernetes_conn_id!r}")
        return self._access

    def get_conn(self) -> JobClient:
        return JobClient(self.access())
