"""The sweep trial contract: the trial runner's command lines are built and parsed in one module, the session
names manifests, and the array spec and per-backend resource arguments come from the core."""

import pytest

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.slurm.job import SlurmJobSpec, array_range, parse_array_indices
from airflow_provider_gpusched.core.sweep import SweepSpec
from airflow_provider_gpusched.core.sweep.parts.resources import TrialResources
from airflow_provider_gpusched.core.sweep.running.session import SweepSession
from airflow_provider_gpusched.core.sweep.running.trial_run import (
    RUNNER_MODULE,
    TrialSet,
    chunk_argv,
    group_argv,
    main,
    parse_runner_args,
    trial_argv,
    trial_set,
)


@pytest.fixture
def manifest(tmp_path):
    spec = SweepSpec(name="contract", test_config=[{"x": [1, 2, 3, 4, 5]}], command=["true", "{x}"])
    return SweepSession(spec, str(tmp_path)).prepare(chunk_size=2, run="manual__2026-11-23T00:00:00+00:00")


def test_every_command_form_parses_back_to_its_trials(manifest):
    t = manifest.trials
    for argv, expected in (
        (trial_argv(manifest, t[3], "py"), [t[3]]),
        (group_argv(manifest, t[:3], "py"), t[:3]),
        (group_argv(manifest, t[4:], "py"), [t[4]]),
        (chunk_argv(manifest, 1, "py"), t[2:4]),
    ):
        assert argv[:3] == ["py", "-m", RUNNER_MODULE]
        command = parse_runner_args(argv[3:])
        assert command.manifest == manifest.path and command.trials(manifest) == expected, argv


def test_a_trial_set_is_data_that_reads_back_to_its_trials(manifest):
    """What a trial operator gets instead of parsing its command line: the manifest and the ids (or a chunk)."""
    t = manifest.trials
    for record, expected in (
        (trial_set(manifest, [t[3]]), [t[3]]),
        (trial_set(manifest, t[:3]), t[:3]),
        (trial_set(manifest, chunk=1), t[2:4]),
    ):
        found = TrialSet.from_record(record).read()
        assert found[0].path == manifest.path and found[1] == expected, record
    assert trial_set(manifest, [t[0]]) == {"manifest": manifest.path, "ids": [t[0].trial_id]}


@pytest.mark.parametrize(
    "record, problem",
    [
        ("m.json", r"trials: expected \{manifest: PATH"),
        ({"manifest": "m.json"}, r"trials.ids: expected a non-empty"),
        (
            {"manifest": "m.json", "ids": ["a"], "chunk": 1},
            r"trials.chunk: expected a chunk number >= 0 \(and no ids\)",
        ),
        ({"manifest": "", "ids": ["a"]}, "trials.manifest: expected a manifest path"),
        ({"manifest": "m.json", "chunk": True}, "trials.chunk"),
        ({"manifest": "m.json", "ids": ["a"], "x": 1}, "trials.x"),
    ],
)
def test_a_bad_trial_set_record_is_named(record, problem):
    with pytest.raises(InvalidArgumentError, match=problem):
        TrialSet.from_record(record)


def test_the_session_names_the_manifest_of_each_run(manifest, tmp_path):
    session = SweepSession(SweepSpec(name="contract", test_config=[{"x": [1]}], command=["true"]), str(tmp_path))
    assert session.manifest_path(run="manual__2026-11-23T00:00:00+00:00") == manifest.path
    assert session.manifest(run="manual__2026-11-23T00:00:00+00:00").trials == manifest.trials
    assert session.manifest_path(run="other") != manifest.path
    assert session.manifest_path(2, "r").endswith("round-002.manifest.json")


@pytest.mark.parametrize(
    "args, problem",
    [
        (["m.json", "--chunk"], "--chunk"),
        (["m.json", "--chunk", "x"], "--chunk"),
        (["m.json", "--ids", ""], "--ids"),
        (["m.json", "id", "label", "extra"], "trial runner arguments"),
        (["m.json"], "trial runner arguments"),
    ],
)
def test_bad_runner_arguments_are_named(args, problem):
    with pytest.raises(InvalidArgumentError, match=problem):
        parse_runner_args(args)


def test_an_array_task_outside_its_chunk_is_a_usage_error(manifest, monkeypatch, capsys):
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    assert main([manifest.path, "--chunk", "0"]) == 2
    assert "beyond chunk 0 (2 trials)" in capsys.readouterr().err
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID")
    assert main([manifest.path, "--chunk", "0"]) == 2
    assert "needs SLURM_ARRAY_TASK_ID" in capsys.readouterr().err


def test_array_range_is_a_valid_slurm_array():
    assert array_range(5) == "0-4" and array_range(5, 2) == "0-4%2" and array_range(1) == "0-0"
    assert parse_array_indices(array_range(7, 3)) == list(range(7))
    SlurmJobSpec(command=["true"], array=array_range(30, 4))  # accepted by the job spec's own check
    for bad in ((0, None), (3, 0), (True, None)):
        with pytest.raises(InvalidArgumentError):
            array_range(*bad)


def test_trial_resources_become_each_backends_arguments():
    r = TrialResources(
        gpus=0,
        gpu_memory="6GiB",
        cpus=4,
        mem="8GiB",
        partition="batch",
        time_limit="1:00:00",
        setup=["module load cuda"],
        job_class="idle",
        priority=3,
        env={"A": "1"},
    )
    r.check("resources")
    # one vocabulary: the sweep's names are the operators' names
    assert r.local_gpu_arguments() == {
        "gpus": 1,
        "gpu_memory": "6GiB",
        "mem": "8GiB",
        "job_class": "idle",
        "priority": 3,
        "env": {"A": "1"},
        "devices": None,
        "device_groups": None,
        "setup": ["module load cuda"],
        "cpus": 4,
        "time_limit": "1:00:00",
        "load_stage": False,
        "max_waiting": None,
    }
    assert r.slurm_arguments() == {
        "gpus": None,
        "cpus": 4,
        "mem": "8GiB",
        "partition": "batch",
        "qos": None,
        "time_limit": "1:00:00",
        "setup": ["module load cuda"],
        "job_class": "idle",
        "priority": 3,
        "env": {"A": "1"},
    }  # no shape given: none passed
    multi = TrialResources(nodes=2, gpus_per_node=4, distributed="torchrun", rank_exit_grace=30)
    multi.check("resources")
    wanted = multi.slurm_arguments()
    assert (wanted["nodes"], wanted["gpus"], wanted["ntasks_per_node"]) == (2, 4, 4)
    shaped = TrialResources(
        nodes="2-4",
        gpus=2,
        cpus_per_gpu=4,
        exclusive=True,
        constraint="a100",
        nodelist=["n1", "n2"],
        exclude="n9",
        gpus_per_task=1,
    )
    shaped.check("resources")
    assert {k: v for k, v in shaped.slurm_arguments().items() if k in shaped.SLURM_SHAPE} == {
        "nodes": "2-4",
        "cpus_per_gpu": 4,
        "exclusive": True,
        "constraint": "a100",
        "nodelist": ["n1", "n2"],
        "exclude": "n9",
        "gpus_per_task": 1,
    }
    assert multi.distributed_settings("slurm") == {
        "mode": "torchrun",
        "backend": "slurm",
        "grace": 30.0,
        "nproc_per_node": 4,
    }
    assert TrialResources(gpus=2).distributed_settings("local") is None
    assert TrialResources(gpus_per_node=3).local_gpu_arguments()["gpus"] == 3


@pytest.mark.parametrize(
    "bad, argument",
    [
        ({"nodes": 0}, "resources.nodes"),
        ({"nodes": "x"}, "resources.nodes"),
        ({"gpus_per_node": -1}, "resources.gpus_per_node"),
        ({"gpus": 2, "gpus_per_node": 4}, "resources.gpus_per_node"),
        ({"distributed": "mpirun"}, "resources.distributed"),
        ({"rank_exit_grace": -5}, "resources.rank_exit_grace"),
        ({"constraint": "a b"}, "resources.constraint"),
        ({"nodelist": ["-x"]}, "resources.nodelist"),
        ({"exclusive": 1}, "resources.exclusive"),
        ({"cpus": 2, "cpus_per_gpu": 2}, "resources.cpus_per_gpu/resources.cpus"),
        ({"gpus_per_task": 0}, "resources.gpus_per_task"),
        ({"ntasks_per_node": 0}, "resources.ntasks_per_node"),
        ({"nodes": "3-1"}, "resources.nodes"),
    ],
)
def test_multi_node_trial_resources_are_checked_by_name(bad, argument):
    with pytest.raises(InvalidArgumentError) as err:
        TrialResources(**bad).check("resources")
    assert err.value.argument == argument
