"""The core must import without Airflow: check the source and a real import in a clean interpreter."""

import re
import subprocess
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "airflow_provider_gpusched" / "core"


def test_no_airflow_imports_in_core_source():
    pattern = re.compile(r"^\s*(from|import)\s+airflow(\.|\s|$)", re.M)
    offenders = [str(p) for p in CORE.rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []


def test_core_imports_without_loading_airflow():
    code = (
        "import sys, airflow_provider_gpusched.core.slurm, airflow_provider_gpusched.core.pyfunc, "
        "airflow_provider_gpusched.core.units, airflow_provider_gpusched.cli; "
        "print(sorted(m for m in sys.modules if m == 'airflow' or m.startswith('airflow.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
