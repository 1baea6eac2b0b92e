"""Backends live in one place each (core/backends.py: the registry; core/gpu/backend.py, core/slurm/backend.py);
docs/development.md's worked example adds one, and this test runs that page's code: registered by hand and through
a real entry point, run from the terminal and by `gpusched sweep run`, its refusals said by name."""

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from airflow_provider_gpusched.core import backends
from airflow_provider_gpusched.core.backends import Backend, backend_names, get_backend, register_backend
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec
from airflow_provider_gpusched.core.sweep.running.terminal import run_sweep
from tests.cli import gpusched

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "development.md"
PACKAGE = REPO / "airflow_provider_gpusched"


def _blocks(language: str) -> list[str]:
    text = DOC.read_text()
    section = text[text.index("## Adding a backend") :]
    section = section[: section.index("\n## ", 3)]
    return re.findall(rf"```{language}\n(.*?)```", section, re.S)


def _write_package(root: Path) -> None:
    """The page's two modules as the package my_lab under ``root``."""
    core_module, airflow_module = _blocks("python")
    (root / "my_lab").mkdir(parents=True)
    (root / "my_lab" / "__init__.py").write_text("")
    (root / "my_lab" / "backends.py").write_text(core_module)
    (root / "my_lab" / "airflow_backends.py").write_text(airflow_module)


@pytest.fixture
def process_backend(tmp_path):
    """The page's core module, imported as my_lab.backends and registered (forgotten afterwards)."""
    _write_package(tmp_path / "lib")
    sys.path.insert(0, str(tmp_path / "lib"))
    try:
        from my_lab.backends import ProcessBackend

        register_backend(ProcessBackend)
        yield ProcessBackend
    finally:
        backends.unregister_backend("process")
        sys.path.remove(str(tmp_path / "lib"))
        for name in [m for m in sys.modules if m == "my_lab" or m.startswith("my_lab.")]:
            del sys.modules[name]


def _spec_data(tmp_path: Path) -> dict:
    data = yaml.safe_load(_blocks("yaml")[0])
    # the page's train.py is the reader's; here a one-line trial scores each lr, and says which GPUs it saw
    data["command"] = [
        sys.executable,
        "-c",
        "import json, os, sys; lr = float(sys.argv[1]); "
        "json.dump({'loss': abs(lr - 0.01), 'gpus': os.environ.get('CUDA_VISIBLE_DEVICES')}, open('result.json', 'w'))",
        "{lr}",
    ]
    data["results_root"] = str(tmp_path / "results")
    return data


def test_the_built_in_backends_are_registered_and_an_unknown_name_lists_them():
    assert {"local", "slurm"} <= set(backend_names())
    assert get_backend("local").name == "local" and get_backend("slurm").name == "slurm"
    with pytest.raises(InvalidArgumentError) as exc:
        get_backend("k8s", "resources.backend")
    assert str(exc.value).startswith("resources.backend: expected 'local' or 'slurm'")
    with pytest.raises(InvalidArgumentError, match="a Backend subclass with a name"):
        register_backend(object)


@pytest.mark.heavy  # 1.1 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_the_documented_backend_runs_a_sweep_from_its_yaml(process_backend, tmp_path):
    spec = SweepSpec.from_dict(_spec_data(tmp_path), where="cpu-check.yaml")
    summary = run_sweep(spec, backend="process", progress=False)
    assert summary["counts"]["succeeded"] == 3
    assert summary["best"]["params"]["lr"] == 0.01
    # no GPU: the trials ran with CUDA_VISIBLE_DEVICES empty
    results = sorted((tmp_path / "results" / "cpu-check").rglob("result.json"))
    assert len(results) == 3 and {json.loads(p.read_text())["gpus"] for p in results} == {""}


@pytest.mark.heavy  # 1.2 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_the_documented_backend_is_one_more_choice_of_gpusched_sweep_run(process_backend, tmp_path):
    path = tmp_path / "cpu-check.yaml"
    path.write_text(yaml.safe_dump(_spec_data(tmp_path)))
    done = gpusched("sweep", "run", str(path), "--backend", "process", "--json")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("{"), done.stdout
    assert json.loads(done.stdout)["counts"]["succeeded"] == 3
    wrong = gpusched("sweep", "run", str(path), "--backend", "proces")
    assert wrong.returncode == 2 and "'local', 'process', 'slurm'" in wrong.stderr


def test_the_documented_backend_refuses_what_it_cannot_do_by_name(process_backend, tmp_path):
    data = _spec_data(tmp_path)
    for resources, said in [
        ({"gpus": 1}, "resources.gpus=1: the process backend runs trials on CPUs only"),
        (
            {"gpus": 0, "partition": "gpu"},
            "resources.partition='gpu': a Slurm partition is not something the "
            "process backend honours; leave partition out for backend='process'",
        ),
    ]:
        spec = SweepSpec.from_dict({**data, "resources": resources}, where="cpu-check.yaml")
        with pytest.raises(GpuschedError, match=re.escape(said)):
            run_sweep(spec, backend="process", progress=False)
    # a spec that names the backend is checked against the registry
    spec = SweepSpec.from_dict({**data, "resources": {"gpus": 0, "backend": "process"}}, where="cpu-check.yaml")
    assert spec.resources.backend == "process"
    with pytest.raises(InvalidArgumentError, match="resources.backend: expected 'local', 'process' or 'slurm'"):
        SweepSpec.from_dict({**data, "resources": {"backend": "prcess"}}, where="cpu-check.yaml")


@pytest.mark.heavy  # 1.3 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_a_backend_installed_with_an_entry_point_is_found_by_a_fresh_gpusched(tmp_path):
    """The page's package installed the way pip would leave it (a dist-info folder naming the entry point), and a
    real `gpusched` process that finds it with no registration in code."""
    lib = tmp_path / "lib"
    _write_package(lib)
    info = lib / "my_lab-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-lab\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{backends.ENTRY_POINT_GROUP}]\nprocess = my_lab.backends:ProcessBackend\n"
    )
    path = tmp_path / "cpu-check.yaml"
    path.write_text(yaml.safe_dump(_spec_data(tmp_path)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(lib), str(REPO)])}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_provider_gpusched.cli",
            "sweep",
            "run",
            str(path),
            "--backend",
            "process",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["counts"]["succeeded"] == 3


def test_a_backend_that_cannot_be_loaded_is_said_by_name():
    register_backend("my_lab.nowhere:Missing", name="broken")
    try:
        with pytest.raises(GpuschedError, match=r"backend 'broken': cannot load 'my_lab.nowhere:Missing'"):
            get_backend("broken")
    finally:
        backends.unregister_backend("broken")


def test_every_backend_answers_what_the_product_asks():
    """The built-in ones override each question the queue, the spec and `gpusched sweep run` ask."""
    asked = ["check_resources", "rank_argv", "states", "queue_entries", "stop", "default_handle", "run_sweep"]
    for name in ("local", "slurm"):
        cls = type(get_backend(name))
        missing = [m for m in asked if getattr(cls, m) is getattr(Backend, m) and m != "check_resources"]
        assert not missing, f"{name}: {missing}"
        assert cls.handle and cls.handle_noun and cls.work_noun and cls.airflow


# -- no backend branches outside the backends -----------------------------------------------------------------
BACKEND_MODULES = {
    "core/backends.py",
    "core/gpu/backend.py",
    "core/slurm/backend.py",
    "backends/__init__.py",
    "backends/local.py",
    "backends/slurm.py",
}


def backend_name_comparisons(root: Path = PACKAGE) -> list[str]:
    """``x == "local"``, ``x != "slurm"``, ``x in ("local", "slurm")``... outside the backends' modules."""
    names = {"local", "slurm"}
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in BACKEND_MODULES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                parts = [node.left, *node.comparators]
                consts = [
                    c.value
                    for part in parts
                    for c in ([part] if isinstance(part, ast.Constant) else getattr(part, "elts", []))
                    if isinstance(c, ast.Constant)
                ]
                if names & set(consts):
                    found.append(f"{rel}:{node.lineno}")
            elif isinstance(node, ast.MatchValue) and getattr(node.value, "value", None) in names:
                found.append(f"{rel}:{node.lineno}")
    return found


@pytest.mark.heavy  # 1.0 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_no_backend_name_is_compared_outside_the_backends():
    assert backend_name_comparisons() == []


def test_the_check_finds_a_backend_branch_where_there_is_one(tmp_path):
    (tmp_path / "pools.py").write_text('def f(backend):\n    if backend == "slurm":\n        return 1\n')
    (tmp_path / "cli.py").write_text('def g(b):\n    return b in ("local", "k8s")\n')
    (tmp_path / "ok.py").write_text('DEFAULT = "local"\n')
    assert backend_name_comparisons(tmp_path) == ["cli.py:2", "pools.py:2"]
