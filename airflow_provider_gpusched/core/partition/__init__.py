"""Pipeline partitioning (sched-pipeline compatible): split a model's layers into stages on heterogeneous
hosts with the smallest bottleneck. Pure Python (SciPy's HiGHS only for very large host-count spaces), no
Airflow."""

from airflow_provider_gpusched.core.partition.problem import (
    DTYPE_SIZES,
    DeviceType,
    PartitionInputError,
    Problem,
    load_problem,
)
from airflow_provider_gpusched.core.partition.solver import Schedule, Stage, check_schedule, partition

__all__ = [
    "DTYPE_SIZES",
    "DeviceType",
    "PartitionInputError",
    "Problem",
    "Schedule",
    "Stage",
    "check_schedule",
    "load_problem",
    "partition",
]
