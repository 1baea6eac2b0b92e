"""A sweep's bookkeeping tasks retry what fails around them, and ``collect`` says why there is nothing to collect
(issue 76: the first trigger's ``plan`` task died before it started, the execution API timing out on a loaded
machine; there was no retry, and ``collect`` said only "nothing was planned"). Real DAGs through dag.test()."""

from datetime import timedelta
from pathlib import Path

import pytest

pytestmark = pytest.mark.airflow


DAGFILE = Path(__file__).resolve().parent / "dagfiles" / "t_bookkeeping.py"


def build(dag_id, root, monkeypatch):
    from tests.airflow.conftest import load_dag_file

    monkeypatch.setenv("GPUSCHED_TEST_DAG_ID", dag_id)
    monkeypatch.setenv("GPUSCHED_TEST_RESULTS", str(root))
    return load_dag_file(DAGFILE).dag


def test_every_bookkeeping_task_retries(tmp_path, monkeypatch):
    dag = build("books_retries", tmp_path, monkeypatch)
    for name in ("plan", "collect", "leaderboard", "check_trials"):  # (and each round's tell: _rounds)
        task = dag.get_task(f"books.{name}")
        assert task.retries >= 2 and task.retry_delay <= timedelta(minutes=1), (name, task.retries)


def test_a_plan_that_fails_around_it_is_retried_and_the_sweep_runs(airflow_db, tmp_path, monkeypatch):
    """The plan's first try fails as an unreachable API would (an OSError, not the sweep's fault): its retry plans
    and the run goes on to the end."""
    from airflow_provider_gpusched.core.sweep.running.session import SweepSession
    from airflow_provider_gpusched.task_groups import sweep as sweep_module
    from tests.airflow.conftest import run_and_collect

    monkeypatch.setitem(sweep_module.BOOKKEEPING, "retry_delay", timedelta(seconds=0))
    real, calls = SweepSession.prepare, []

    def flaky(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise TimeoutError("the execution API did not answer within 5 s")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SweepSession, "prepare", flaky)
    state, xcoms, states = run_and_collect(build("books_flaky_plan", tmp_path, monkeypatch))
    assert state == "success", states
    assert states["books.plan"] == ("success", 2)  # (state, try number)
    assert xcoms["books.collect"]["return_value"]["counts"]["succeeded"] == 2


def test_collect_names_the_cause_when_nothing_was_planned(airflow_db, tmp_path, monkeypatch, capsys):
    """A plan that fails for good: collect fails at once (no retry can mend it) and names the plan task's end."""
    from airflow_provider_gpusched.core.errors import GpuschedError
    from airflow_provider_gpusched.core.sweep.running.session import SweepSession
    from tests.airflow.conftest import run_and_collect

    def broken(self, *args, **kwargs):
        raise GpuschedError("the results root is full")

    monkeypatch.setattr(SweepSession, "prepare", broken)
    state, _, states = run_and_collect(build("books_no_plan", tmp_path, monkeypatch))
    assert state == "failed"
    assert states["books.plan"] == ("failed", 1)  # the sweep's own error: no retry
    assert states["books.collect"] == ("failed", 1)
    logged = capsys.readouterr()
    text = logged.out + logged.err
    assert "nothing was planned for run" in text and "its plan task books.plan ended failed" in text, text[-3000:]


def test_each_rounds_tell_retries_too(tmp_path):
    import pendulum
    from airflow.sdk import DAG

    from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, uniform
    from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

    spec = SweepSpec(
        name="told",
        search="optuna",
        rounds=2,
        per_round=2,
        space={"x": uniform(0, 1)},
        command=["true", "{x}"],
        objective=Objective("y"),
    )
    with DAG("books_rounds", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        sweep_task_group(spec, results_root=str(tmp_path))
    for name in ("told.round_0.plan", "told.round_0.tell", "told.round_1.tell"):
        assert dag.get_task(name).retries >= 2, name
