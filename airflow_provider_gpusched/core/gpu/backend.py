"""The ``local`` backend: this host's GPUs, through leases (core/gpu/leases.py). See core/backends.py."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_gpusched.core.backends import Backend
from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.gpu.class_policy import LocalClassPolicy
from airflow_provider_gpusched.core.queue import QueueEntry, StopOutcome

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.gpu.leases import LeaseManager
    from airflow_provider_gpusched.core.gpu.placement import GPURequest
    from airflow_provider_gpusched.core.health_check import Check, HealthContext
    from airflow_provider_gpusched.core.stops import StopRequest
    from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec
    from airflow_provider_gpusched.core.sweep.parts.resources import TrialResources
    from airflow_provider_gpusched.core.sweep.running.session import SweepSession

#: how long `gpusched queue stop` waits for the processes it killed to have ended before it says so
KILL_WAIT_SECONDS = 2.0
#: the states `gpusched queue list` gives local leases
LOCAL_STATES = ("running", "starting", "yielding", "stopping", "orphaned")


class LocalBackend(Backend):
    """This host's GPUs: a lease per trial or task (memory packing, OOM retry, preemption by job class)."""

    name = "local"
    summary = "local"
    airflow = "airflow_provider_gpusched.backends.local:LocalAirflowBackend"
    handle = "manager"
    handle_noun = "lease manager"
    work_noun = "GPU lease"
    #: settings the local backend cannot honour yet: a trial that asks for them is refused, never run without
    #: them (docs/sweeps.md: each setting against each backend)
    unsupported = {"partition": "a Slurm partition", "qos": "a Slurm QOS"}
    chunk_task = "run_batch"
    asynchronous_search = True
    job_class_settings = LocalClassPolicy
    folders = {"local run dir": "local_run_dir"}

    def check_resources(self, resources: TrialResources, sweep: str) -> None:
        slurm_only = [
            n
            for n in resources.SLURM_SHAPE
            if getattr(resources, n) is not None and not (n == "nodes" and resources.nodes in (1, "1"))
        ]
        if slurm_only:
            name = slurm_only[0]
            raise GpuschedError(
                f"sweep {sweep}: resources.{name}={getattr(resources, name)!r} is a Slurm job setting "
                f"that the local backend cannot honour (local GPUs are one host); run such trials "
                f"with backend='slurm', or leave {name} out"
            )
        refused = [n for n in self.unsupported if getattr(resources, n) is not None]
        if refused:
            name = refused[0]
            raise GpuschedError(
                f"sweep {sweep}: resources.{name}={getattr(resources, name)!r}: {self.unsupported[name]} is not "
                f"something the local backend honours; run such trials with backend='slurm', or leave {name} "
                f"out (docs/sweeps.md lists each setting per backend)"
            )

    def trial_arguments(self, resources: TrialResources) -> dict[str, Any]:
        """What a trial on local GPUs asks for (``LocalGPUOperator`` arguments): at least one GPU; ``mem``
        (Slurm's --mem) is the host RAM it reserves, ``cpus`` the host CPUs (pinned); ``setup`` lines run in the
        trial's shell first."""
        return {
            "gpus": max(1, resources.gpus_on_each_node),
            "gpu_memory": resources.gpu_memory,
            "mem": resources.mem,
            "job_class": resources.job_class,
            "priority": resources.priority,
            "env": resources.env or None,
            "devices": resources.devices,
            "device_groups": resources.device_groups,
            "setup": resources.setup or None,
            "cpus": resources.cpus,
            "time_limit": resources.time_limit,
            "load_stage": bool(resources.load_stage),
            "max_waiting": resources.max_waiting,
            **({"group": resources.group} if resources.group else {}),
        }

    def gpu_request(self, resources: TrialResources, host_limits: Mapping[str, Any]) -> GPURequest:
        """The :class:`~airflow_provider_gpusched.core.gpu.placement.GPURequest` of one trial on local GPUs, with
        ``host_limits`` (``[gpusched]`` defaults: :func:`~airflow_provider_gpusched.core.options.host_limit_defaults`)
        for what the trial does not give."""
        from airflow_provider_gpusched.core.gpu.placement import GPURequest

        wanted = self.trial_arguments(resources)
        limits = dict(host_limits)
        if wanted["max_waiting"] is not None:
            limits["max_waiting"] = wanted["max_waiting"]
        return GPURequest(
            gpus=wanted["gpus"],
            gpu_memory=wanted["gpu_memory"],
            host_memory=wanted["mem"],
            devices=wanted["devices"],
            cpus=wanted["cpus"],
            device_groups=wanted["device_groups"],
            load_stage=wanted["load_stage"],
            **limits,
        )

    def rank_argv(
        self, mode: str, argv: Sequence[str], settings: Mapping[str, Any], env: Mapping[str, str], grace: float
    ) -> list[str]:
        """One rank per GPU of the lease (``CUDA_VISIBLE_DEVICES``)."""
        from airflow_provider_gpusched.core.gpu.ranks import local_launch_argv

        gpus = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        return local_launch_argv(mode, list(argv), max(1, len(gpus)), grace)

    def states(self) -> tuple[str, ...]:
        return LOCAL_STATES

    def default_handle(self, *, simulate: str | None = None, state_dir: str | None = None, shared: bool = False) -> Any:
        """A lease manager of this host's GPUs (NVML, or ``simulate``) in ``state_dir``."""
        from airflow_provider_gpusched.core.gpu.inventory import get_inventory
        from airflow_provider_gpusched.core.gpu.leases import LeaseManager

        return LeaseManager(get_inventory(simulate), state_dir, shared=shared)

    def health_checks(self, context: HealthContext) -> list[Check]:
        """This host's GPU inventory, its lease directory and the stop orders in it."""
        from airflow_provider_gpusched.core.gpu.health import local_health

        return local_health(context)

    def queue_entries(self, handle: LeaseManager) -> tuple[list[QueueEntry], list[str]]:
        return local_entries(handle), [f"unreadable lease file {path}: {why}" for path, why in handle.unreadable]

    def stop(
        self, entries: list[QueueEntry], request: StopRequest, handle: LeaseManager, wait: float
    ) -> list[StopOutcome]:
        return stop_leases(entries, request, handle, wait)

    def run_sweep(
        self,
        spec: SweepSpec,
        session: SweepSession,
        run: str,
        *,
        handle: Any = None,
        parallel: int | None = None,
        force_rerun: bool | None = None,
        progress: Any = True,
        on_event: Any = None,
        poll_interval: float = 2.0,
    ) -> dict[str, Any]:
        """Each stage's pending trials as one local batch (leases from the lease directory Airflow's tasks use);
        Ctrl-C stops the running trials (SIGTERM, grace period, SIGKILL) and records them ``stopped``. The stage
        loop is core/sweep/running/terminal.py's ``run_stages``; this is the local stage."""
        from airflow_provider_gpusched.core.options import host_limit_defaults
        from airflow_provider_gpusched.core.sweep.running.terminal import default_manager, run_stages
        from airflow_provider_gpusched.core.units import time_limit_seconds

        manager = handle or default_manager()
        r = spec.resources
        request = self.gpu_request(r, host_limit_defaults())
        manager.check_possible(request)
        if spec.max_workers is not None:
            parallel = min(parallel or spec.max_workers, spec.max_workers)
        if spec.asks_as_it_goes:  # each slot asks for its next trial as it frees (core/sweep/running/asynchronous.py)
            parallel = parallel or spec.per_round
        batch = {
            "manager": manager,
            "request": request,
            "parallel": parallel,
            "time_limit": None if r.time_limit is None else time_limit_seconds(r.time_limit),
            "on_event": on_event,
        }

        def run_stage(manifest: Any, round_no: int | None, searching: Any, board: Any) -> None:
            _run_local_stage(spec, session, manifest, searching, board, **batch)

        return run_stages(spec, session, run, self.name, run_stage, force_rerun=force_rerun, progress=progress)


def _run_local_stage(
    spec: SweepSpec,
    session: SweepSession,
    manifest: Any,
    searching: Any,
    board: Any,
    *,
    manager: LeaseManager,
    request: Any,
    parallel: int | None,
    time_limit: float | None,
    on_event: Any,
) -> None:
    """One stage of ``gpusched sweep run`` on this host: its pending trials (or an asynchronous search's slots) as
    one local batch in a thread, while Ctrl-C stops them in order (core/sweep/running/terminal.py's ctrl_c_stops)."""
    from airflow_provider_gpusched.core.gpu.sweep_batch import run_local_batch
    from airflow_provider_gpusched.core.sweep.running.terminal import StageStopped, ctrl_c_stops

    r = spec.resources
    stop, done, interrupted = threading.Event(), threading.Event(), threading.Event()
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["value"] = run_local_batch(
                manifest,
                manifest.pending if searching is None else [],
                manager,
                request,
                parallel=parallel,
                trials_per_process=1,
                owner=f"gpusched sweep run {spec.name} (pid {os.getpid()})",
                job_class=r.job_class,
                priority=r.priority,
                on_event=on_event,
                stop_event=stop,
                setup=r.setup,
                time_limit=time_limit,
                search=searching,
                worker=f"{os.uname().nodename}:{os.getpid()}",
                on_taken=None if board is None else board.trials.append,
            )
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            outcome["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=work, name=f"gpusched-sweep-{spec.name}", daemon=True)
    with ctrl_c_stops(stop, interrupted):
        worker.start()
        while not done.wait(0.5):
            pass
    if interrupted.is_set():  # Ctrl-C: every running trial got SIGTERM, its grace period, SIGKILL; leases given back
        raise StageStopped(
            "stopped by Ctrl-C in gpusched sweep run",
            f"sweep {spec.name}: stopped; the trials that finished are kept in {session.store.dir}, and the next "
            f"run goes on with the rest",
        )
    if "error" in outcome:
        raise outcome["error"]


def local_entries(manager: LeaseManager) -> list[QueueEntry]:
    """The live leases of a :class:`~airflow_provider_gpusched.core.gpu.leases.LeaseManager`."""
    now = time.time()
    entries = []
    for lease in manager.leases():
        tag = lease.tag
        stop = manager.store.stop_request(lease.lease_id)
        asked = manager.yields.request_for(lease.lease_id)
        if lease.unreadable:
            state, reason = "unreadable", lease.unreadable
        elif lease.orphaned_at:
            state, reason = "orphaned", "its worker died; its child is being stopped"
        elif stop is not None:
            state, reason = "stopping", str(stop.get("reason", ""))[:200] if isinstance(stop, dict) else ""
        elif asked:
            state, reason = "yielding", f"preempted for {asked.get('by', '?')}"
        else:
            state, reason = ("running" if lease.child_pids else "starting"), ""
        entries.append(
            QueueEntry(
                backend=LocalBackend.name,
                id=lease.lease_id,
                tag=tag,
                state=state,
                elapsed=round(now - lease.created, 1),
                where="GPU " + ",".join(map(str, lease.gpus)),
                reason=reason,
                pid=lease.child_pids[-1] if lease.child_pids else lease.pid,
                job_name=lease.owner,
            )
        )
    return entries


def stop_leases(
    leases: list[QueueEntry], request: StopRequest, manager: LeaseManager, wait: float
) -> list[StopOutcome]:
    from airflow_provider_gpusched.core.gpu.lease_store import kill_family

    by_id = {lease.lease_id: lease for lease in manager.leases()}
    outcomes: dict[str, StopOutcome] = {}
    asked = []
    for entry in leases:
        lease = by_id.get(entry.id)
        if lease is None:
            outcomes[entry.id] = StopOutcome(entry, "stopped", "it had already ended")
            continue
        manager.store.request_stop(entry.id, request.to_dict())
        asked.append((entry, lease))
    grace = max((lease.grace for _, lease in asked), default=0.0)
    deadline = time.monotonic() + grace + wait
    while asked and time.monotonic() < deadline:
        live = {lease.lease_id for lease in manager.leases()}
        for entry, lease in list(asked):
            if entry.id not in live:
                outcomes[entry.id] = StopOutcome(
                    entry,
                    "stopped",
                    f"its holder stopped GPU process(es) {','.join(map(str, lease.child_pids)) or '-'}",
                )
                asked.remove((entry, lease))
        if asked:
            time.sleep(0.2)
    for entry, lease in asked:  # the holder did not act (hung, or not a provider operator): kill the child
        killed = kill_family(lease.child_pids, wait=KILL_WAIT_SECONDS)
        outcomes[entry.id] = StopOutcome(
            entry,
            "forced" if killed else "still running",
            f"its holder (pid {lease.pid}) did not stop it within {grace + wait:.0f}s; "
            + (f"killed {killed} process(es)" if killed else "no child process to kill"),
        )
    return [outcomes[e.id] for e in leases]
