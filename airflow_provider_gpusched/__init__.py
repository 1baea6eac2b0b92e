"""airflow-provider-gpusched: schedule GPU work (local GPUs and Slurm) from Apache Airflow 3."""

__version__ = "0.1.0"
