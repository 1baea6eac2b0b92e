"""Sweep specs from Python and YAML: validation errors name the file and key path."""

import json
import re
import textwrap

import pytest

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, uniform
from airflow_provider_gpusched.core.sweep.parts.command import format_command
from airflow_provider_gpusched.core.sweep.parts.spaces import Conditional, LogUniform


def write(tmp_path, text, name="spec.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_yaml_spec_with_spaces_conditions_and_seed_000_resource_names(tmp_path):
    path = write(
        tmp_path,
        """
        name: hpo
        search: random
        count: 8
        seed: 4
        space:
          lr: {loguniform: [1.0e-5, 1.0e-1]}
          optimizer: [sgd, adam]
          momentum: {uniform: [0.8, 0.99], when: {optimizer: sgd}}
        command: [python, train.py, --lr, "{lr}"]
        objective: {metric: acc, mode: maximize}
        resources: {num_gpus: 2, num_cpus: 4, source: "source /env.sh", partition: pat_dev, normal: false}
    """,
    )
    spec = SweepSpec.from_yaml(path)
    assert isinstance(spec.space["lr"], LogUniform) and isinstance(spec.space["momentum"], Conditional)
    assert (spec.resources.gpus, spec.resources.cpus, spec.resources.setup, spec.resources.job_class) == (
        2,
        4,
        ["source /env.sh"],
        "idle",
    )
    trials = spec.trials()
    assert len(trials) == 8 and [t.params for t in trials] == [t.params for t in SweepSpec.from_yaml(path).trials()]


@pytest.mark.parametrize(
    "body,where",
    [
        ("name: x\ncommand: [a]\ntest_config:\n  - lr: {uniform: [1]}\n", "test_config[0].lr"),
        ("name: x\ncommand: [a]\nsearch: random\nspace: {lr: [1]}\n", "count"),
        ("name: x\ncommand: [a]\nresources: {gpu: 1}\n", "resources.gpu"),
        ("name: x\ncommand: [a]\nobjective: {metric: acc, mode: up}\n", "objective.mode"),
        ("name: x\ncomand: [a]\n", "comand"),
        ("name: ../up\ncommand: [a]\n", "name"),
        ("name: x\ncommand: [a, '{nope}']\ntest_config: [{lr: [1]}]\n", "command"),
        ("name: x\ncommand: a b\n", "command"),
        ("name: x\ncallable: 'no.such.module:fn'\n", "callable"),
        (
            "name: x\ncommand: [a]\nsearch: evolution\nspace: {op: {uniform: [0, 1]}}\nobjective: {metric: s}\n",
            "space.op",
        ),
        (
            "name: x\ncommand: [a]\nsearch: evolution\nspace: {op: [1]}\nobjective: {metric: s}\n"
            "evolution: {constraints: {flops: 600}}\n",
            "evolution.measure",
        ),
        ("name: x\ncommand: [a\n", "line 3"),
    ],
)
def test_yaml_errors_name_the_file_and_key(tmp_path, body, where):
    path = write(tmp_path, body)
    with pytest.raises(InvalidArgumentError) as err:
        SweepSpec.from_yaml(path)
    assert str(err.value).startswith(path) and where in str(err.value)


def test_missing_file_is_named():
    with pytest.raises(InvalidArgumentError, match="/no/such.yaml"):
        SweepSpec.from_yaml("/no/such.yaml")


def test_callable_by_import_path(tmp_path):
    path = write(tmp_path, "name: x\ncallable: 'os.path:join'\n")
    import os.path

    assert SweepSpec.from_yaml(path).python_callable is os.path.join


def test_command_placeholders_keep_each_argument_whole():
    spec = SweepSpec(
        name="x",
        test_config=[{"name": ["a b; rm -rf /", 'it\'s "q"']}],
        global_config={"cfg": {"depth": 3}},
        command=["run", "--name={name}", "{cfg.depth}", "{{literal}}", "{trial_dir}/out"],
    )
    first, second = spec.trials()
    assert format_command(spec.command, first.params, "/r/t", first) == [
        "run",
        "--name=a b; rm -rf /",
        "3",
        "{literal}",
        "/r/t/out",
    ]
    assert format_command(spec.command, second.params, "/r/t", second)[1] == '--name=it\'s "q"'


def test_a_brace_in_inline_code_is_explained_and_doubled_braces_reach_the_program_single():
    with pytest.raises(
        InvalidArgumentError,
        match=r"\{x\} is neither .* written twice: f'\{\{x\}\}' reaches the "
        r"program as f'\{x\}'",
    ):
        SweepSpec(name="x", test_config=[{"lr": [0.1]}], command=["python", "-c", "x = 1; print(f'{x}', {lr})"])
    spec = SweepSpec(name="x", test_config=[{"lr": [0.1]}], command=["python", "-c", "x = 1; print(f'{{x}}', {lr})"])
    (trial,) = spec.trials()
    assert format_command(spec.command, trial.params, "/r/t", trial)[2] == "x = 1; print(f'{x}', 0.1)"


def test_exactly_one_target_and_objective_needed_for_optuna():
    with pytest.raises(InvalidArgumentError, match="command"):
        SweepSpec(name="x", command=["a"], python_callable=print)
    with pytest.raises(InvalidArgumentError, match="objective"):
        SweepSpec(name="x", search="optuna", space={"x": uniform(0, 1)}, command=["a"])
    assert (
        SweepSpec(name="x", search="optuna", space={"x": uniform(0, 1)}, command=["a"], objective=Objective("y")).rounds
        == 3
    )


def test_preview_cli_prints_trials_and_bad_specs_give_one_line(tmp_path):
    import json

    from tests.cli import gpusched

    def cli(*args):
        return gpusched("sweep", *args)

    good = write(
        tmp_path,
        """
        name: gan
        global_config: {num_run: 5}
        test_config:
          - {method: [GAN, ALI], num_zmode: [1]}
          - {method: [WGAN], num_zmode: [1, 2]}
        command: [python, train.py, "{method}"]
    """,
    )
    out = cli("preview", good, "--results-root", str(tmp_path / "r"))
    assert out.returncode == 0 and "gan (grid): 4 trials" in out.stdout and "method=WGAN,num_zmode=2" in out.stdout
    assert "would run 4; none has succeeded yet" in out.stdout and "skip 0" not in out.stdout
    out = cli("preview", good, "--results-root", str(tmp_path / "r"), "--force-rerun")
    assert "would run 4 (--force-rerun" in out.stdout and "skip" not in out.stdout
    data = json.loads(cli("preview", good, "--json", "--results-root", str(tmp_path / "r")).stdout)
    assert data["trials"] == 4 and data["would_run"] == 4
    bad = write(tmp_path, "name: x\ncommand: [a]\ntest_config: [{lr: {uniform: [1]}}]\n", "bad.yaml")
    out = cli("preview", bad)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().count("\n") == 0 and "bad.yaml: test_config[0].lr" in out.stderr
    missing = cli("results", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "no such sweep folder" in missing.stderr


# -- careless input: every mistake is refused when the spec is read, naming the key ----------------------------
BAD_SPECS = [
    # (extra YAML, the key the error names, a phrase of what was expected)
    (
        "test_config: [{a: {uniform: [0, 1]}, b: {uniform: [0, 1]}}]\ngrid_steps: 4000",
        "test_config",
        "at most max_trials=100,000",
    ),
    ("test_config: [{a: {uniform: [0, 1]}}]\ngrid_steps: 1000000000", "grid_steps", "from 1 to 10,000,000"),
    ("test_config: [{a: {uniform: [0, 1]}}]\ngrid_steps: 0", "grid_steps", "from 1 to"),
    ("search: random\ncount: 10000000\nspace: {a: [1, 2]}", "count", "at most the 2 distinct points"),
    ("search: random\ncount: 3\nspace: {a: [1, 2]}", "count", "at most the 2 distinct points"),
    ("resources: {gpu_memory: lots}", "resources.gpu_memory", "a byte count"),
    ("resources: {gpu_memory: -1GiB}", "resources.gpu_memory", "a byte count"),
    ("resources: {gpu_memory: 0}", "resources.gpu_memory", "a positive size"),
    ("resources: {mem: 12 parsecs}", "resources.mem", "a byte count"),
    ("resources: {time_limit: soon}", "resources.time_limit", "minutes"),
    ("resources: {partition: 'a b'}", "resources.partition", "a Slurm name"),
    ("resources: {env: {A: [1]}}", "resources.env.A", "a string or number"),
    ("force_rerun: 'no'", "force_rerun", "true or false"),
    ("results_root: 5", "results_root", "a directory path"),
    ("test_config: [{lr: [.nan, 0.1]}]", "test_config[0].lr[0]", "finite number"),
    ("global_config: {scale: .inf}", "global_config.scale", "finite number"),
    ("search: random\ncount: 2\nspace: {lr: {uniform: [0, .inf]}}", "space.lr", "finite number"),
    ("test_config: []", "test_config", "non-empty list"),
    ("max_trials: 0", "max_trials", "an integer >= 1"),
    ("name_override", None, None),  # placeholder replaced below
]
BAD_SPECS[-1] = (f"name: {'x' * 101}", "name", "at most 100 characters")
BAD_COMMANDS = [
    ("[python, {a: 1}]", "command[1]"),
    ("[python, true]", "command[1]"),
    ("[python, null]", "command[1]"),
    ("[python, [1, 2]]", "command[1]"),
]


@pytest.mark.parametrize("extra, key, expected", BAD_SPECS)
def test_careless_specs_are_refused_at_parse_naming_the_key(tmp_path, extra, key, expected):
    import time

    base = {"name": "careless", "command": ["python", "train.py"]}
    text = "\n".join(f"{k}: {json.dumps(v)}" for k, v in base.items() if not extra.startswith(f"{k}:")) + "\n" + extra
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    started = time.monotonic()
    with pytest.raises(InvalidArgumentError) as err:
        SweepSpec.from_yaml(str(path))
    assert time.monotonic() - started < 5  # counted, never expanded
    message = str(err.value)
    assert message.startswith(f"{path}: {key}"), message
    assert expected in message, message


@pytest.mark.parametrize("command, key", BAD_COMMANDS)
def test_non_scalar_command_items_are_refused(tmp_path, command, key):
    path = tmp_path / "spec.yaml"
    path.write_text(f"name: c\ncommand: {command}\n")
    with pytest.raises(InvalidArgumentError, match=re.escape(f"{path}: {key}")):
        SweepSpec.from_yaml(str(path))


def test_a_big_grid_runs_when_max_trials_is_raised_on_purpose(tmp_path, monkeypatch):
    spec = SweepSpec(
        name="big", test_config=[{"a": list(range(400)), "b": list(range(300))}], command=["true"], max_trials=200_000
    )
    assert spec.stage_size() == 120_000
    monkeypatch.setenv("GPUSCHED_MAX_TRIALS", "1000")
    with pytest.raises(InvalidArgumentError, match="max_trials=1,000"):
        SweepSpec(name="big", test_config=[{"a": list(range(400)), "b": list(range(300))}], command=["true"])


def test_gpu_task_schedulers_scheduler_config_is_read_as_it_is(tmp_path):
    from airflow_provider_gpusched.core.sweep.parts.expand import LabelFormat

    spec = SweepSpec.from_dict(
        {
            "name": "seed",
            "command": ["true"],
            "test_config": [{"method": ["GAN", "WGAN-GP-with-a-long-name"]}],
            "scheduler_config": {
                "gpu": [["0", "1"], ["2", "3"]],
                "result_root_folder": str(tmp_path / "r"),
                "force_rerun": True,
                "test_config_string_indicator": "-",
                "test_config_string_separator": "__",
                "config_string_value_maxlen": 8,
                "test_config_string_inst_separator": " + ",
                "log_file": "worker.log",
            },
        }
    )
    # GPU groups are honoured as fixed groups: each trial takes one whole pair
    assert (spec.resources.gpus, spec.resources.device_groups) == (2, [[0, 1], [2, 3]])
    assert spec.resources.local_gpu_arguments()["device_groups"] == [[0, 1], [2, 3]]
    mixed = SweepSpec.from_dict({"name": "mixed", "command": ["true"], "scheduler_config": {"gpu": ["0", ["1", "2"]]}})
    assert (mixed.resources.gpus, mixed.resources.device_groups) == (2, [[0], [1, 2]])
    ids = SweepSpec.from_dict({"name": "ids", "command": ["true"], "scheduler_config": {"gpu": ["0", "1"]}})
    assert (ids.resources.gpus, ids.resources.devices, ids.resources.device_groups) == (1, [0, 1], None)
    assert spec.results_root == str(tmp_path / "r") and spec.force_rerun is True
    assert spec.label_format == LabelFormat("-", "__", 8, " + ")
    assert [t.label for t in spec.trials()] == ["method-GAN", "method-WGAN-GP-"]
    assert [t.folder.rsplit(".", 1)[0] for t in spec.trials()] == ["method-GAN", "method-WGAN-GP-"]
    # the label format never changes a trial's id (only its label and folder name)
    plain = SweepSpec(name="seed", command=["true"], test_config=[{"method": ["GAN", "WGAN-GP-with-a-long-name"]}])
    assert [t.trial_id for t in plain.trials()] == [t.trial_id for t in spec.trials()]
    assert plain.trials()[1].label == "method=WGAN-GP-with-a-long-name"


@pytest.mark.parametrize(
    ("block", "argument", "expected"),
    [
        ({"gpu": ["0", "0"]}, "scheduler_config.gpu", "each GPU id once"),
        ({"gpu": ["zero"]}, "scheduler_config.gpu", "GPU ids such as"),
        ({"gpu": []}, "scheduler_config.gpu", "GPU ids such as"),
        ({"gpus": ["0"]}, "scheduler_config.gpus", "a GPU Task Scheduler key"),
        ({"test_config_string_indicator": "/"}, "label_format.indicator", "no '/'"),
        ({"config_string_value_maxlen": 0}, "label_format.value_maxlen", "from 1 to 200"),
        ({"force_rerun": True, "_twice": True}, "scheduler_config.force_rerun", "one place"),
    ],
)
def test_a_bad_scheduler_config_names_its_key(block, argument, expected):
    data = {"name": "seed", "command": ["true"], "scheduler_config": {k: v for k, v in block.items() if k != "_twice"}}
    if "_twice" in block:
        data["force_rerun"] = False
    with pytest.raises(InvalidArgumentError) as err:
        SweepSpec.from_dict(data)
    assert err.value.argument.endswith(argument) and expected in err.value.expected, (err.value.argument, err.value)


def test_resources_devices_are_checked():
    with pytest.raises(InvalidArgumentError, match="at least gpus=2"):
        SweepSpec(name="d", command=["true"], resources={"gpus": 2, "devices": [1]})
    with pytest.raises(InvalidArgumentError, match="distinct GPU indices"):
        SweepSpec(name="d", command=["true"], resources={"devices": [1, 1]})


def test_pavi_function_resource_launcher_and_dist_params_map_onto_backend_and_distributed_starts():
    """Seed 000's own block: function_resource = dict(launcher='slurm', dist_params=dict(backend='nccl'),
    executor=..., source=..., partition='pat_dev', num_cpus=1, num_gpus=8, normal=True)."""
    resource = {
        "launcher": "slurm",
        "dist_params": {"backend": "nccl"},
        "source": "source /mnt/lustre/share/platform/env/pt1.7.0",
        "partition": "pat_dev",
        "num_cpus": 1,
        "num_gpus": 8,
        "normal": True,
    }
    spec = SweepSpec.from_dict(
        {"name": "pavi", "command": ["true"], "test_config": [{"x": [1]}], "function_resource": resource}
    )
    r = spec.resources
    assert (r.backend, r.distributed, r.gpus, r.cpus, r.partition, r.job_class) == (
        "slurm",
        "srun",
        8,
        1,
        "pat_dev",
        "normal",
    )
    assert r.setup == ["source /mnt/lustre/share/platform/env/pt1.7.0"] and r.env == {"GPUSCHED_DIST_BACKEND": "nccl"}
    with pytest.raises(
        Exception, match="resources.backend='slurm' \\(pavi's launcher\\): these trials run on slurm only"
    ):
        r.check_backend("local", "pavi")
    r.check_backend("slurm", "pavi")
    with pytest.raises(InvalidArgumentError, match="executor: expected no executor: pavi's cluster name"):
        SweepSpec.from_dict(
            {
                "name": "pavi",
                "command": ["true"],
                "function_resource": {**resource, "executor": "cluster_sh1986-SH-IDC1-10-198-6-31"},
            }
        )
    with pytest.raises(InvalidArgumentError, match="launcher: expected one of"):
        SweepSpec.from_dict({"name": "pavi", "command": ["true"], "function_resource": {"launcher": "mpi"}})
    local = SweepSpec.from_dict(
        {
            "name": "p2",
            "command": ["true"],
            "function_resource": {"launcher": "pytorch", "dist_params": {"backend": "gloo"}},
        }
    )
    assert (local.resources.backend, local.resources.distributed) == (None, "torchrun")


def _alias_bomb(levels: int = 9) -> str:
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_a_yaml_alias_bomb_or_a_huge_spec_is_refused_at_once_naming_the_file_and_the_limit(tmp_path):
    """Issue 53, item 4-5: a 1 KB spec of nested aliases (9**9 values once expanded) took 4 GB and 34 s; a 100 MB
    spec 47 s and a bare MemoryError. Both are refused before they are built, in well under a second."""
    import time

    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(
        "name: bomb\ncommand: [train]\ntest_config:\n  - lr: *l8\n".replace("*l8", "[1]")
        + "extra:\n"
        + textwrap.indent(_alias_bomb(), "  ")
        + "space:\n  lr: *l8\n"
    )
    assert bomb.stat().st_size < 1200
    started = time.monotonic()
    with pytest.raises(InvalidArgumentError, match=rf"{re.escape(str(bomb))}.*alias bomb"):
        SweepSpec.from_yaml(str(bomb))
    huge = tmp_path / "huge.yaml"
    huge.write_text("name: huge\ncommand: [train]\n" + "# padding\n" * (1 << 20))
    with pytest.raises(InvalidArgumentError, match=rf"{re.escape(str(huge))}.*over 8,388,608 bytes"):
        SweepSpec.from_yaml(str(huge))
    deep = tmp_path / "deep.yaml"
    deep.write_text("name: deep\nspace:\n  x: " + "[" * 3000 + "]" * 3000 + "\n")
    with pytest.raises(InvalidArgumentError, match=rf"{re.escape(str(deep))}.*nested"):
        SweepSpec.from_yaml(str(deep))
    assert time.monotonic() - started < 5


def test_an_error_about_a_huge_value_quotes_only_its_beginning():
    """A bad value is named in the message, cut to a few hundred characters however large or nested it is."""
    value = ["x" * 1000] * 9
    for _ in range(40):
        value = [value] * 9  # 9**40 strings if walked in full
    error = InvalidArgumentError("space.lr", value, "a list of numbers")
    assert len(str(error)) < 400 and str(error).startswith("space.lr: expected a list of numbers, got [[[")


def test_the_partitioner_and_the_job_class_file_refuse_an_alias_bomb(tmp_path):
    from airflow_provider_gpusched.core.job_classes import JobClassConfigError, JobClassMapping
    from airflow_provider_gpusched.core.partition.problem import PartitionInputError, load_yaml_file

    bomb = tmp_path / "models.yaml"
    bomb.write_text(_alias_bomb())
    with pytest.raises(PartitionInputError, match=rf"{re.escape(str(bomb))}: not valid YAML.*alias bomb"):
        load_yaml_file(str(bomb), "models")
    with pytest.raises(JobClassConfigError, match=rf"{re.escape(str(bomb))}: .*alias bomb"):
        JobClassMapping.load(str(bomb))


def test_a_sweep_name_airflow_would_refuse_as_a_group_id_is_refused_when_the_spec_is_made():
    """Issue 53, item 8: a name with '.' passed SweepSpec, then failed in the DAG file with Airflow's raw ValueError."""
    with pytest.raises(
        InvalidArgumentError,
        match=r"sweep: name: expected a sweep name of letters, digits, '_' and "
        r"'-' \(it becomes the Airflow task group id",
    ):
        SweepSpec(name="lr.v2", command=["train"], test_config=[{"lr": [0.1]}])
    # the names it accepts, Airflow accepts: tests/airflow/test_sweep_execution.py


@pytest.mark.parametrize("anchored", [False, True], ids=["tree", "with-anchors"])
def test_the_yaml_bounds_are_the_same_with_and_without_anchors(anchored):
    """A document without anchors is checked as a tree (a faster walk); one with anchors through the memoised
    count of every node as if its aliases were expanded. Both refuse and accept at the same bounds."""
    from airflow_provider_gpusched.core.yaml_loader import YAMLLimitError, safe_load

    anchor = "  other: &a [1]\n" if anchored else "  other: [1]\n"
    # 1 mapping + 2 keys + the list of 3 + its 3 values + the list of 1 + its value = 11 values, 3 levels deep
    text = "top:\n  xs: [1, 2, 3]\n" + anchor
    assert safe_load(text, max_values=11, max_depth=3) == {"top": {"xs": [1, 2, 3], "other": [1]}}
    with pytest.raises(YAMLLimitError, match="more than 10 values"):
        safe_load(text, max_values=10)
    with pytest.raises(YAMLLimitError, match="nested more than 2 levels deep"):
        safe_load(text, max_depth=2)
    # a string holding '&' only takes the slower walk, with the same answer
    assert safe_load("a: 'x & y'\n", max_values=3) == {"a": "x & y"}
    with pytest.raises(YAMLLimitError, match="more than 2 values"):
        safe_load("a: 'x & y'\n", max_values=2)
