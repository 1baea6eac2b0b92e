"""The provider is registered with Airflow: providers list, hooks, connection form, config section."""

import subprocess
import sys

import pytest

from airflow_provider_gpusched.provider_info import get_provider_info

pytestmark = pytest.mark.airflow


def _airflow(*args):
    proc = subprocess.run([sys.executable, "-m", "airflow", *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_provider_info_matches_airflow_schema():
    import json
    from importlib.resources import files

    import jsonschema

    schema = json.loads(files("airflow").joinpath("provider_info.schema.json").read_text())
    info = get_provider_info()
    jsonschema.validate(info, schema)
    assert info["package-name"] == "airflow-provider-gpusched"
    assert set(info["config"]["gpusched"]["options"]) >= {"slurm_poll_interval", "slurm_output_dir"}


def test_one_version_number_everywhere():
    """__version__ is the package's version (pyproject reads it), the provider info's newest version, and every
    option was added in a version the provider info lists."""
    from airflow_provider_gpusched import __version__

    info = get_provider_info()
    assert info["versions"][0] == __version__
    for name, option in info["config"]["gpusched"]["options"].items():
        assert option["version_added"] in info["versions"], name


def test_providers_list_and_hooks_show_the_provider(airflow_db):
    assert "airflow-provider-gpusched" in _airflow("providers", "list")
    hooks = _airflow("providers", "hooks")
    assert "airflow_provider_gpusched.hooks.slurm.SlurmHook" in hooks
    assert "airflow_provider_gpusched.operators.local_gpu" in _airflow(
        "providers", "get", "airflow-provider-gpusched", "--full", "-o", "json"
    )


def test_airflow_gpusched_is_the_gpusched_command_inside_airflows_cli(airflow_db, tmp_path):
    """Provider info declares the plugin and the `airflow gpusched` group: Airflow lists them, and the group has
    every subcommand and option of `gpusched`, running the same functions (an error said the same way)."""
    import argparse

    info = get_provider_info()
    assert info["plugins"] == [{"name": "gpusched", "plugin-class": "airflow_provider_gpusched.plugins.GpuschedPlugin"}]
    shown = _airflow("providers", "get", "airflow-provider-gpusched", "--full", "-o", "json")
    assert "airflow_provider_gpusched.cli_airflow.get_cli_commands" in shown and "GpuschedPlugin" in shown
    top = _airflow("gpusched", "--help")
    assert "airflow gpusched" in top
    for name in ("gpus", "fleet", "slurm", "sweep", "pools", "queue", "partition", "profile"):
        assert f"\n    {name}" in top, name

    from airflow.cli.cli_parser import get_parser

    from airflow_provider_gpusched.cli import build_parser

    def leaves(parser, path=()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    yield from leaves(child, (*path, name))
                return
        yield (
            path,
            sorted(
                tuple(a.option_strings) or (a.dest,) for a in parser._actions if not isinstance(a, argparse._HelpAction)
            ),
        )

    ours = dict(leaves(build_parser()))
    airflow_tree = dict(leaves(get_parser()))
    assert len(ours) >= 20
    for path, arguments in ours.items():
        assert airflow_tree[("gpusched", *path)] == arguments, path
    out = subprocess.run(
        [sys.executable, "-m", "airflow", "gpusched", "sweep", "results", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "gpusched: error:" in out.stderr and "no such sweep folder" in out.stderr
    assert "Traceback" not in out.stderr


def test_connection_form_fields_and_triggers_are_declared(airflow_db):
    from airflow.providers_manager import ProvidersManager

    pm = ProvidersManager()
    widgets = pm.connection_form_widgets
    for field in ("partition", "account", "qos", "sbatch_options", "slurm_conf"):
        assert f"extra__slurm__{field}" in widgets
    assert pm.field_behaviours["slurm"]["relabeling"]["host"].startswith("Login host")
    assert "airflow_provider_gpusched.triggers.slurm" in {t.trigger_class_name for t in pm.trigger}


def test_task_slurm_decorator_is_available():
    from airflow.sdk import task

    from airflow_provider_gpusched.decorators.local_gpu import local_gpu_task
    from airflow_provider_gpusched.decorators.slurm import slurm_task

    assert task.slurm is slurm_task
    assert task.local_gpu is local_gpu_task


def test_config_section_is_readable(airflow_db):
    out = _airflow("config", "get-value", "gpusched", "slurm_poll_interval")
    assert out.strip() == "1"  # tests set AIRFLOW__GPUSCHED__SLURM_POLL_INTERVAL=1


def test_one_table_of_settings(monkeypatch):
    """Provider info, the settings' fallbacks and the triggers' defaults all come from core/options.py."""
    import inspect

    from airflow_provider_gpusched import settings
    from airflow_provider_gpusched.core import options
    from airflow_provider_gpusched.triggers.local_gpu import GPUAvailableTrigger
    from airflow_provider_gpusched.triggers.slurm import SlurmJobTrigger

    assert get_provider_info()["config"] == options.provider_config()
    declared = get_provider_info()["config"]["gpusched"]["options"]
    assert sorted(declared) == sorted(options.BY_NAME)
    for name in options.BY_NAME:
        monkeypatch.delenv(options.ENV_PREFIX + name.upper(), raising=False)
    monkeypatch.delenv("GPUSCHED_SIMULATE_GPUS", raising=False)
    getters = {
        "slurm_poll_interval": settings.poll_interval,
        "slurm_not_found_timeout": settings.not_found_timeout,
        "default_deferrable": settings.default_deferrable,
        "output_tail_lines": settings.output_tail_lines,
        "ui_live_slurm": settings.ui_live_slurm,
        "gpu_poll_interval": settings.gpu_poll_interval,
        "min_deferral": settings.min_deferral,
        "simulate_gpus": settings.simulate_gpus,
    }
    for name, getter in getters.items():
        assert getter() == options.default(name), name
    home = str(settings.sweep_results_root()).rsplit("/gpusched/", 1)[0]
    for name, getter in (
        ("slurm_output_dir", settings.slurm_output_dir),
        ("local_run_dir", settings.local_run_dir),
        ("sweep_results_root", settings.sweep_results_root),
    ):
        assert getter() == options.default_directory(name, home), name
    for trigger, name, option in (
        (SlurmJobTrigger, "poll_interval", "slurm_poll_interval"),
        (SlurmJobTrigger, "not_found_timeout", "slurm_not_found_timeout"),
        (GPUAvailableTrigger, "poll_interval", "gpu_poll_interval"),
    ):
        assert inspect.signature(trigger.__init__).parameters[name].default == options.default(option)


def test_pools_sync_creates_the_mapped_pools_and_is_idempotent(airflow_db, monkeypatch):
    """`gpusched pools sync`: the pools the job-class mapping names, one slot per (SIMULATED) GPU."""
    import json

    from airflow.models.pool import Pool

    from airflow_provider_gpusched.cli import main

    def sync(*extra):
        import contextlib
        import io

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main(["pools", "sync", "--json", *extra]) == 0
        return {r["pool"]: r for r in json.loads(buf.getvalue())["pools"]}

    monkeypatch.setenv(
        "AIRFLOW__GPUSCHED__JOB_CLASSES",
        json.dumps({"normal": {"airflow": {"pool": "gpu_main"}}, "idle": {"airflow": {"pool": "gpu_fill"}}}),
    )
    for name in ("gpu_main", "gpu_fill"):
        Pool.delete_pool(name) if Pool.get_pool(name) else None
    dry = sync("--dry-run")
    assert {k: (v["action"], v["slots"]) for k, v in dry.items()} == {
        "gpu_fill": ("create", 4),
        "gpu_main": ("create", 4),
    }
    assert Pool.get_pool("gpu_fill") is None  # a dry run changes nothing
    first = sync()
    assert {k: v["action"] for k, v in first.items()} == {"gpu_fill": "create", "gpu_main": "create"}
    assert Pool.get_pool("gpu_fill").slots == 4 and Pool.get_pool("gpu_fill").include_deferred is False
    assert {k: v["action"] for k, v in sync().items()} == {"gpu_fill": "unchanged", "gpu_main": "unchanged"}
    Pool.create_or_update_pool("gpu_fill", 1, "hand-edited", include_deferred=False)
    again = sync()
    assert again["gpu_fill"]["action"] == "update" and again["gpu_fill"]["was"] == 1
    assert Pool.get_pool("gpu_fill").slots == 4

    # two slots per GPU (short trials one task each): deferred tasks then count against the pool
    monkeypatch.setenv("AIRFLOW__GPUSCHED__POOL_SLOTS_PER_GPU", "2")
    doubled = sync()
    assert {k: (v["action"], v["slots"]) for k, v in doubled.items()} == {
        "gpu_fill": ("update", 8),
        "gpu_main": ("update", 8),
    }
    assert Pool.get_pool("gpu_main").slots == 8 and Pool.get_pool("gpu_main").include_deferred is True
    monkeypatch.setenv("AIRFLOW__GPUSCHED__POOL_SLOTS_PER_GPU", "0")
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["pools", "sync"])
    assert code != 0 and "pool_slots_per_gpu: expected a whole number >= 1, got '0'" in err.getvalue()


def test_job_class_sets_pool_weight_and_slurm_settings_on_operators(airflow_db):
    from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator
    from airflow_provider_gpusched.operators.slurm import SlurmJobOperator

    idle = LocalGPUOperator(task_id="fill", job_class="idle", priority=2, gpus=2, command=["true"])
    assert (idle.pool, idle.pool_slots, idle.priority_weight, idle.weight_rule) == ("gpusched_idle", 2, 3, "absolute")
    normal = LocalGPUOperator(task_id="main", command=["true"])
    assert (normal.pool, normal.pool_slots, normal.priority_weight) == ("default_pool", 1, 100)
    mine = LocalGPUOperator(task_id="mine", job_class="idle", pool="my_pool", priority_weight=7, command=["true"])
    assert (mine.pool, mine.priority_weight) == ("my_pool", 7)  # explicit arguments win
    slurm = SlurmJobOperator(task_id="s", job_class="idle", gpus=4, command="true")
    assert (slurm.pool, slurm.pool_slots, slurm.priority_weight) == ("gpusched_idle", 4, 1)
    import pytest
    from airflow.sdk.exceptions import AirflowException

    with pytest.raises(AirflowException, match=r"bad: priority: expected a whole number"):
        LocalGPUOperator(task_id="bad", priority="high", command=["true"])


def test_mapped_operators_get_the_job_class_pool_and_weight():
    from airflow.sdk import DAG, task

    from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator
    from airflow_provider_gpusched.operators.slurm import SlurmJobOperator

    with DAG("t_mapped_classes", schedule=None):
        fill = LocalGPUOperator.partial(task_id="fill", job_class="idle", gpus=2).expand(command=[["true"]])
        main = SlurmJobOperator.partial(task_id="main", priority=5).expand(command=["true"])

        @task.local_gpu(job_class="idle", priority=2)
        def search(seed: int) -> int:
            return seed

        @task.slurm(job_class="idle", gpus=4)
        def evaluate(seed: int) -> int:
            return seed

        decorated, remote = search.expand(seed=[1, 2]).operator, evaluate.expand(seed=[1]).operator
    assert (fill.pool, fill.pool_slots, fill.priority_weight, fill.weight_rule) == ("gpusched_idle", 2, 1, "absolute")
    assert (main.pool, main.priority_weight) == ("default_pool", 105)
    assert (decorated.pool, decorated.priority_weight, decorated.weight_rule) == ("gpusched_idle", 3, "absolute")
    assert (remote.pool, remote.pool_slots) == ("gpusched_idle", 4)


def test_pipeline_partition_example_dag_launches_one_task_per_stage(airflow_db):
    from .conftest import REPO, load_dag_file, run_and_collect

    state, xcoms, states = run_and_collect(
        load_dag_file(REPO / "dags" / "pipeline_partition.py").pipeline_partition_dag
    )
    assert state == "success", states
    result = xcoms["partition"]["return_value"]
    assert result["feasible"] and abs(result["bottleneck_s"] - 1.5399) < 5e-5
    stages = sorted(k[1] for k in states if isinstance(k, tuple) and k[0] == "stage")
    assert stages == list(range(len(result["stages"]))) == list(range(8))
    assert all(states[("stage", i)][0] == "success" for i in stages)
    # each stage is told its neighbours: all on this machine, stage N on port 29700 + N - 1
    envs = [a["env"] for a in xcoms["stage_arguments"]["return_value"]]
    assert [(e["GPUSCHED_STAGE_PREV_ADDR"], e["GPUSCHED_STAGE_ADDR"], e["GPUSCHED_STAGE_NEXT_ADDR"]) for e in envs][
        :2
    ] == [("", "127.0.0.1:29700", "127.0.0.1:29701"), ("127.0.0.1:29700", "127.0.0.1:29701", "127.0.0.1:29702")]
    assert (
        envs[-1]["GPUSCHED_STAGE_NEXT_ADDR"] == "" and envs[-1]["GPUSCHED_STAGE_HOST"] == result["stages"][-1]["host"]
    )


def test_pipeline_partition_operator_bad_input_fails_without_retry(airflow_db, capfd):
    from .conftest import REPO, run_and_collect, the_dag

    state, _, states = run_and_collect(the_dag(REPO / "tests" / "airflow" / "dagfiles" / "t_partition.py"))
    assert state == "failed" and states["partition"] == ("failed", 1)
    assert "partition: /nonexistent/models.yml: models file not found" in "".join(capfd.readouterr())


@pytest.mark.parametrize(
    "extra, expected",
    [
        ('{"partition": "gpu",', "extra: expected a JSON object"),
        ('["partition"]', "extra: expected a JSON object"),
    ],
)
def test_connection_extra_that_is_not_a_json_object_names_the_connection(airflow_db, monkeypatch, extra, expected):
    import json

    from airflow_provider_gpusched.core.errors import InvalidArgumentError
    from airflow_provider_gpusched.hooks.slurm import SlurmHook

    monkeypatch.setenv("AIRFLOW_CONN_SLURM_BADEXTRA", json.dumps({"conn_type": "slurm", "extra": extra}))
    with pytest.raises(InvalidArgumentError) as err:
        SlurmHook("slurm_badextra").job_defaults()
    assert "connection 'slurm_badextra'" in str(err.value) and expected in str(err.value)


def test_connection_host_that_would_be_an_ssh_option_is_refused(airflow_db, monkeypatch):
    import json

    from airflow_provider_gpusched.core.errors import InvalidArgumentError
    from airflow_provider_gpusched.hooks.slurm import SlurmHook

    monkeypatch.setenv(
        "AIRFLOW_CONN_SLURM_EVIL", json.dumps({"conn_type": "slurm", "host": "-oProxyCommand=touch /tmp/pwned"})
    )
    with pytest.raises(InvalidArgumentError, match="connection 'slurm_evil' host"):
        SlurmHook("slurm_evil").get_conn()


def test_pools_sync_with_an_unknown_connection_or_no_database_is_a_clear_error(airflow_db, tmp_path):
    import os

    cli = [sys.executable, "-m", "airflow_provider_gpusched.cli", "pools", "sync"]
    proc = subprocess.run(
        [*cli, "--backend", "slurm", "--slurm-conn-id", "nosuch"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "--slurm-conn-id nosuch: no such Airflow connection" in proc.stderr
    empty_home = tmp_path / "no-db-home"
    empty_home.mkdir()
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(empty_home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{empty_home}/airflow.db",
    }
    proc = subprocess.run(cli, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "cannot use the Airflow metadata database" in proc.stderr and "airflow db migrate" in proc.stderr
