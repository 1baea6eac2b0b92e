"""airflow-provider-gpusched: schedule GPU work (local GPUs and Slurm) from Apache Airflow 3."""

__version__ = "0.1.0"

from airflow_provider_gpusched.core.distributed import RankInfo, rank_info  # noqa: E402 - a rank's place (no Airflow)

__all__ = ["RankInfo", "__version__", "rank_info"]
