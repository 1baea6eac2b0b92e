"""An auth manager for the UI tests: Airflow's SimpleAuthManager, except that user ``outsider`` may not read DAGs
whose id starts with ``ui_private`` (SimpleAuthManager itself grants by role only, never per DAG)."""

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager


class PerDagAuthManager(SimpleAuthManager):
    def is_authorized_dag(self, *, method, user, access_entity=None, details=None):
        if user.username == "outsider" and details is not None and (details.id or "").startswith("ui_private"):
            return False
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)
