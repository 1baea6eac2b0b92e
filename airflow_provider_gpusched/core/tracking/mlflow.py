"""MLflow: the sweep run is a parent run, each trial attempt a child run with its parameters, every report at its
step, its result, its state, its output log and result file as artifacts, and tags back to Airflow.

Spoken through MLflow's REST API (``/api/2.0/mlflow``, stable since MLflow 1.0), with the standard library: the
MLflow client (``mlflow-skinny``) cannot be installed next to Airflow 3.3's tested dependency set (it wants
``cachetools<8``, Airflow's constraints pin 8), and its default retries (up to minutes per call) are what a task
that runs trials must not wait on. Each request has a short timeout and no retry: the sync engine (sync.py) sends
what failed at its next sync. Artifacts go through the server's artifact proxy (``mlflow server`` serves artifacts
by default; a server started with ``--no-serve-artifacts`` gets the runs and metrics, and one line saying the files
were not sent).

Credentials: ``username``/``password`` (basic auth, MLflow's ``--app-name basic-auth``) or ``token`` (a bearer
token), from the Airflow connection (``mlflow_default``: host and port, login/password, or the token as password
with ``{"auth": "bearer"}`` in extra), or outside Airflow from ``MLFLOW_TRACKING_URI``, ``MLFLOW_TRACKING_USERNAME``,
``MLFLOW_TRACKING_PASSWORD``, ``MLFLOW_TRACKING_TOKEN``.
"""

from __future__ import annotations

import base64
import json
import os
import re
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.http import HttpAnswerError, HttpError, HttpUnreachableError, exchange
from airflow_provider_gpusched.core.text import printable
from airflow_provider_gpusched.core.tracking.callback import SweepRun, TrackingCallback, TrialEnd, TrialReport, TrialRun
from airflow_provider_gpusched.core.tracking.config import tracking_uri_problem

#: MLflow's own limits per log-batch request, and on a param value's length (MLflow >= 2.10 takes 6,000)
MAX_METRICS, MAX_PARAMS, MAX_TAGS, MAX_PARAM_VALUE = 1000, 100, 100, 6000
#: the gpusched state -> MLflow's run status (the exact state is the tag ``gpusched.state``)
STATUS = {
    "succeeded": "FINISHED",
    "pruned": "FINISHED",
    "failed": "FAILED",
    "invalid": "FAILED",
    "timeout": "FAILED",
    "stopped": "KILLED",
}
_METRIC_NAME = re.compile(r"[^A-Za-z0-9_\-. /:]")


class MLflowError(GpuschedError):
    pass


def metric_name(name: str) -> str:
    """A metric or param key MLflow accepts (letters, digits, ``_ - . space / :``), others replaced by ``_``."""
    return _METRIC_NAME.sub("_", name)[:250] or "_"


class MLflowRest:
    """The few MLflow REST calls a sweep needs, against ``uri`` (``http(s)://host:port[/prefix]``)."""

    #: the largest answer read (MLflow's answers to these calls are a few KB)
    max_answer_bytes = 16 << 20

    def __init__(
        self,
        uri: str,
        *,
        username: str | None = None,
        password: str | None = None,
        token: str | None = None,
        timeout: float = 5.0,
        source: str = "MLflow tracking URI",
    ) -> None:
        problem = tracking_uri_problem(uri)
        if problem:  # (the spec's own tracking_uri was checked when it was loaded: this one is a connection's or $'s)
            raise MLflowError(f"{source} {uri!r}: expected {problem}")
        self.uri, self.timeout = uri.rstrip("/"), timeout
        self.headers = {"Content-Type": "application/json", "User-Agent": "airflow-provider-gpusched"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        elif username:
            basic = base64.b64encode(f"{username}:{password or ''}".encode()).decode()
            self.headers["Authorization"] = f"Basic {basic}"

    def _request(
        self, method: str, path: str, body: Any = None, *, data: bytes | None = None, timeout: float | None = None
    ) -> dict[str, Any]:
        """One bounded exchange (core/http.py): ``timeout`` for all of it (a server that trickles its answer is cut
        off), an answer of at most :attr:`max_answer_bytes`, redirects within the server's origin only (the
        credentials go nowhere else), JSON nested and numbered within bounds."""
        url = f"{self.uri}{path}"
        payload = data if data is not None else (json.dumps(body).encode() if body is not None else None)
        headers = dict(self.headers)
        if data is not None:
            headers["Content-Type"] = "application/octet-stream"
        try:
            response = exchange(
                method,
                url,
                body=payload,
                headers=headers,
                timeout=timeout or self.timeout,
                max_bytes=self.max_answer_bytes,
            )
        except HttpUnreachableError as exc:
            raise MLflowError(f"MLflow server {self.uri} unreachable: {exc}") from None
        except HttpError as exc:
            raise MLflowError(f"MLflow {method} {path}: {exc}") from None
        if response.status >= 400:
            detail = printable(response.body[:500].decode(errors="replace"))
            try:
                found = json.loads(response.body[:500]).get("error_code", "") if response.body[:1] == b"{" else ""
                code = printable(found) if isinstance(found, str) else ""
            except (ValueError, AttributeError, RecursionError):
                code = ""
            if response.status == 403 and "Host header" in detail:  # MLflow 3's guard: names not allowed are refused
                netloc = urllib.parse.urlsplit(self.uri).netloc
                detail += f" (start `mlflow server` with --allowed-hosts {netloc}: docs/tracking.md)"
            raise MLflowError(f"MLflow {method} {path}: HTTP {response.status} {code} {detail}".strip())
        if not response.body:
            return {}
        try:
            answer = response.json(f"MLflow {method} {path}")
        except HttpAnswerError as exc:
            raise MLflowError(f"{exc}: the answer is not JSON as expected (is {self.uri} an MLflow server?)") from None
        if not isinstance(answer, dict):
            raise MLflowError(f"MLflow {method} {path}: expected a JSON object")
        return answer

    def experiment_id(self, name: str) -> str:
        """The id of experiment ``name``, created when it does not exist."""
        query = urllib.parse.urlencode({"experiment_name": name})
        try:
            found = self._request("GET", f"/api/2.0/mlflow/experiments/get-by-name?{query}")
            return str(found["experiment"]["experiment_id"])
        except MLflowError as exc:
            if "RESOURCE_DOES_NOT_EXIST" not in str(exc):
                raise
        try:
            return str(self._request("POST", "/api/2.0/mlflow/experiments/create", {"name": name})["experiment_id"])
        except MLflowError as exc:  # made meanwhile by another process
            if "RESOURCE_ALREADY_EXISTS" not in str(exc):
                raise
            found = self._request("GET", f"/api/2.0/mlflow/experiments/get-by-name?{query}")
            return str(found["experiment"]["experiment_id"])

    def create_run(self, experiment_id: str, name: str, start: float | None, tags: Mapping[str, str]) -> dict[str, Any]:
        body = {
            "experiment_id": experiment_id,
            "run_name": name[:250],
            "start_time": int((start or time.time()) * 1000),
            "tags": [{"key": k, "value": str(v)[:5000]} for k, v in tags.items()],
        }
        info = self._request("POST", "/api/2.0/mlflow/runs/create", body)["run"]["info"]
        return {"run_id": str(info["run_id"]), "artifact_uri": str(info.get("artifact_uri") or "")}

    def log_batch(
        self,
        run_id: str,
        *,
        metrics: Sequence[Mapping[str, Any]] = (),
        params: Mapping[str, Any] | None = None,
        tags: Mapping[str, Any] | None = None,
    ) -> None:
        params_list = [{"key": metric_name(k), "value": _param_value(v)} for k, v in (params or {}).items()]
        tags_list = [{"key": k, "value": str(v)[:5000]} for k, v in (tags or {}).items()]
        metrics_list = list(metrics)
        while metrics_list or params_list or tags_list:
            body = {
                "run_id": run_id,
                "metrics": metrics_list[:MAX_METRICS],
                "params": params_list[:MAX_PARAMS],
                "tags": tags_list[:MAX_TAGS],
            }
            self._request("POST", "/api/2.0/mlflow/runs/log-batch", body)
            metrics_list, params_list, tags_list = (
                metrics_list[MAX_METRICS:],
                params_list[MAX_PARAMS:],
                tags_list[MAX_TAGS:],
            )

    def end_run(self, run_id: str, status: str, end: float | None) -> None:
        body = {"run_id": run_id, "status": status, "end_time": int((end or time.time()) * 1000)}
        self._request("POST", "/api/2.0/mlflow/runs/update", body)

    def upload(self, artifact_uri: str, path: str) -> bool:
        """Upload ``path`` into the run's artifacts through the server's proxy; False when the run's artifact
        store is not the proxy (``mlflow-artifacts:``), which this client cannot write."""
        if not artifact_uri.startswith("mlflow-artifacts:"):
            return False
        rest = urllib.parse.urlparse(artifact_uri).path.lstrip("/")
        target = urllib.parse.quote(f"{rest}/{os.path.basename(path)}")
        with open(path, "rb") as fh:
            data = fh.read(64 << 20)
        # the deadline grows with the file (at least 1 MiB a second): a 64 MiB output.log is not cut off at 5 s
        timeout = self.timeout + len(data) / (1 << 20)
        self._request("PUT", f"/api/2.0/mlflow-artifacts/artifacts/{target}", data=data, timeout=timeout)
        return True


def _param_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:MAX_PARAM_VALUE]


def _metrics(values: Mapping[str, Any], step: int, stamp: float | None) -> list[dict[str, Any]]:
    ms = int((stamp or time.time()) * 1000)
    return [
        {"key": metric_name(k), "value": float(v), "timestamp": ms, "step": step}
        for k, v in values.items()
        if v is not None
    ]


class MLflowCallback(TrackingCallback):
    """A sweep run -> an MLflow parent run; each trial attempt -> a child run (docs/tracking.md)."""

    name = "mlflow"

    def __init__(
        self,
        *,
        sweep_folder: str = "",
        tracking_uri: str | None = None,
        conn_id: str | None = None,
        experiment: str | None = None,
        artifacts: bool = True,
        timeout: float = 5.0,
        username: str | None = None,
        password: str | None = None,
        token: str | None = None,
        uri_source: str | None = None,
    ) -> None:
        """``uri_source``: where ``tracking_uri`` came from when not from the spec (the Airflow connection), for
        its error."""
        env = os.environ
        uri = tracking_uri or env.get("MLFLOW_TRACKING_URI")
        if not uri:
            raise MLflowError(
                f"MLflow tracking: no server: set tracking_uri in the spec, the Airflow connection "
                f"{conn_id or 'mlflow_default'}, or $MLFLOW_TRACKING_URI"
            )
        if tracking_uri:
            source = f"MLflow tracking URI ({uri_source})" if uri_source else "MLflow tracking URI"
        else:
            source = "MLflow tracking URI ($MLFLOW_TRACKING_URI)"
        self.client = MLflowRest(
            uri,
            username=username or env.get("MLFLOW_TRACKING_USERNAME"),
            password=password or env.get("MLFLOW_TRACKING_PASSWORD"),
            token=token or env.get("MLFLOW_TRACKING_TOKEN"),
            timeout=float(timeout),
            source=source,
        )
        self.experiment, self.artifacts = experiment, artifacts
        self.no_proxy_said = False

    # -- the parent run ----------------------------------------------------------------------------------------
    def _parent(self, sweep: SweepRun, start: float | None = None) -> tuple[str, str]:
        """The sweep run's parent run (made once; ``start``: its first trial's start, so that its duration is the
        sweep's)."""
        memo = sweep.memo
        if "experiment_id" not in memo:
            memo["experiment_id"] = self.client.experiment_id(self.experiment or sweep.sweep)
        if "run_id" not in memo:
            tags = {
                "mlflow.source.name": "airflow-provider-gpusched",
                "gpusched.sweep": sweep.sweep,
                "gpusched.search": sweep.search,
                "gpusched.folder": sweep.folder,
                **({"airflow.dag_id": sweep.dag_id} if sweep.dag_id else {}),
                **({"airflow.run_id": sweep.run} if sweep.run else {}),
            }
            name = f"{sweep.sweep} {sweep.run or ''}".strip()
            run = self.client.create_run(memo["experiment_id"], name, start, tags)
            memo.update(run_id=run["run_id"], artifact_uri=run["artifact_uri"])
            if sweep.objective:
                self.client.log_batch(run["run_id"], params={f"objective.{k}": v for k, v in sweep.objective.items()})
        return str(memo["experiment_id"]), str(memo["run_id"])

    # -- trials ------------------------------------------------------------------------------------------------
    @staticmethod
    def _airflow_tags(trial: TrialRun) -> dict[str, Any]:
        """The tags that link an attempt's run to the Airflow task that ran it, once that task is known and they
        were not sent yet: an attempt first sent by another task (the sweep's collect, a sync resumed after an
        outage) gets them with its next request, as a run sent live has them from its start."""
        task = trial.task or {}
        if trial.memo.get("airflow_tags") or not task.get("task_id"):
            return {}
        dag_id = trial.sweep.dag_id or task.get("dag_id")
        return {
            **({"airflow.dag_id": dag_id} if dag_id else {}),
            **({"airflow.run_id": trial.sweep.run} if trial.sweep.run else {}),
            **{
                f"airflow.{k}": v
                for k, v in task.items()
                if k in ("task_id", "map_index", "try_number") and v is not None
            },
        }

    def on_trial_start(self, trial: TrialRun) -> None:
        if "run_id" in trial.memo:
            return
        experiment_id, parent = self._parent(trial.sweep, trial.started)
        task_tags = self._airflow_tags(trial)
        tags = {
            "mlflow.parentRunId": parent,
            "gpusched.sweep": trial.sweep.sweep,
            "gpusched.trial_id": trial.trial_id,
            "gpusched.state": "running",
            "gpusched.folder": trial.folder,
            **{
                f"gpusched.{k}": v
                for k, v in (("host", trial.host), ("gpus", trial.gpus), ("slurm_job", trial.slurm_job))
                if v
            },
            **({"airflow.dag_id": trial.sweep.dag_id} if trial.sweep.dag_id else {}),
            **({"airflow.run_id": trial.sweep.run} if trial.sweep.run else {}),
            **task_tags,
        }
        run = self.client.create_run(experiment_id, trial.label, trial.started, tags)
        trial.memo.update(run_id=run["run_id"], artifact_uri=run["artifact_uri"], airflow_tags=bool(task_tags))
        self.client.log_batch(run["run_id"], params=trial.params)

    def on_trial_reports(self, trial: TrialRun, reports: Sequence[TrialReport]) -> None:
        metrics = [m for r in reports for m in _metrics(r.metrics, r.step, r.time)]
        task_tags = self._airflow_tags(trial)
        self.client.log_batch(str(trial.memo["run_id"]), metrics=metrics, tags=task_tags)
        if task_tags:
            trial.memo["airflow_tags"] = True
        trial.memo["last_step"] = max(int(trial.memo.get("last_step", 0)), *(r.step for r in reports))

    def on_trial_end(self, trial: TrialRun, end: TrialEnd) -> None:
        run_id = str(trial.memo["run_id"])
        if not trial.memo.get("result_logged"):
            tags = {
                "gpusched.state": end.state,
                **({"gpusched.error": end.error} if end.error else {}),
                **self._airflow_tags(trial),
            }
            values = dict(end.metrics)
            if end.score is not None:
                values["score"] = end.score
            if end.seconds is not None:
                values["trial_seconds"] = end.seconds
            # at the last reported step, logged after the reports: MLflow shows it as each metric's latest value
            step = int(trial.memo.get("last_step", 0))
            self.client.log_batch(run_id, metrics=_metrics(values, step, end.ended), tags=tags)
            trial.memo["result_logged"] = True
            trial.memo["airflow_tags"] = trial.memo.get("airflow_tags") or "airflow.task_id" in tags
        if self.artifacts:
            uploaded = trial.memo.setdefault("uploaded", [])
            for path in end.files:
                if path in uploaded:
                    continue
                if not self.client.upload(str(trial.memo.get("artifact_uri", "")), path):
                    self._say_no_proxy(str(trial.memo.get("artifact_uri")))
                    break
                uploaded.append(path)
        self.client.end_run(run_id, STATUS.get(end.state, "FAILED"), end.ended)

    def _say_no_proxy(self, uri: str) -> None:
        if not self.no_proxy_said:
            print(
                f"tracking: mlflow: the runs' artifact store ({uri}) is not served by the tracking server, so "
                f"output.log and result.json stay in the trial folders (start mlflow server with artifact serving on)"
            )
            self.no_proxy_said = True

    def on_sweep_end(self, sweep: SweepRun, summary: Mapping[str, Any]) -> None:
        _, run_id = self._parent(sweep)
        found = summary.get("counts")
        counts: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        values = {f"trials_{k}": v for k, v in counts.items() if isinstance(v, int)}
        best = summary.get("best") if isinstance(summary.get("best"), Mapping) else None
        tags = {}
        if best is not None:
            if isinstance(best.get("score"), (int, float)):
                values["best_score"] = best["score"]
            tags = {"gpusched.best_trial": str(best.get("label") or best.get("trial_id"))}
        self.client.log_batch(run_id, metrics=_metrics(values, 0, None), tags=tags)
        if self.artifacts:
            for name in ("summary.json", "leaderboard.json", "best.json"):
                path = os.path.join(sweep.folder, name)
                if os.path.isfile(path) and not self.client.upload(str(sweep.memo.get("artifact_uri", "")), path):
                    self._say_no_proxy(str(sweep.memo.get("artifact_uri")))
                    break
        failed = sum(int(counts.get(k, 0) or 0) for k in ("failed", "invalid", "timeout"))
        self.client.end_run(run_id, "FAILED" if failed and best is None else "FINISHED", None)
