"""Sweep expansion: GPU Task Scheduler grid semantics, DI-toolkit grids, random search, trial identity."""

import subprocess
import sys

import pytest

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.sweep.parts.expand import GridSweep, random_trials, safe_name, trial_id
from airflow_provider_gpusched.core.sweep.parts.spaces import choice, loguniform, quniform, randint, uniform

SEED_003 = {
    "global_config": {"num_run": 5, "num_epoch": 200},
    "test_config": [
        {"method": ["GAN", "ALI"], "num_packing": [1], "num_zmode": [1]},
        {"method": ["WGAN"], "num_packing": [3], "num_zmode": [1, 2]},
    ],
}


def test_seed_003_readme_example_gives_exactly_its_four_instances():
    trials = GridSweep(**SEED_003).trials()
    assert [t.params for t in trials] == [
        {"num_run": 5, "num_epoch": 200, "method": "GAN", "num_packing": 1, "num_zmode": 1},
        {"num_run": 5, "num_epoch": 200, "method": "ALI", "num_packing": 1, "num_zmode": 1},
        {"num_run": 5, "num_epoch": 200, "method": "WGAN", "num_packing": 3, "num_zmode": 1},
        {"num_run": 5, "num_epoch": 200, "method": "WGAN", "num_packing": 3, "num_zmode": 2},
    ]
    assert trials[0].label == "method=GAN,num_packing=1,num_zmode=1"


def test_last_key_varies_fastest_and_test_values_override_global():
    trials = GridSweep({"lr": 0.1, "bs": 32}, [{"lr": [1, 2], "wd": ["a", "b", "c"]}]).trials()
    assert [(t.params["lr"], t.params["wd"]) for t in trials] == [
        (1, "a"),
        (1, "b"),
        (1, "c"),
        (2, "a"),
        (2, "b"),
        (2, "c"),
    ]
    assert all(t.params["bs"] == 32 for t in trials)


def test_duplicates_are_removed_keeping_the_first():
    trials = GridSweep({}, [{"a": [1, 2]}, {"a": [2, 3]}]).trials()
    assert [t.params["a"] for t in trials] == [1, 2, 3]


def test_di_toolkit_uniform_grid_with_five_steps():
    trials = GridSweep({}, [{"discount_factor": uniform(0.95, 1)}], grid_steps=5).trials()
    assert [round(t.params["discount_factor"], 10) for t in trials] == [0.95, 0.9625, 0.975, 0.9875, 1.0]


def test_other_spaces_on_a_grid():
    assert loguniform(1e-4, 1e-2).grid(3) == pytest.approx([1e-4, 1e-3, 1e-2])
    assert randint(1, 4).grid() == [1, 2, 3, 4]
    assert quniform(0, 1, 0.25).grid() == [0, 0.25, 0.5, 0.75, 1]
    assert choice(["x", "y"]).grid() == ["x", "y"]


@pytest.mark.parametrize(
    "config,path",
    [
        ({"test_config": [{"lr": 0.1}]}, "test_config[0].lr"),
        ({"test_config": [{"lr": []}]}, "test_config[0].lr"),
        ({"test_config": [{"lr": uniform(0, 1)}]}, "test_config[0].lr"),  # continuous without grid_steps
        ({"test_config": {"lr": [1]}}, "test_config"),
        ({"test_config": ["lr"]}, "test_config[0]"),
        ({"global_config": [1]}, "global_config"),
    ],
)
def test_errors_name_the_key_path(config, path):
    with pytest.raises(InvalidArgumentError) as err:
        GridSweep(**config, where="sweeps/gan.yaml").trials()
    assert f"sweeps/gan.yaml: {path}" in str(err.value)


def test_bad_spaces():
    for make in (
        lambda: uniform(1, 0),
        lambda: loguniform(0, 1),
        lambda: randint(3, 1),
        lambda: choice([]),
        lambda: quniform(0, 1, 0),
    ):
        with pytest.raises(InvalidArgumentError):
            make()


def test_random_search_is_seeded_and_distinct():
    space = {"lr": loguniform(1e-5, 1e-1), "layers": randint(2, 8), "act": ["relu", "gelu"], "epochs": 10}
    a = random_trials(space, 20, seed=7)
    b = random_trials(space, 20, seed=7)
    assert [t.params for t in a] == [t.params for t in b]
    assert len({t.trial_id for t in a}) == 20
    assert all(1e-5 <= t.params["lr"] <= 1e-1 and t.params["epochs"] == 10 for t in a)
    assert [t.params for t in random_trials(space, 20, seed=8)] != [t.params for t in a]
    with pytest.raises(InvalidArgumentError, match="at most the 2 distinct points"):
        random_trials({"act": ["relu", "gelu"]}, 5, seed=1)  # only two distinct trials exist


def test_trial_id_is_stable_across_processes():
    params = {"lr": 0.001, "method": "WGAN", "layers": [64, 128], "nested": {"b": 1, "a": 2}}
    here = trial_id(params, "v1")
    code = (
        "from airflow_provider_gpusched.core.sweep.parts.expand import trial_id; "
        "print(trial_id({'nested': {'a': 2, 'b': 1}, 'layers': [64, 128], 'method': 'WGAN', 'lr': 0.001}, 'v1'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.strip() == here
    assert trial_id(params, "v2") != here


@pytest.mark.parametrize("value", ["../x", "../../etc/passwd", "/abs/path", "a/b", "..", ".", "x\x00y", "név ü"])
def test_folder_names_cannot_escape_the_results_root(value):
    (trial,) = GridSweep({}, [{"name": [value]}]).trials()
    folder = trial.folder
    assert "/" not in folder and "\x00" not in folder and folder not in (".", "..") and not folder.startswith(".")
    assert folder.endswith(trial.trial_id[:8])
    assert safe_name("", trial.trial_id) == trial.trial_id


def test_conditional_parameter_exists_only_for_its_condition():
    from airflow_provider_gpusched.core.sweep.parts.spaces import when

    trials = GridSweep(
        {}, [{"optimizer": ["sgd", "adam"], "momentum": when({"optimizer": "sgd"}, [0.8, 0.9]), "lr": [0.1]}]
    ).trials()
    assert [t.params for t in trials] == [
        {"optimizer": "sgd", "momentum": 0.8, "lr": 0.1},
        {"optimizer": "sgd", "momentum": 0.9, "lr": 0.1},
        {"optimizer": "adam", "lr": 0.1},
    ]
    sampled = random_trials(
        {"optimizer": ["sgd", "adam"], "momentum": when({"optimizer": ["sgd"]}, uniform(0.5, 1))}, 30, seed=3
    )
    assert all(("momentum" in t.params) == (t.params["optimizer"] == "sgd") for t in sampled)
    assert {t.params["optimizer"] for t in sampled} == {"sgd", "adam"}


def test_condition_on_an_unknown_or_later_parameter_is_an_error():
    from airflow_provider_gpusched.core.sweep.parts.spaces import when

    with pytest.raises(InvalidArgumentError, match=r"test_config\[0\]\.momentum\.when"):
        GridSweep({}, [{"momentum": when({"optimizer": "sgd"}, [0.9]), "optimizer": ["sgd"]}]).trials()


def test_nested_spaces_are_flattened_for_labels_and_nested_again_for_the_trial():
    from airflow_provider_gpusched.core.sweep.parts.expand import nested

    (a, b) = GridSweep({"policy": {"gamma": 0.99}}, [{"policy": {"lr": [1, 2]}}]).trials()
    assert a.params == {"policy.gamma": 0.99, "policy.lr": 1} and a.label == "policy.lr=1"
    assert nested(b.params) == {"policy": {"gamma": 0.99, "lr": 2}}


def test_grid_points_have_no_float_noise():
    assert loguniform(1e-3, 1e-1).grid(3) == [0.001, 0.01, 0.1]


def test_parameters_too_large_for_the_environment_are_refused_at_plan_time_naming_the_trial():
    """Issue 53, item 6: a 1 MB hyper-parameter made every trial fail with 'Argument list too long' when it ran."""
    from airflow_provider_gpusched.core.errors import InvalidArgumentError
    from airflow_provider_gpusched.core.sweep import SweepSpec

    spec = SweepSpec(name="big", command=["train"], test_config=[{"lr": [0.1], "blob": ["x" * (1 << 20), "small"]}])
    with pytest.raises(
        InvalidArgumentError,
        match=r"trial 0: expected at most 65,536 bytes as JSON.*"
        r"GPUSCHED_TRIAL_PARAMS.*got .1,048,6\d\d bytes of parameters "
        r"\(the largest: 'blob'\)",
    ):
        spec.trials()
