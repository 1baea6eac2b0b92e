"""The pipeline partitioner against every case in ../shared/pipeline-partition (optimal bottleneck,
feasibility, valid schedules), the seed's example, hand-made edge cases and bad input."""

import json
from pathlib import Path

import pytest
import yaml

from airflow_provider_gpusched.core.partition import PartitionInputError, check_schedule, load_problem, partition
from airflow_provider_gpusched.core.partition.report import schedule_yaml
from tests.cli import gpusched
from tests.data.pipeline_partition import make_cluster_instance, materialize
from tests.session_files import made_once

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "dags" / "partition"


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """../shared/pipeline-partition, from the copy vendored in tests/data."""
    return made_once(tmp_path_factory, "pipeline-partition", materialize)


@pytest.fixture(scope="module")
def small_cases(shared):
    """The 998 small cases, each read once for the module: (name, expected.json, problem). Two tests solve them
    all (the default solver, and the integer program forced), and reading them is a third of the cost."""
    cases = []
    for folder in sorted((shared / "cases").glob("c*")):
        expected = json.loads((folder / "expected.json").read_text())
        cases.append((folder.name, expected, load(folder, expected["args"])))
    return cases


@pytest.fixture(scope="module")
def cluster_64(shared, tmp_path_factory):
    """The 64-host cluster-scale instance and its optimal schedule, solved once for the tests that need both."""
    folder = tmp_path_factory.mktemp("cluster64")
    problem = load(folder, make_cluster_instance(shared / "scaling", folder, hosts=64))
    return folder, problem, partition(problem)


def load(folder: Path, args: dict):
    return load_problem(
        str(folder / "models.yml"),
        str(folder / "device_types.yml"),
        str(folder / "devices.yml"),
        model=args["model"],
        batch_size=args["batch_size"],
        buffers_in=args["buffers_in"],
        buffers_out=args["buffers_out"],
        dtype=args.get("dtype", "torch.float32"),
    )


def assert_optimal(problem, schedule, feasible: bool, bottleneck: float | None, where: str):
    assert schedule.feasible == feasible, where
    if feasible:
        assert abs(schedule.bottleneck_s - bottleneck) <= 1e-9 * bottleneck, (where, schedule.bottleneck_s, bottleneck)
        recomputed = check_schedule(problem, [(s.host, s.first, s.last) for s in schedule.stages])
        assert recomputed == pytest.approx(schedule.bottleneck_s, rel=1e-12)


@pytest.mark.heavy  # 2.8 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_every_small_case_is_optimal_and_valid(small_cases):
    assert len(small_cases) == 998
    for name, expected, problem in small_cases:
        assert_optimal(problem, partition(problem), expected["feasible"], expected.get("bottleneck_s"), name)


@pytest.mark.heavy  # 0.7 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_every_scaling_case_is_optimal_and_valid(shared):
    for ref in json.loads((shared / "scaling" / "reference.json").read_text()):
        problem = load(shared / "scaling" / ref["case"], ref["args"])
        assert_optimal(problem, partition(problem), True, ref["bottleneck_s"], ref["case"])


@pytest.mark.heavy
def test_integer_program_agrees_where_the_dense_grid_would_be_used(shared, small_cases, monkeypatch):
    """Large host-count spaces use the integer program (milp.py) instead of the dense grid; force it on every
    other case (499 of the 998: its CPU is the fast tier's largest single cost; every case is solved the default
    way by the test above), so its stage-by-stage link model is checked against the optimum wherever host counts
    bind."""
    from airflow_provider_gpusched.core.partition import milp, solver

    monkeypatch.setattr(solver._Model, "dense_cells", 0)
    exact_checks = []
    check = milp.check
    monkeypatch.setattr(
        milp, "check", lambda *a, **kw: exact_checks.append(kw.get("relaxed", False)) or check(*a, **kw)
    )
    assert len(small_cases) == 998
    for name, expected, problem in small_cases[::2]:
        assert_optimal(problem, partition(problem), expected["feasible"], expected.get("bottleneck_s"), name)
    for ref in json.loads((shared / "scaling" / "reference.json").read_text()):
        if ref["case"] in ("L48_T3_D16", "L96_T4_D16"):
            problem = load(shared / "scaling" / ref["case"], ref["args"])
            assert_optimal(problem, partition(problem), True, ref["bottleneck_s"], ref["case"])
    # the integer program and its relaxation really decided cases (the others end at the relaxed bound)
    assert exact_checks.count(False) > 200 and exact_checks.count(True) > 900, (
        exact_checks.count(False),
        exact_checks.count(True),
    )


@pytest.mark.heavy  # 2.7 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
@pytest.mark.parametrize("hosts", [64, 256, 1024])
def test_cluster_scale_gets_a_proven_optimum(shared, tmp_path, request, hosts):
    """200 layers, 8 device types and 64-1,024 hosts (built from L96_T4_D64): the schedule is valid, the
    bound it comes with equals its bottleneck, and the exact check refutes the next smaller value."""
    import bisect

    from airflow_provider_gpusched.core.partition import solver

    if hosts == 64:
        _, problem, schedule = request.getfixturevalue("cluster_64")  # solved once, for the time-limit test too
    else:
        problem = load(tmp_path, make_cluster_instance(shared / "scaling", tmp_path, hosts=hosts))
        schedule = partition(problem)
    assert (problem.layers, len(problem.types), sum(len(t.hosts) for t in problem.types)) == (200, 8, hosts)
    assert schedule.optimal and schedule.gap == 0.0 and schedule.lower_bound_s == schedule.bottleneck_s
    assert check_schedule(problem, [(s.host, s.first, s.last) for s in schedule.stages]) == pytest.approx(
        schedule.bottleneck_s, rel=1e-12
    )
    model = solver._Model(problem)
    values = model.candidates()
    below = values[bisect.bisect_left(values, schedule.bottleneck_s) - 1]
    if hosts < 1024:  # host counts bind: ignoring them, the smaller value would do
        assert model.relaxed_feasible(below) and not model.is_dense()
    assert model.exact(below).proven_infeasible


@pytest.mark.heavy  # 2.3 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_time_limit_gives_the_best_schedule_found_and_a_proven_bound(cluster_64):
    folder, problem, best = cluster_64
    cut = partition(problem, time_limit=1e-9)  # out of time before the first exact check
    assert cut.feasible and not cut.optimal
    assert cut.lower_bound_s < best.bottleneck_s <= cut.bottleneck_s
    assert cut.gap == pytest.approx((cut.bottleneck_s - cut.lower_bound_s) / cut.bottleneck_s) and 0 < cut.gap < 1
    assert check_schedule(problem, [(s.host, s.first, s.last) for s in cut.stages]) == pytest.approx(
        cut.bottleneck_s, rel=1e-12
    )
    out = gpusched("partition", "-m", problem.model, "--time-limit", "1e-9", cwd=folder)
    assert out.returncode == 0, out.stderr
    assert "warning: not proven optimal: the time limit (1e-09 s) stopped the search" in out.stderr
    assert out.stdout.splitlines()[-1].startswith("# not proven optimal") and "gap" in out.stdout.splitlines()[-1]
    assert len(yaml.safe_load(out.stdout)) == len(cut.stages)  # still valid YAML, the note a comment
    out = gpusched("partition", "-m", problem.model, "--time-limit", "0", cwd=folder)
    assert out.returncode == 2 and "--time-limit: expected a number of seconds > 0, got 0.0" in out.stderr
    out = gpusched("partition", "-m", problem.model, "--json", "--time-limit", "1e-9", cwd=folder)
    doc = json.loads(out.stdout)  # the JSON says what the comment said: not proven, the bound and the gap
    assert doc["optimal"] is False and doc["bottleneck_s"] == cut.bottleneck_s
    assert doc["lower_bound_s"] == cut.lower_bound_s and doc["gap"] == cut.gap


def test_seed_example_beats_the_defective_reference(shared):
    args = {"model": "google/vit-base-patch16-224", "batch_size": 8, "buffers_in": 2, "buffers_out": 2}
    problem = load(EXAMPLES, args)
    schedule = partition(problem)
    assert schedule.bottleneck_s == pytest.approx(1.5399, abs=5e-5)  # SPEC: true optimum 1.5399 s
    upstream = yaml.safe_load((shared / "examples" / "upstream-output_vit-base-patch16-224.yml").read_text())
    upstream_true = check_schedule(problem, [(h, *r) for stage in upstream for h, r in stage.items()])
    assert schedule.bottleneck_s < upstream_true  # the reference's schedule, costed correctly, is worse
    for model in ("google/vit-large-patch16-224",):
        expected = yaml.safe_load((shared / "examples" / f"expected_{model.split('/')[1]}.yml").read_text())
        problem = load(EXAMPLES, {**args, "model": model})
        best = check_schedule(problem, [(h, *r) for stage in expected for h, r in stage.items()])
        assert_optimal(problem, partition(problem), True, best, model)
    assert schedule_yaml(partition(load(EXAMPLES, {**args, "model": "DummyModel"}))) == "[]"


def write_inputs(tmp_path, *, layers=3, mem=(10.0, 10.0, 10.0), params_out=(100, 200, 300), types=None, devices=None):
    types = (
        types
        if types is not None
        else {
            "fast": {
                "bw_Mbps": 1000,
                "mem_MB": 100,
                "model_profiles": {"m": [{"batch_size": 8, "dtype": "torch.float32", "time_s": [1.0] * layers}]},
            },
            "bare": {"bw_Mbps": 1000, "mem_MB": 100, "model_profiles": None},
        }
    )
    devices = devices if devices is not None else {"fast": ["f0", "f1", "f2"], "bare": ["b0"]}
    (tmp_path / "models.yml").write_text(
        yaml.safe_dump(
            {"m": {"layers": layers, "mem_MB": list(mem), "parameters_in": 50, "parameters_out": list(params_out)}}
        )
    )
    (tmp_path / "device_types.yml").write_text(yaml.safe_dump(types))
    (tmp_path / "devices.yml").write_text(yaml.safe_dump(devices))
    return tmp_path


def problem_in(folder, **kw):
    args = {"model": "m", "batch_size": 8, "buffers_in": 2, "buffers_out": 2, **kw}
    return load(folder, args)


def test_one_layer(tmp_path):
    p = problem_in(write_inputs(tmp_path, layers=1, mem=[5.0], params_out=[10]))
    s = partition(p)
    assert [(x.host, x.first, x.last) for x in s.stages] == [("f0", 1, 1)] and s.bottleneck_s == 1.0


def test_no_devices_and_a_type_without_profile(tmp_path):
    p = problem_in(write_inputs(tmp_path, devices={"fast": [], "bare": ["b0"]}))
    assert p.skipped_types == {"bare": "no m profile for torch.float32, batch size 8"}
    assert not partition(p).feasible and schedule_yaml(partition(p)) == "[]"
    p = problem_in(write_inputs(tmp_path, devices={}))
    assert not partition(p).feasible


def test_parameters_out_shorter_than_layers_is_cycled(tmp_path):
    p = problem_in(write_inputs(tmp_path, layers=5, mem=[1.0] * 5, params_out=[100, 7]))
    assert p.out_bytes == [4 * 8 * v for v in (100, 7, 100, 7, 100)]
    assert partition(p).feasible


def test_half_precision_halves_the_activation_bytes(tmp_path):
    folder = write_inputs(tmp_path)
    types = yaml.safe_load((folder / "device_types.yml").read_text())
    types["fast"]["model_profiles"]["m"].append({"batch_size": 8, "dtype": "torch.bfloat16", "time_s": [0.5] * 3})
    (folder / "device_types.yml").write_text(yaml.safe_dump(types))
    p32, p16 = problem_in(folder), problem_in(folder, dtype="torch.bfloat16")
    assert p16.out_bytes == [b / 2 for b in p32.out_bytes]
    assert partition(p16).bottleneck_s == 0.5


def test_memory_limit_is_strict_and_forces_more_stages(tmp_path):
    # each layer 40 MB: two layers (80 MB + buffers) do not fit in 100 MB, one does
    p = problem_in(write_inputs(tmp_path, mem=[40.0, 40.0, 40.0]))
    s = partition(p)
    assert [(x.first, x.last) for x in s.stages] == [(1, 1), (2, 2), (3, 3)]
    assert all(x.memory_bytes < x.memory_limit_bytes for x in s.stages)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda f: (f / "devices.yml").unlink(), "devices.yml: devices file not found"),
        (
            lambda f: (f / "models.yml").write_text(
                "m: {layers: 3, mem_MB: [1, 2], parameters_in: 5, parameters_out: [1]}"
            ),
            "models.yml: m.mem_MB: expected 3 entries \\(layers\\), got 2",
        ),
        (
            lambda f: (f / "models.yml").write_text(
                "m: {layers: 2, mem_MB: [1, 2], parameters_in: 5, parameters_out: [1, 2, 3]}"
            ),
            "models.yml: m.parameters_out: expected at most 2 entries \\(layers\\), got 3",
        ),
        (
            lambda f: (f / "models.yml").write_text(
                "m: {layers: 2, mem_MB: [1, -2], parameters_in: 5, parameters_out: [1]}"
            ),
            r"models.yml: m.mem_MB\[1\]: expected a number >= 0, got -2",
        ),
        (
            lambda f: (f / "device_types.yml").write_text(
                "bare: {bw_Mbps: 1, mem_MB: 1}\nfast: {bw_Mbps: 0, mem_MB: 100, model_profiles: {m: [{batch_size: 8, dtype: torch.float32, time_s: [1, 1, 1]}]}}"
            ),
            r"device_types.yml: fast.bw_Mbps: expected a number > 0, got 0",
        ),
        (
            lambda f: (f / "device_types.yml").write_text(
                "bare: {bw_Mbps: 1, mem_MB: 1}\nfast: {bw_Mbps: 10, mem_MB: 100, model_profiles: {m: [{batch_size: 8, dtype: torch.float32, time_s: [1]}]}}"
            ),
            r"fast.model_profiles.m\[0\].time_s: expected 3 entries \(layers\), got 1",
        ),
        (
            lambda f: (f / "device_types.yml").write_text(
                "bare: {bw_Mbps: 1, mem_MB: 1}\nfast: {bw_Mbps: 10, mem_MB: 100, model_profiles: {m: 5}}"
            ),
            r"device_types.yml: fast.model_profiles.m: expected a list of profiles \(batch_size, dtype, time_s\), got int",
        ),
        (
            lambda f: (f / "device_types.yml").write_text(
                "bare: {bw_Mbps: 1, mem_MB: 1}\nfast: {bw_Mbps: 10, mem_MB: 100, model_profiles: [5]}"
            ),
            r"device_types.yml: fast.model_profiles: expected a mapping of model name -> list of profiles, got list",
        ),
        (lambda f: (f / "models.yml").write_text("m: [unclosed"), "models.yml: not valid YAML"),
        (
            lambda f: (f / "devices.yml").write_text("ghost: [g0]"),
            "devices.yml: ghost: device type not in .*device_types.yml",
        ),
        (
            lambda f: (f / "devices.yml").write_text('fast: ["evil\\nhost"]'),
            r"devices.yml: fast: host 'evil\\nhost': expected a host name without control characters",
        ),
    ],
)
def test_bad_input_names_file_and_key(tmp_path, change, message):
    folder = write_inputs(tmp_path)
    change(folder)
    with pytest.raises(PartitionInputError, match=message):
        problem_in(folder)


def test_bad_arguments(tmp_path):
    folder = write_inputs(tmp_path)
    with pytest.raises(PartitionInputError, match="unknown model 'x' \\(models in the file: m\\)"):
        problem_in(folder, model="x")
    with pytest.raises(PartitionInputError, match="dtype: 'torch.int8' is not supported"):
        problem_in(folder, dtype="torch.int8")
    with pytest.raises(PartitionInputError, match=r"batch size \(-b\): expected a whole number > 0, got 0"):
        problem_in(folder, batch_size=0)


def test_cli_defaults_output_format_json_explain_and_exit_codes(tmp_path):
    out = gpusched("partition", cwd=EXAMPLES)  # the reference's default files and model
    assert out.returncode == 0, out.stderr
    stages = yaml.safe_load(out.stdout)
    assert out.stdout.splitlines()[0] == "- mb-0: [1, 5]" and len(stages) == 8
    data = json.loads(gpusched("partition", "--json", "-m", "google/vit-large-patch16-224", cwd=EXAMPLES).stdout)
    assert data["feasible"] and data["stages"][data["bottleneck_stage"] - 1]["time_s"] == data["bottleneck_s"]
    assert data["optimal"] is True and data["gap"] == 0.0 and data["lower_bound_s"] == data["bottleneck_s"]
    explained = gpusched("partition", "--explain", "-b", "8", "-i", "2", "-o", "2", cwd=EXAMPLES).stdout
    assert "<- bottleneck" in explained and yaml.safe_load(explained) == stages  # the table is YAML comments
    assert gpusched("partition", "-m", "DummyModel", cwd=EXAMPLES).stdout.strip() == "[]"
    missing = gpusched("partition", cwd=tmp_path)
    assert missing.returncode == 3 and missing.stderr.strip() == "gpusched: error: models.yml: models file not found"
    bad = gpusched("partition", "-m", "nope", cwd=EXAMPLES)
    assert bad.returncode == 2 and "unknown model 'nope'" in bad.stderr and "Traceback" not in bad.stderr
    assert gpusched("partition", "-b", "-3", cwd=EXAMPLES).returncode == 2


def test_host_names_yaml_would_misread_are_quoted_on_one_line(tmp_path):
    from airflow_provider_gpusched.core.partition.report import schedule_yaml

    hosts = ["a: b", "# not a comment", "123", "- dash", "yes"]
    p = problem_in(write_inputs(tmp_path, mem=[1.0] * 3, devices={"fast": hosts}))
    text = schedule_yaml(partition(p))
    parsed = yaml.safe_load(text)
    assert len(text.splitlines()) == len(parsed)
    assert all(isinstance(next(iter(stage)), str) and next(iter(stage)) in hosts for stage in parsed)


def test_the_splice_of_two_paths_is_the_first_that_fits_every_types_hosts():
    """The time-limit heuristic's splice (milp._crossover, host counts packed into one integer per path) against
    the plain search it replaces: the same splice, in path and boundary order, or none where none fits."""
    import random

    from airflow_provider_gpusched.core.partition.milp import _crossover

    def plain(paths, caps):
        for a, first in enumerate(paths):
            for b, second in enumerate(paths):
                if a == b:
                    continue
                ends_b = {0} | {last for _, _, last in second}
                for boundary in [0] + [last for _, _, last in first]:
                    if boundary not in ends_b:
                        continue
                    splice = [st for st in first if st[2] <= boundary] + [st for st in second if st[1] > boundary]
                    if all(sum(1 for k, _, _ in splice if k == t) <= caps[t] for t in range(len(caps))):
                        return splice
        return None

    rng, found = random.Random(7), 0
    for _ in range(3000):
        layers, types = rng.randint(2, 12), rng.randint(1, 4)
        caps = [rng.randint(0, 4) for _ in range(types)]
        paths = []
        for _ in range(rng.randint(0, 6)):
            bounds = [0, *sorted(rng.sample(range(1, layers), rng.randint(0, layers - 1))), layers]
            paths.append([(rng.randrange(types), bounds[i] + 1, bounds[i + 1]) for i in range(len(bounds) - 1)])
        expected = plain(paths, caps)
        assert _crossover(paths, caps) == expected, (paths, caps)
        found += expected is not None
    assert 1000 < found < 2900  # both answers were asked for many times
    # counts near the field width do not spill into the next type's field
    big = [(0, 1, 1), (1, 2, 2)]
    assert _crossover([big, big], [2**31 - 1, 0]) is None
    assert _crossover([big, big], [1, 1]) == big
