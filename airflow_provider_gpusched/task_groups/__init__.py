"""Task-group factories: sweeps, HPO and NAS rounds as Airflow task groups."""
