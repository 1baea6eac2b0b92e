"""NumPy and SciPy are the ``partition`` extra, not dependencies: in a process where neither can be imported, the
package, a sweep's Pareto front and the partitioner's example still work, and the one instance that needs SciPy's
integer program says what to install."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# as if neither were installed: import raises ImportError, importlib.util.find_spec answers None
BLOCK = """
import sys
for name in ("numpy", "scipy", "scipy.optimize", "scipy.sparse"):
    sys.modules[name] = None
"""

SCRIPT = (
    BLOCK
    + """
import json, os, random
out = {}
from airflow_provider_gpusched.core.sweep.parts import objective
assert not objective._HAS_NUMPY
rng = random.Random(3)
points = [(a, (1 - a) * rng.random(), rng.random()) for a in (rng.random() for _ in range(400))]
records = [{"index": i, "state": "succeeded", "result": {"a": a, "b": b, "c": 1 - a - b}} for i, (a, b, c) in enumerate(points)]
obj = objective.Objective(["a", "b", "c"], ["maximize", "maximize", "maximize"])
out["front"] = sorted(r["index"] for r in objective.pareto_front(records, obj))
from airflow_provider_gpusched.core.partition import PartitionInputError, load_problem, partition, solver
os.chdir(os.environ["EXAMPLE"])
out["example"] = partition(load_problem()).feasible
solver._Model.dense_cells = 0  # what an instance with a large host-count space takes: the integer program
try:
    partition(load_problem())
    out["milp"] = "solved"
except PartitionInputError as exc:
    out["milp"] = str(exc)
print(json.dumps(out))
"""
)


def test_the_package_works_without_numpy_and_the_partitioner_names_its_extra():
    env = {"EXAMPLE": str(REPO / "dags" / "partition"), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["example"] is True
    assert out["milp"].startswith("this instance (host counts that the exact search alone cannot settle) needs SciPy")
    assert out["milp"].endswith("pip install 'airflow-provider-gpusched[partition]'")
    # the same front as with NumPy (this process has it)
    import random

    from airflow_provider_gpusched.core.sweep.parts import objective

    assert objective._HAS_NUMPY
    rng = random.Random(3)
    points = [(a, (1 - a) * rng.random(), rng.random()) for a in (rng.random() for _ in range(400))]
    records = [
        {"index": i, "state": "succeeded", "result": {"a": a, "b": b, "c": 1 - a - b}}
        for i, (a, b, c) in enumerate(points)
    ]
    obj = objective.Objective(["a", "b", "c"], ["maximize", "maximize", "maximize"])
    front = sorted(r["index"] for r in objective.pareto_front(records, obj))
    assert len(front) > objective.NUMPY_FRONT and out["front"] == front
