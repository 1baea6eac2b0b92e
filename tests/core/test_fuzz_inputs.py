"""Fuzzing what users write: sweep specs (Python dicts and YAML text), pipeline-partition inputs and the
arguments operators validate with (``SlurmJobSpec``, ``GPURequest``). For every generated input: a valid
result, or the project's own error with a message naming a key — never another exception, never more than
a few seconds. Each test counts its own inputs (tests/fuzzing.py) and checks it reached both outcomes."""

from __future__ import annotations

import math
import re
from dataclasses import fields

import pytest
import yaml
from hypothesis import strategies as st

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.partition import load_problem, partition
from airflow_provider_gpusched.core.partition.problem import PartitionInputError
from airflow_provider_gpusched.core.slurm import SlurmJobSpec
from airflow_provider_gpusched.core.sweep import SweepSpec
from tests.fuzzing import assert_both_outcomes, fuzz

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(
        [
            "",
            "-1GiB",
            "lots",
            "6GiB",
            "0",
            "no",
            "{x}",
            "{trial_dir}",
            "a\nb",
            "--me",
            "-oProxyCommand=x",
            "1e400",
            ".nan",
            "x" * 300,
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=12,
)

dims = st.one_of(
    st.lists(scalars, min_size=0, max_size=5),
    st.builds(
        lambda k, a: {k: a},
        st.sampled_from(["uniform", "loguniform", "randint", "quniform", "choice", "values"]),
        st.lists(st.one_of(st.integers(-(10**9), 10**9), st.floats(allow_nan=True, allow_infinity=True)), max_size=4),
    ),
    values,
)
SPEC_KEYS = [
    "name",
    "search",
    "global_config",
    "test_config",
    "space",
    "count",
    "rounds",
    "per_round",
    "seed",
    "grid_steps",
    "code_version",
    "command",
    "objective",
    "results_root",
    "force_rerun",
    "top_n",
    "sampler",
    "resources",
    "evolution",
    "on_invalid_result",
    "max_failed_trials",
    "max_trials",
    "asynchronous",
    "pruning",
    "max_workers",
    "pbt",
    "hyperband",
    "bogus",
]
#: pruning settings, good and bad: every rule, Optuna's pruners (hyperband only for an asynchronous search)
PRUNING = st.one_of(
    st.sampled_from(
        [
            "median",
            "asha",
            {"rule": "optuna", "pruner": "hyperband", "options": {"min_resource": 1, "reduction_factor": 3}},
            {"rule": "optuna", "pruner": "hyperband", "options": {"min_resource": 0}},
            {"rule": "optuna", "pruner": "wilcoxon"},
            {"rule": "optuna", "pruner": "successive_halving", "options": {"min_resource": 2}},
            {"rule": "asha", "reduction_factor": 1},
            {"rule": "median", "pruner": "median"},
        ]
    ),
    values,
)


@st.composite
def sweep_dicts(draw):
    """A valid grid or random spec, then 0-3 of its keys replaced by anything (so both outcomes are common)."""
    good_dim = st.one_of(
        st.lists(
            st.one_of(st.integers(0, 9), st.floats(0, 1), st.text(max_size=4)), min_size=1, max_size=4, unique_by=str
        ),
        st.builds(lambda lo, w: {"uniform": [lo, lo + w]}, st.floats(-5, 5), st.floats(0.1, 5)),
        st.builds(lambda lo, w: {"randint": [lo, lo + w]}, st.integers(-5, 5), st.integers(0, 9)),
    )
    space = draw(st.dictionaries(st.sampled_from(["x", "y", "lr"]), good_dim, min_size=1, max_size=3))
    spec = {"name": "fz", "command": ["python", "train.py", "{trial_dir}"], "objective": {"metric": "acc"}}
    kind = draw(st.sampled_from(["grid", "random", "optuna", "pbt", "hyperband"]))
    if kind == "grid":
        spec.update(search="grid", test_config=[space], grid_steps=draw(st.integers(1, 5)))
    elif kind == "random":
        spec.update(search="random", space=space, count=draw(st.integers(1, 5)))
    elif kind in ("pbt", "hyperband"):  # population-based training or Hyperband, their settings good or bad
        settings = st.one_of(st.integers(-1, 12), st.floats(-1, 2), scalars)
        keys = {
            "pbt": ("population", "perturbation_interval", "steps", "quantile_fraction", "step_param"),
            "hyperband": ("max_t", "min_t", "reduction_factor", "step_param"),
        }[kind]
        spec.update(
            {
                "search": kind,
                "space": space,
                kind: draw(st.fixed_dictionaries({}, optional=dict.fromkeys(keys, settings))),
            }
        )
    else:  # an asynchronous Optuna search (BOHB when it draws the Hyperband pruner)
        spec.update(search="optuna", space=space, asynchronous=True, count=draw(st.integers(1, 20)))
        spec.update(sampler=draw(st.sampled_from(["tpe", "gp", "cmaes", "random", "nsga2"])))
    for key in draw(st.lists(st.sampled_from(SPEC_KEYS), max_size=3)):
        if key == "test_config":
            spec[key] = draw(
                st.one_of(st.lists(st.dictionaries(st.sampled_from(["x", "y"]), dims, max_size=2), max_size=2), values)
            )
        elif key == "space":
            spec[key] = draw(st.one_of(st.dictionaries(st.sampled_from(["x", "y"]), dims, max_size=2), values))
        elif key == "resources":
            spec[key] = draw(
                st.one_of(
                    st.fixed_dictionaries(
                        {},
                        optional={
                            k: scalars
                            for k in (
                                "gpus",
                                "gpu_memory",
                                "cpus",
                                "mem",
                                "partition",
                                "time_limit",
                                "job_class",
                                "priority",
                                "env",
                                "setup",
                            )
                        },
                    ),
                    values,
                )
            )
        elif key == "pruning":
            spec[key] = draw(PRUNING)
        else:
            spec[key] = draw(st.one_of(scalars, values, st.integers(0, 10**9)))
    return spec


#: the spec keys an error may name: the spec's fields and what from_dict also reads (and the fuzzer's bogus key)
SPEC_FIELDS = {f.name for f in fields(SweepSpec)} | {"callable", "scheduler_config", "function_resource", "bogus"}


def names_a_spec_key(exc: InvalidArgumentError, where: str = "sweep") -> bool:
    """``<where>: <key>[.sub|[i]]`` with a key of the spec, or a space helper's own argument (``count``,
    ``grid_steps``, raised before the spec adds where)."""
    if exc.argument in ("count", "grid_steps"):
        return True
    if not exc.argument.startswith(f"{where}: "):
        return False
    if exc.expected.startswith("a known key"):  # an unknown key, named as the user wrote it
        return True
    return re.split(r"[.\[ ]", exc.argument[len(where) + 2 :], maxsplit=1)[0] in SPEC_FIELDS


@pytest.mark.heavy  # 2.7 s of CPU on its own (2026-12-02: 3.7 s of user CPU, pytest's own start 1.0 s)
def test_fuzz_sweep_specs_from_python():
    def sweep_from_dict(data):
        spec = SweepSpec.from_dict(data)
        assert spec.stage_size() <= spec.max_trials
        if spec.search in ("grid", "random") and spec.stage_size() <= 2000:
            trials = spec.trials()
            assert len({t.trial_id for t in trials}) == len(trials)
            for t in trials:
                assert all(not (isinstance(v, float) and not math.isfinite(v)) for v in t.params.values())

    counts = fuzz(
        sweep_dicts(),
        sweep_from_dict,
        error=InvalidArgumentError,
        names=lambda exc, data: names_a_spec_key(exc),
        what="spec key",
    )
    assert_both_outcomes(counts)


VALID_YAML = """name: fz
search: random
count: 4
space:
  lr: {loguniform: [1.0e-5, 1.0e-1]}
  optimizer: [sgd, adam]
  momentum: {uniform: [0.8, 0.99], when: {optimizer: sgd}}
command: [python, train.py, --lr, "{lr}"]
objective: {metric: accuracy, mode: maximize}
resources: {gpus: 1, gpu_memory: 6GiB}
"""


def test_fuzz_sweep_specs_from_yaml_text(tmp_path_factory):
    edits = st.lists(
        st.tuples(
            st.integers(0, len(VALID_YAML)),
            st.integers(0, 6),
            st.text(alphabet=" \n\t:{}[]-,'\"#&*!|>%@`0123456789.eE+abcnx", max_size=6),
        ),
        max_size=4,
    )
    path = tmp_path_factory.mktemp("fz") / "spec.yaml"

    def sweep_from_yaml(changes):
        text = VALID_YAML
        for at, cut, insert in changes:
            text = text[:at] + insert + text[at + cut :]
        path.write_text(text)
        spec = SweepSpec.from_yaml(str(path))
        if spec.search in ("grid", "random") and spec.stage_size() <= 2000:
            spec.trials()

    def names_the_file(exc, changes):  # "<file>: <key>: ...", "<file>: line 3, column 2: ...", or "sweep spec: ..."
        return (
            exc.argument == "sweep spec"
            and exc.value == str(path)
            or (exc.argument.startswith(f"{path}:") and (names_a_spec_key(exc, str(path)) or " line " in exc.argument))
        )

    counts = fuzz(edits, sweep_from_yaml, error=InvalidArgumentError, names=names_the_file, what="file and key")
    assert_both_outcomes(counts)


numbers = st.one_of(
    st.floats(min_value=-1e3, max_value=1e6),
    st.sampled_from([math.nan, math.inf, -math.inf]),
    st.integers(-5, 10**6),
    st.text(max_size=3),
    st.none(),
)


@st.composite
def partition_inputs(draw):
    """Valid sched-pipeline inputs (3-8 layers, 1-3 device types, unique hosts), then 0-2 parts replaced."""
    n = draw(st.integers(1, 8))
    positive = st.floats(0.01, 100)
    model = {
        "layers": n,
        "mem_MB": draw(st.lists(positive, min_size=n, max_size=n)),
        "parameters_in": draw(st.integers(1, 10**6)),
        "parameters_out": draw(st.lists(st.integers(1, 10**6), min_size=1, max_size=n)),
    }
    types, devices, host = {}, {}, 0
    for name in draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True)):
        types[name] = {
            "bw_Mbps": draw(st.floats(1, 10**4)),
            "mem_MB": draw(st.floats(50, 10**4)),
            "model_profiles": {
                "m": [
                    {
                        "batch_size": 8,
                        "dtype": "torch.float32",
                        "time_s": draw(st.lists(positive, min_size=n, max_size=n)),
                    }
                ]
            },
        }
        k = draw(st.integers(0, 3))
        devices[name] = [f"h{host + i}" for i in range(k)]
        host += k
    docs = {"models": {"m": model}, "types": types, "devices": devices}
    for _ in range(draw(st.integers(0, 2))):
        which = draw(st.sampled_from(["model", "type", "devices", "whole"]))
        if which == "model":
            model[draw(st.sampled_from(list(model)))] = draw(st.one_of(numbers, st.lists(numbers, max_size=n + 1)))
        elif which == "type":
            t = types[draw(st.sampled_from(list(types)))]
            key = draw(st.sampled_from(["bw_Mbps", "mem_MB", "model_profiles"]))
            t[key] = draw(st.one_of(numbers, values))
        elif which == "devices":
            devices[draw(st.sampled_from(list(devices)))] = draw(
                st.one_of(
                    st.lists(
                        st.one_of(st.text(max_size=6), st.integers(0, 9), st.just("evil\nhost"), st.just("h0")),
                        max_size=4,
                    ),
                    values,
                )
            )
        else:
            docs[draw(st.sampled_from(list(docs)))] = draw(values)
    dtype = draw(st.sampled_from(["torch.float32", "torch.float32", "torch.float16", "float64"]))
    batch = draw(st.sampled_from([8, 8, 8, 4, -1]))
    return docs["models"], docs["types"], docs["devices"], dtype, batch


@pytest.mark.heavy  # 0.9 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_fuzz_partition_inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pp")
    files = [str(folder / name) for name in ("models.yml", "device_types.yml", "devices.yml")]

    def partition_files(inputs):
        models, types, devices, dtype, batch = inputs
        for path, doc in zip(files, (models, types, devices), strict=True):
            with open(path, "w") as fh:
                yaml.safe_dump(doc, fh)
        problem = load_problem(*files, model="m", dtype=dtype, batch_size=batch)
        schedule = partition(problem)
        if schedule.feasible:
            assert schedule.stages[0].first == 1 and schedule.stages[-1].last == problem.layers

    def names_the_input(exc, inputs):  # the file (and key) that is wrong, or the option
        return str(exc).startswith((*files, "dtype", "batch size (-b)", "model "))

    counts = fuzz(
        partition_inputs(), partition_files, error=PartitionInputError, names=names_the_input, what="file or option"
    )
    assert_both_outcomes(counts)


SPEC_ARGS = {
    "command": st.one_of(st.lists(scalars, max_size=3), scalars),
    "job_name": scalars,
    "partition": scalars,
    "qos": scalars,
    "account": scalars,
    "gpus": scalars,
    "gres": scalars,
    "cpus_per_task": scalars,
    "mem": scalars,
    "time_limit": scalars,
    "array": scalars,
    "nice": scalars,
    "output": scalars,
    "error": scalars,
    "working_dir": scalars,
    "comment": scalars,
    "environment": st.dictionaries(st.text(max_size=5), scalars, max_size=2),
    "sbatch_args": st.one_of(st.lists(scalars, max_size=2), scalars),
    "open_mode": scalars,
}


def _names_one_of(exc: InvalidArgumentError, keys) -> bool:
    """The argument named is one of ``keys`` (``environment.X`` and ``sbatch_args[1]`` name their key;
    ``command/script`` and ``gpus/gres`` name the two that conflict)."""
    return any(part in keys for part in re.split(r"[.\[ ]", exc.argument, maxsplit=1)[0].split("/"))


def test_fuzz_slurm_job_arguments():
    def slurm_job_spec(kwargs):
        spec = SlurmJobSpec(**{"command": "true", **kwargs})
        argv = spec.sbatch_argv()
        assert all(isinstance(a, str) and "\n" not in a and "\x00" not in a for a in argv)
        assert spec.render_script().startswith("#!")

    counts = fuzz(
        st.fixed_dictionaries({}, optional=SPEC_ARGS),
        slurm_job_spec,
        error=InvalidArgumentError,
        names=lambda exc, kwargs: _names_one_of(exc, kwargs),
        what="argument given",
    )
    assert_both_outcomes(counts)


REQUEST_ARGS = {
    k: scalars
    for k in (
        "gpus",
        "gpu_memory",
        "memory_margin",
        "max_foreign_processes",
        "min_free_ram",
        "max_cpu_percent",
        "host_memory",
    )
} | {"devices": st.one_of(st.lists(scalars, max_size=3), scalars)}


def test_fuzz_gpu_requests():
    counts = fuzz(
        st.fixed_dictionaries({}, optional=REQUEST_ARGS),
        lambda kwargs: GPURequest(**kwargs),
        error=InvalidArgumentError,
        names=lambda exc, kwargs: _names_one_of(exc, kwargs),
        what="argument given",
    )
    assert_both_outcomes(counts)


#: the keys of VALID_YAML a typo is tried in: top-level spec keys, the space types, the resources' keys
TYPO_KEYS = {
    "search": "search: random",
    "count": "count: 4",
    "space": "space:",
    "command": "command:",
    "objective": "objective:",
    "resources": "resources:",
    "loguniform": "{loguniform:",
    "uniform": "{uniform:",
    "gpu_memory": "gpu_memory:",
}


def _typos(word):
    """Every single-letter deletion and swap of neighbours of ``word`` (the common slips), without repeats."""
    out = {word[:i] + word[i + 1 :] for i in range(len(word))}
    out |= {word[:i] + word[i + 1] + word[i] + word[i + 2 :] for i in range(len(word) - 1)}
    return sorted(out - {word})


def test_every_misspelt_key_is_refused_naming_the_file_the_key_and_the_closest_known_one(tmp_path):
    """No typo is read as data (issue 52): ``lr: {logunifrom: [...]}`` was a nested parameter ``lr.logunifrom``;
    ``serach: random`` an error quoting its value. Each typo of each key is refused, naming the file, the key's
    path and (for all but a few short keys' slips) the key meant."""
    from airflow_provider_gpusched.core.errors import UnknownKeyError

    path = tmp_path / "spec.yaml"
    tried = suggested = 0
    for key, where in TYPO_KEYS.items():
        for typo in _typos(key):
            path.write_text(VALID_YAML.replace(where, where.replace(key, typo, 1), 1))
            with pytest.raises(UnknownKeyError) as err:
                spec = SweepSpec.from_yaml(str(path))
                spec.trials()
            exc = err.value
            tried += 1
            assert exc.argument.startswith(f"{path}: ") and exc.argument.endswith(typo), (typo, str(exc))
            assert exc.key == typo and "got" not in str(exc), str(exc)  # the key is the problem, not its value
            if exc.suggestion == key:
                suggested += 1
                assert f"did you mean {key}?" in str(exc)
    assert tried >= 80
    assert suggested >= 0.9 * tried, (suggested, tried)


def test_a_nested_parameter_that_is_not_a_typo_stays_nested(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(
        VALID_YAML.replace(
            "  optimizer: [sgd, adam]", "  optimizer: [sgd, adam]\n  model: {depth: [2, 4], width: {values: [8]}}"
        )
    )
    spec = SweepSpec.from_yaml(str(path))
    assert {"model.depth", "model.width"} <= set(spec.parameter_names())
