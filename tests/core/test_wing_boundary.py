"""A backend is one wing (issue 78): its core package and its Airflow modules (scripts/wing_figures.py's WINGS).
No module outside a wing imports the wing's modules but those listed here, each with its reason, so the boundary
cannot grow unnoticed (lazy and ``if TYPE_CHECKING:`` imports count; a moved module's alias does not)."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "wing_figures.py"

#: the GPU mechanics (core/gpu) that the local backend runs on are also what this host's GPU features are built on
_ON_GPUS = "built on this host's GPU mechanics (core/gpu), not on the local backend"

#: wing -> {module outside it: why it may import the wing}; module names relative to the package
ALLOWED: dict[str, dict[str, str]] = {
    "local": {
        "cli": "`gpusched gpus`, `gpusched lease` and `gpusched fleet`: the commands of this host's GPUs",
        "cli_options": "the CLI's lease directory and simulated GPUs options (`--state-dir`, `--simulate`)",
        "cli_queue": "`gpusched queue`: lists this host's leases beside the backends' work (its own task)",
        "core.board": _ON_GPUS + ": the GPU board view (issue 78 item 5 moves it above the gpu package)",
        "core.fleet": _ON_GPUS + ": several GPU hosts as one pool",
        "core.quota.host": _ON_GPUS + ": the quota gate of a host's GPUs",
        "core.sweep.parts.resources": "a trial's device_groups are checked by the GPU request's own rules",
        "core.sweep.running.terminal": "`gpusched sweep run`'s default lease manager (its home is the local wing)",
        "fleet": _ON_GPUS + ": the fleet's Airflow side (EdgeExecutor workers)",
        "operators.queue_stops": "the stop orders live in the local lease directory",
        "plugins.api.gpus": "the UI's GPUs tab",
        "plugins.api.telemetry": "the UI's telemetry of this host's GPUs",
        "settings": "the lease directory and shared-leases options of the [gpusched] section",
    },
    "slurm": {
        "cli": "`gpusched slurm`: the Slurm commands",
        "plugins.api.slurm": "the UI's Slurm tab",
    },
}


@pytest.fixture(scope="module")
def wings():
    spec = importlib.util.spec_from_file_location("wing_figures", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("wing", sorted(ALLOWED))
def test_nothing_outside_a_wing_imports_it_but_the_allowed(wings, wing):
    importers = wings.outside_imports()[wing]
    assert sorted(set(importers) - set(ALLOWED[wing])) == [], f"new importers of the {wing} wing: {importers}"
    stale = sorted(set(ALLOWED[wing]) - set(importers))
    assert stale == [], f"allowed but no longer importing the {wing} wing (drop them from ALLOWED): {stale}"


def test_nothing_outside_a_wing_compares_against_its_name(wings):
    assert wings.name_comparisons() == {wing: [] for wing in wings.WINGS}


def test_the_check_finds_a_planted_import_and_comparison(wings, tmp_path):
    """The checks above would pass on modules they cannot read; here they must find what was planted."""
    root = tmp_path / wings.PACKAGE
    (root / "core" / "slurm").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "core/__init__.py": "",
        "core/slurm/__init__.py": "",
        "core/slurm/job.py": "",
        "core/other.py": f"def f(b):\n    from {wings.PACKAGE}.core.slurm import job\n    return b == 'slurm'\n",
    }
    for rel, text in files.items():
        (root / rel).write_text(text)
    known = wings.code_figures.modules(root)
    graph = wings.code_figures.import_graph(known, type_checking=True)
    assert wings.outside_imports(graph)["slurm"] == {"core.other": ["core.slurm", "core.slurm.job"]}
    assert wings.name_comparisons(known)["slurm"] == ["core.other:3"]
