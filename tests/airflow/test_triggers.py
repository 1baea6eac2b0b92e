"""The triggers' floor under how soon they fire after a deferral (triggers/deferral.py), run as the
triggerer runs them: ``run()`` in an event loop."""

from __future__ import annotations

import asyncio
import time

import pytest

from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.placement import GPURequest

# the trigger (and with it Airflow) is imported by the tests, not when this module is collected (see
# tests/airflow/test_fleet_routing.py)

pytestmark = pytest.mark.airflow


async def _first_event(trigger):
    async for event in trigger.run():
        return event


def _trigger(tmp_path, **kwargs):
    from airflow_provider_gpusched.triggers.local_gpu import GPUAvailableTrigger

    return GPUAvailableTrigger(
        request={"gpus": 1},
        simulate="4x24GiB",
        state_dir=str(tmp_path / "leases"),
        poll_interval=0.1,
        owner="t.task (run, try 1)",
        **kwargs,
    )


def test_free_gpus_fire_at_once_without_a_floor(tmp_path):
    trigger = _trigger(tmp_path)  # made first: its import (Airflow's, the first time in a worker) is not the wait
    start = time.time()
    event = asyncio.run(_first_event(trigger))
    assert event.payload["status"] == "available" and time.time() - start < 1.0


def test_free_gpus_fire_no_sooner_than_the_floor(tmp_path):
    fire_after = time.time() + 1.5
    event = asyncio.run(_first_event(_trigger(tmp_path, fire_after=fire_after)))
    assert event.payload["status"] == "available" and time.time() >= fire_after


def test_the_floor_survives_serialisation_and_gpus_taken_meanwhile_are_waited_for(tmp_path):
    """A trigger restored from its serialised form (a triggerer restart) keeps the floor; if the GPUs are taken
    during the hold, it looks again instead of firing on a stale answer."""
    classpath, kwargs = _trigger(tmp_path, fire_after=time.time() + 1.0).serialize()
    assert classpath.endswith("GPUAvailableTrigger") and kwargs["fire_after"]
    restored = type(_trigger(tmp_path))(**kwargs)
    manager = LeaseManager(SimulatedInventory("4x24GiB"), str(tmp_path / "leases"))
    taken: list = []

    async def take_then_release():
        await asyncio.sleep(0.3)
        lease, why = manager.try_acquire(GPURequest(gpus=4), "someone else")
        assert lease is not None, why
        taken.append(time.time())
        await asyncio.sleep(1.5)
        manager.release(lease)
        taken.append(time.time())

    async def both():
        holder = asyncio.create_task(take_then_release())
        event = await _first_event(restored)
        await holder
        return event, time.time()

    event, fired = asyncio.run(both())
    assert event.payload["status"] == "available"
    assert fired >= taken[1], "fired while another process held every GPU"
