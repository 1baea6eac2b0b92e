"""The NAS search's built-in evaluator (core/sweep/searches/model_cost.py): a model's parameters and FLOPs, counted by
PyTorch from the model itself, and the evolution search keeping every candidate within the constraints."""

import pytest

from airflow_provider_gpusched.core.errors import InvalidArgumentError

from ..polling import need_torch


@pytest.fixture(autouse=True)
def _torch():
    need_torch()


def mlp(params):
    import torch.nn as nn

    return nn.Sequential(nn.Linear(64, params["width"]), nn.ReLU(), nn.Linear(params["width"], 10))


@pytest.mark.heavy  # 1.6 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_model_cost_counts_parameters_and_two_flops_per_multiply_add():
    import torch.nn as nn

    from airflow_provider_gpusched.core.sweep.searches.model_cost import model_cost

    assert model_cost(nn.Linear(64, 10), (1, 64)) == {"params": 650, "flops": 2 * 64 * 10}
    assert model_cost(nn.Linear(64, 10), (4, 64))["flops"] == 4 * 2 * 64 * 10  # the batch counts
    conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
    assert model_cost(conv, (1, 3, 16, 16)) == {"params": 8 * 3 * 9, "flops": 2 * 16 * 16 * 8 * 3 * 9}
    model = nn.Sequential(nn.Dropout(0.5), nn.Linear(8, 8))
    model.train()
    model_cost(model, (1, 8))
    assert model.training  # measured in eval mode, then put back as it was


def test_model_cost_as_a_measure_in_units_and_from_a_spec_block():
    from airflow_provider_gpusched.core.sweep.searches.model_cost import ModelCost

    cost = ModelCost(mlp, (1, 64), units="K")
    assert cost({"width": 100}) == {
        "params": (64 * 100 + 100 + 100 * 10 + 10) / 1e3,
        "flops": 2 * (64 * 100 + 100 * 10) / 1e3,
    }
    by_name = ModelCost.from_mapping(
        {"type": "NaiveEvaluator", "build": f"{__name__}:mlp", "default_shape": [1, 64], "units": "M"},
        "evolution.evaluator",
    )
    assert by_name({"width": 100})["flops"] == pytest.approx(2 * 7400 / 1e6)


@pytest.mark.parametrize(
    "block, message",
    [
        ({"build": "x:y", "input_shape": [1, 0]}, "evolution.evaluator.input_shape"),
        ({"build": "x:y", "input_shape": "1x64"}, "evolution.evaluator.input_shape"),
        ({"build": "x:y", "input_shape": [1, 64], "units": "T"}, "evolution.evaluator.units"),
        ({"build": "no_colon", "input_shape": [1, 64]}, "evolution.evaluator.build"),
        ({"input_shape": [1, 64]}, "evolution.evaluator.build"),
        ({"build": "x:y", "input_shape": [1, 64], "shape": 1}, "evolution.evaluator.shape"),
        ({"type": "FancyEvaluator", "build": "x:y", "input_shape": [1]}, "evolution.evaluator.type"),
    ],
)
def test_a_bad_evaluator_block_names_its_key(block, message):
    from airflow_provider_gpusched.core.sweep.searches.model_cost import ModelCost

    with pytest.raises(InvalidArgumentError, match=message):
        ModelCost.from_mapping(block, "evolution.evaluator")


def test_a_build_function_that_fails_names_the_candidate():
    from airflow_provider_gpusched.core.errors import GpuschedError
    from airflow_provider_gpusched.core.sweep.searches.model_cost import ModelCost

    with pytest.raises(GpuschedError, match=r"evaluator: build\(\{'width': 0\}\) failed: ZeroDivisionError"):
        ModelCost(lambda p: 1 / 0, (1,))({"width": 0})


def test_an_evolution_spec_with_an_evaluator_proposes_only_candidates_within_the_constraints(tmp_path):
    from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec
    from airflow_provider_gpusched.core.sweep.searches.evolution import EvolutionSearch
    from airflow_provider_gpusched.core.sweep.searches.model_cost import model_cost

    spec = SweepSpec.from_dict(
        {
            "name": "nas",
            "search": "evolution",
            "space": {"width": [8, 16, 32, 64, 128, 256]},
            "command": ["true"],
            "objective": {"metric": "acc", "mode": "maximize"},
            "evolution": {
                "candidate_pool_size": 3,
                "candidate_top_k": 1,
                "max_epoch": 2,
                "constraints": {"flops": 10},  # KFLOPs: widths up to 64 fit (64 -> 9.5 K)
                "evaluator": {"build": f"{__name__}:mlp", "input_shape": [1, 64], "units": "K"},
            },
        }
    )
    search = EvolutionSearch(spec, str(tmp_path))
    proposed = search.ask(0)
    assert len(proposed) == 3
    for params in proposed:
        assert model_cost(mlp(params), (1, 64))["flops"] <= 10_000
    with pytest.raises(InvalidArgumentError, match="either evaluator or measure"):
        SweepSpec.from_dict(
            {
                "name": "nas",
                "search": "evolution",
                "space": {"width": [8]},
                "command": ["true"],
                "objective": {"metric": "acc", "mode": "maximize"},
                "evolution": {
                    "constraints": {"flops": 1},
                    "measure": f"{__name__}:mlp",
                    "evaluator": {"build": f"{__name__}:mlp", "input_shape": [1, 64]},
                },
            }
        )
