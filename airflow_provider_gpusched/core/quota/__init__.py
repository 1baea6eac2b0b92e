"""Team quotas with borrowing and reclaim across the GPU fleet (docs/quotas.md).

* :mod:`.config` — the one configuration (``[gpusched] quotas``), validated.
* :mod:`.policy` — the rules: in quota or borrowed, admission, reclaim order, fair shares, Jain's index.
* :mod:`.book` — the claims and waiting requests every host shares, under one admission lock.

Pure Python, no Airflow imports.
"""
