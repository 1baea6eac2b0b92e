"""`gpusched profile` on real PyTorch models (the examples extra's CPU build): the partitioner's two files
written and merged, `gpusched partition` reading them, and bad input named. Also the stage plan (neighbour
addresses) and the example pipeline runtime run as two local processes."""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from airflow_provider_gpusched.core.partition import check_schedule, load_problem, partition
from airflow_provider_gpusched.core.partition.stages import stage_plan

from ..cli import gpusched

REPO = Path(__file__).resolve().parents[2]


def gpusched_process(*args, cwd, env=None):
    """``gpusched ARGS`` as its own process (``python -m airflow_provider_gpusched.cli``)."""
    return subprocess.run(
        [sys.executable, "-m", "airflow_provider_gpusched.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.heavy  # 0.6 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_profile_writes_both_files_and_partition_reads_them(tmp_path):
    from airflow_provider_gpusched.core.partition.example_models import tiny_vit

    out = gpusched(
        "profile",
        "tiny-vit",
        "--device-type",
        "cpu-a",
        "--bw-mbps",
        "1000",
        "--mem-mb",
        "12",
        "--repeat",
        "2",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert "tiny-vit: 8 layers, torch.float32, micro-batch 8, input 3,64,64, measured on cpu" in out.stdout
    out = gpusched(
        "profile",
        "tiny-vit",
        "--device-type",
        "cpu-b",
        "--bw-mbps",
        "500",
        "--mem-mb",
        "12",
        "--repeat",
        "2",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    entry = yaml.safe_load((tmp_path / "models.yml").read_text())["tiny-vit"]
    model = tiny_vit()
    assert entry["layers"] == len(model) == 8
    assert entry["parameters_in"] == 3 * 64 * 64
    assert entry["parameters_out"] == [64 * 192] * 7 + [10]  # 64 patches of width 192, then 10 classes
    weights = [sum(p.numel() * 4 for p in layer.parameters()) / 2**20 for layer in model]
    assert entry["weights_MB"] == pytest.approx(weights, abs=1e-5)
    assert all(a > 0 for a in entry["activations_MB"][:-1])  # the blocks' intermediate tensors
    assert entry["mem_MB"] == pytest.approx(
        [w + a for w, a in zip(entry["weights_MB"], entry["activations_MB"], strict=True)], abs=2e-6
    )
    types = yaml.safe_load((tmp_path / "device_types.yml").read_text())
    assert set(types) == {"cpu-a", "cpu-b"} and types["cpu-b"]["bw_Mbps"] == 500
    profile = types["cpu-a"]["model_profiles"]["tiny-vit"]
    assert len(profile) == 1 and profile[0]["dtype"] == "torch.float32" and profile[0]["batch_size"] == 8
    assert len(profile[0]["time_s"]) == 8 and all(t > 0 for t in profile[0]["time_s"])
    # the six transformer blocks take longer than the classifier head (~50x each on a CPU)
    assert sum(profile[0]["time_s"][1:7]) > profile[0]["time_s"][7]
    (tmp_path / "devices.yml").write_text("cpu-a: [n1]\ncpu-b: [n2]\n")
    out = gpusched("partition", "-m", "tiny-vit", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["feasible"] and doc["optimal"] and len(doc["stages"]) == 2  # 12 MiB holds about half the model
    problem = load_problem(
        str(tmp_path / "models.yml"),
        str(tmp_path / "device_types.yml"),
        str(tmp_path / "devices.yml"),
        model="tiny-vit",
    )
    stages = [(s["host"], *s["layers"]) for s in doc["stages"]]
    assert check_schedule(problem, stages) == pytest.approx(doc["bottleneck_s"])
    assert partition(problem).bottleneck_s == pytest.approx(doc["bottleneck_s"])


def test_profile_merges_with_files_holding_other_device_types(tmp_path):
    for name in ("models.yml", "device_types.yml"):
        shutil.copy(REPO / "dags" / "partition" / name, tmp_path / name)
    before = yaml.safe_load((tmp_path / "device_types.yml").read_text())
    for batch in ("8", "8", "4"):  # the same profile again replaces it; another batch size adds one
        out = gpusched(
            "profile", "mlp", "--device-type", "Minnowboard-E3845", "-b", batch, "--repeat", "1", cwd=tmp_path
        )
        assert out.returncode == 0, out.stderr
    after = yaml.safe_load((tmp_path / "device_types.yml").read_text())
    assert set(after) == set(before)
    for name, entry in before.items():  # the seed's profiles are all still there
        for model, profiles in (entry.get("model_profiles") or {}).items():
            assert after[name]["model_profiles"][model] == profiles
    mb = after["Minnowboard-E3845"]
    assert (mb["bw_Mbps"], mb["mem_MB"]) == (
        before["Minnowboard-E3845"]["bw_Mbps"],
        before["Minnowboard-E3845"]["mem_MB"],
    )  # kept: not given
    assert [(p["batch_size"], len(p["time_s"])) for p in mb["model_profiles"]["mlp"]] == [(8, 5), (4, 5)]
    models = yaml.safe_load((tmp_path / "models.yml").read_text())
    assert "google/vit-base-patch16-224" in models and models["mlp"]["layers"] == 5


def test_profile_a_model_from_a_module_of_the_user(tmp_path):
    (tmp_path / "mymodels.py").write_text(
        "import torch\n"
        "def build():\n"
        "    return torch.nn.Sequential(torch.nn.Conv1d(2, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),\n"
        "                               torch.nn.Linear(4 * 14, 3))\n"
        "def not_a_sequence():\n"
        "    return torch.nn.Linear(3, 3)\n"
    )
    out = gpusched(
        "profile",
        "mymodels:build",
        "--input-shape",
        "2,16",
        "--device-type",
        "cpu",
        "--bw-mbps",
        "100",
        "--name",
        "conv1d",
        cwd=tmp_path,
        pythonpath=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    entry = yaml.safe_load((tmp_path / "models.yml").read_text())["conv1d"]
    assert (entry["layers"], entry["parameters_in"], entry["parameters_out"]) == (4, 32, [56, 56, 56, 3])
    assert entry["layer_names"] == ["Conv1d", "ReLU", "Flatten", "Linear"]
    out = gpusched(
        "profile",
        "mymodels:not_a_sequence",
        "--input-shape",
        "3",
        "--device-type",
        "cpu",
        "--bw-mbps",
        "100",
        cwd=tmp_path,
        pythonpath=tmp_path,
    )
    assert out.returncode == 2
    assert "model 'mymodels:not_a_sequence': expected an nn.Sequential (or a list of modules)" in out.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["no_such_module_x:build", "--input-shape", "3"],
            "model 'no_such_module_x:build': cannot import module 'no_such_module_x' (ModuleNotFoundError",
        ),
        (
            ["json:no_such_function", "--input-shape", "3"],
            "model 'json:no_such_function': module 'json' has no attribute",
        ),
        (["resnet"], "model 'resnet': expected a built-in model (mlp, convnet, tiny-vit) or 'package.module:callable'"),
        (
            ["tiny-vit", "--input-shape", "3,32,32"],
            "input shape 3,32,32: does not fit model 'tiny-vit': layer 1 of 8 (PatchEmbedding) got (8, 3, 32, 32)",
        ),
        (["mlp", "--input-shape", "3,x"], "input shape: expected one sample's shape as positive whole numbers"),
        (["mlp", "-d", "torch.int8"], "dtype: 'torch.int8' is not supported"),
        (["mlp", "--device", "tpu"], "device: expected auto, cpu, cuda or cuda:N, got 'tpu'"),
        (["mlp", "--bw-mbps", "0"], "--bw-mbps: expected a number > 0, got 0.0"),
    ],
)
def test_profile_bad_input_is_named(tmp_path, args, message):
    bandwidth = [] if "--bw-mbps" in args else ["--bw-mbps", "100"]
    out = gpusched("profile", *args, "--device-type", "t", *bandwidth, cwd=tmp_path)
    assert out.returncode == 2, out
    assert message in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert not (tmp_path / "models.yml").exists()  # nothing half-written


@pytest.mark.heavy  # 3.0 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_profile_has_a_time_limit_and_checks_its_arguments_before_measuring(tmp_path):
    """Issue 53, item 7: a model that hangs hung the command; a missing --bw-mbps was said after 61 s of
    measuring. Now the limit stops it (exit 124, said), and the missing bandwidth is said before anything runs."""
    import time

    (tmp_path / "hangs.py").write_text(
        "import time, torch\n"
        "class Hang(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        time.sleep(3600)\n"
        "def build():\n"
        "    return torch.nn.Sequential(torch.nn.Linear(3, 3), Hang())\n"
    )
    env = {"PYTHONPATH": str(tmp_path)}
    started = time.monotonic()
    out = gpusched_process(  # a process of its own: the limit stops a process that hangs
        "profile",
        "hangs:build",
        "--input-shape",
        "3",
        "--device-type",
        "cpu",
        "--bw-mbps",
        "100",
        "--time-limit",
        "3",
        cwd=tmp_path,
        env=env,
    )
    assert out.returncode == 124 and time.monotonic() - started < 60, out
    assert "profiling hangs:build took longer than 3s (--time-limit): stopped" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "models.yml").exists()
    started = time.monotonic()
    out = gpusched(
        "profile", "hangs:build", "--input-shape", "3", "--device-type", "new-type", cwd=tmp_path, pythonpath=tmp_path
    )
    assert out.returncode == 2 and time.monotonic() - started < 30, out
    assert (
        "device_types.yml: new-type: a new device type needs its link bandwidth (--bw-mbps, in 2^20 bits/s); "
        "nothing was measured"
    ) in out.stderr


def test_profile_refuses_a_layer_count_that_disagrees_with_the_files(tmp_path):
    assert (
        gpusched("profile", "mlp", "--device-type", "a", "--bw-mbps", "100", "--repeat", "1", cwd=tmp_path).returncode
        == 0
    )
    models_before = (tmp_path / "models.yml").read_text()
    out = gpusched("profile", "tiny-vit", "--name", "mlp", "--device-type", "a", "--repeat", "1", cwd=tmp_path)
    assert out.returncode == 2
    assert (
        "models.yml: mlp.layers: the file says 5, the profiled model has 8 layers; profile it under another "
        "name (--name)" in out.stderr
    )
    types = yaml.safe_load((tmp_path / "device_types.yml").read_text())
    types["b"] = {
        "bw_Mbps": 10,
        "mem_MB": 100,
        "model_profiles": {"mlp": [{"batch_size": 2, "dtype": "torch.float32", "time_s": [0.1] * 7}]},
    }
    (tmp_path / "device_types.yml").write_text(yaml.safe_dump(types))
    out = gpusched("profile", "mlp", "--device-type", "a", "--repeat", "1", cwd=tmp_path)
    assert out.returncode == 2
    assert "device_types.yml: b.model_profiles.mlp[0].time_s: 7 entries, the profiled model has 5 layers" in out.stderr
    assert (tmp_path / "models.yml").read_text() == models_before
    out = gpusched("profile", "mlp", "--name", "other", "--device-type", "new-type", "--repeat", "1", cwd=tmp_path)
    assert out.returncode == 2 and "new-type: a new device type needs its link bandwidth (--bw-mbps" in out.stderr


def test_stage_plan_gives_each_stage_its_neighbours_addresses():
    stages = [{"host": "n1", "layers": [1, 3]}, {"host": "n2", "layers": [4, 6]}, {"host": "n3", "layers": [7, 8]}]
    plan = stage_plan(stages, base_port=30000, address_of={"n3": "10.0.0.3"})
    assert [(p["GPUSCHED_STAGE_PREV_ADDR"], p["GPUSCHED_STAGE_ADDR"], p["GPUSCHED_STAGE_NEXT_ADDR"]) for p in plan] == [
        ("", "n1:30000", "n2:30001"),
        ("n1:30000", "n2:30001", "10.0.0.3:30002"),
        ("n2:30001", "10.0.0.3:30002", ""),
    ]
    assert [
        (
            p["GPUSCHED_STAGE"],
            p["GPUSCHED_STAGES"],
            p["GPUSCHED_STAGE_FIRST"],
            p["GPUSCHED_STAGE_LAST"],
            p["GPUSCHED_STAGE_HOST"],
        )
        for p in plan
    ][2] == ("3", "3", "7", "8", "n3")
    with pytest.raises(ValueError, match=r"base_port: expected a port from 1024 to 65532, got 80"):
        stage_plan(stages, base_port=80)
    with pytest.raises(ValueError, match=r"stage 1: host 'n1; rm -rf': expected a host name"):
        stage_plan(stages, address_of={"n1": "n1; rm -rf"})


@pytest.mark.heavy  # two stage processes that import PyTorch: 4.3 s of CPU
def test_the_example_runtime_streams_through_two_local_stages_and_matches_the_whole_model(tmp_path):
    import socket

    from airflow_provider_gpusched.examples.pipeline_stage import reference_output

    with socket.socket() as s:  # a free port pair on this machine for the two stages
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    port = port if port < 65000 else 40000
    plan = stage_plan(
        [{"host": "a", "layers": [1, 3]}, {"host": "b", "layers": [4, 5]}],
        base_port=port,
        address_of={"a": "127.0.0.1", "b": "127.0.0.1"},
    )
    command = [
        sys.executable,
        "-m",
        "airflow_provider_gpusched.examples.pipeline_stage",
        "--model",
        "mlp",
        "--microbatches",
        "5",
        "--result",
        str(tmp_path / "out.json"),
    ]
    procs = [
        subprocess.Popen(
            command, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for env in reversed(plan)
    ]
    outputs = [p.communicate(timeout=180)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    assert "stage 2: the previous stage connected from 127.0.0.1" in outputs[0]
    got = json.loads((tmp_path / "out.json").read_text())
    want = reference_output("mlp", microbatches=5)
    assert got["microbatches"] == 5 and math.isclose(got["sum"], want["sum"], rel_tol=1e-9, abs_tol=1e-9)
    assert got["first_row"] == pytest.approx(want["first_row"], rel=1e-6)


def test_profiles_written_at_once_from_two_hosts_both_land(tmp_path):
    """Each device type is profiled on its own host, often into the same shared folder at the same time: the
    read-merge-write is under a lock on the folder, so neither profile is lost. Three processes write at once
    (the profile measured once, here: measuring is not what this checks, and each process would spend 2 s of CPU
    importing PyTorch)."""
    import dataclasses

    from airflow_provider_gpusched.core.partition.profile import profile_model

    profile = json.dumps(dataclasses.asdict(profile_model("mlp", repeat=1)))
    writer = (
        "import json, sys\n"
        "from airflow_provider_gpusched.core.partition.profile import LayerProfile, ModelProfile, write_profile\n"
        "data = json.loads(sys.argv[2])\n"
        "data.update(layers=[LayerProfile(**layer) for layer in data['layers']], input_shape=tuple(data['input_shape']))\n"
        "write_profile(ModelProfile(**data), models_file='models.yml', device_types_file='device_types.yml',\n"
        "              device_type=sys.argv[1], bw_mbps=100)\n"
        "assert 'torch' not in sys.modules\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", writer, name, profile],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("t1", "t2", "t3")
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    types = yaml.safe_load((tmp_path / "device_types.yml").read_text())
    assert sorted(types) == ["t1", "t2", "t3"]
    assert all(len(types[t]["model_profiles"]["mlp"]) == 1 for t in types)
