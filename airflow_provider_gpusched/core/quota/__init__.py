"""Team quotas with borrowing and reclaim across the GPU fleet (docs/quotas.md).

* :mod:`.config` — the one configuration (``[gpusched] quotas``), validated.
* :mod:`.policy` — the rules: in quota or borrowed, admission, reclaim order, fair shares, Jain's index.
* :mod:`.book` — the claims, waiting requests and reclaim requests every host shares, under one admission lock.
* :mod:`.report` — what the quotas look like now: one view for the CLI, the GPU board, health and metrics.
* :mod:`.slurm` — each group's Slurm account and QOS, and the ``sacctmgr`` commands that make them.

Pure Python, no Airflow imports.
"""
