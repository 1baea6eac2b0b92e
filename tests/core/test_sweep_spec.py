"""Sweep specs from Python and YAML: validation errors name the file and key path."""

import textwrap

import pytest

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, uniform
from airflow_provider_gpusched.core.sweep.spaces import Conditional, LogUniform
from airflow_provider_gpusched.core.sweep.spec import format_command


def write(tmp_path, text, name="spec.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_yaml_spec_with_spaces_conditions_and_seed_000_resource_names(tmp_path):
    path = write(tmp_path, """
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
    """)
    spec = SweepSpec.from_yaml(path)
    assert isinstance(spec.space["lr"], LogUniform) and isinstance(spec.space["momentum"], Conditional)
    assert (spec.resources.gpus, spec.resources.cpus, spec.resources.setup, spec.resources.job_class) == \
        (2, 4, ["source /env.sh"], "idle")
    trials = spec.trials()
    assert len(trials) == 8 and [t.params for t in trials] == [t.params for t in SweepSpec.from_yaml(path).trials()]


@pytest.mark.parametrize("body,where", [
    ("name: x\ncommand: [a]\ntest_config:\n  - lr: {uniform: [1]}\n", "test_config[0].lr"),
    ("name: x\ncommand: [a]\nsearch: random\nspace: {lr: [1]}\n", "count"),
    ("name: x\ncommand: [a]\nresources: {gpu: 1}\n", "resources.gpu"),
    ("name: x\ncommand: [a]\nobjective: {metric: acc, mode: up}\n", "objective.mode"),
    ("name: x\ncomand: [a]\n", "comand"),
    ("name: ../up\ncommand: [a]\n", "name"),
    ("name: x\ncommand: [a, '{nope}']\ntest_config: [{lr: [1]}]\n", "command"),
    ("name: x\ncommand: a b\n", "command"),
    ("name: x\ncallable: 'no.such.module:fn'\n", "callable"),
    ("name: x\ncommand: [a]\nsearch: evolution\nspace: {op: {uniform: [0, 1]}}\nobjective: {metric: s}\n", "space.op"),
    ("name: x\ncommand: [a]\nsearch: evolution\nspace: {op: [1]}\nobjective: {metric: s}\n"
     "evolution: {constraints: {flops: 600}}\n", "evolution.measure"),
    ("name: x\ncommand: [a\n", "line 3"),
])
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
    spec = SweepSpec(name="x", test_config=[{"name": ["a b; rm -rf /", "it's \"q\""]}],
                     global_config={"cfg": {"depth": 3}},
                     command=["run", "--name={name}", "{cfg.depth}", "{{literal}}", "{trial_dir}/out"])
    first, second = spec.trials()
    assert format_command(spec.command, first.params, "/r/t", first) == \
        ["run", "--name=a b; rm -rf /", "3", "{literal}", "/r/t/out"]
    assert format_command(spec.command, second.params, "/r/t", second)[1] == "--name=it's \"q\""


def test_exactly_one_target_and_objective_needed_for_optuna():
    with pytest.raises(InvalidArgumentError, match="command"):
        SweepSpec(name="x", command=["a"], python_callable=print)
    with pytest.raises(InvalidArgumentError, match="objective"):
        SweepSpec(name="x", search="optuna", space={"x": uniform(0, 1)}, command=["a"])
    assert SweepSpec(name="x", search="optuna", space={"x": uniform(0, 1)}, command=["a"],
                     objective=Objective("y")).rounds == 3


def test_preview_cli_prints_trials_and_bad_specs_give_one_line(tmp_path):
    import json
    import subprocess
    import sys

    from airflow_provider_gpusched.cli import main  # noqa: F401 - the entry point exists

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "airflow_provider_gpusched.cli", "sweep", *args],
                              capture_output=True, text=True)

    good = write(tmp_path, """
        name: gan
        global_config: {num_run: 5}
        test_config:
          - {method: [GAN, ALI], num_zmode: [1]}
          - {method: [WGAN], num_zmode: [1, 2]}
        command: [python, train.py, "{method}"]
    """)
    out = cli("preview", good, "--results-root", str(tmp_path / "r"))
    assert out.returncode == 0 and "gan (grid): 4 trials" in out.stdout and "method=WGAN,num_zmode=2" in out.stdout
    data = json.loads(cli("preview", good, "--json", "--results-root", str(tmp_path / "r")).stdout)
    assert data["trials"] == 4 and data["would_run"] == 4
    bad = write(tmp_path, "name: x\ncommand: [a]\ntest_config: [{lr: {uniform: [1]}}]\n", "bad.yaml")
    out = cli("preview", bad)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().count("\n") == 0 and "bad.yaml: test_config[0].lr" in out.stderr
    missing = cli("results", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "no summary.json" in missing.stderr
