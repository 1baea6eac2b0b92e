"""Pure-Python core of airflow-provider-gpusched.

Nothing under ``core`` imports Airflow: the Slurm client and state model, GPU inventory and
leases, sweep specs and the partitioner are usable (and tested) on their own. The Airflow
adapters in ``hooks/``, ``operators/``, ``sensors/``, ``triggers/`` and ``decorators/`` are
thin layers on top.
"""
