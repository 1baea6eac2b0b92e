"""A floor under how soon a trigger may fire after its task deferred.

Airflow 3.3 can fail a task whose trigger fires within seconds of the deferral: the executor's stale "success"
event of the deferring try reaches the scheduler after the resumed try is already running, and the scheduler
marks the task failed ("state mismatch"; apache/airflow#72716, #71580, not fixed in 3.3.2). Every trigger of
this provider therefore holds its event until ``fire_after`` (set by the operator at deferral time to now +
``[gpusched] min_deferral``). A trigger restored after a triggerer restart keeps the same floor."""

from __future__ import annotations

import asyncio
import time


async def hold_until(fire_after: float | None) -> None:
    """Sleep until ``fire_after`` (a ``time.time()`` stamp); return at once when it has passed or is None."""
    if fire_after is not None and fire_after > time.time():
        await asyncio.sleep(fire_after - time.time())
