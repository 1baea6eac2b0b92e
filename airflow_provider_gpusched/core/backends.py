"""Where work runs: a backend is one class, found by name in a registry (submitit's executor per backend, cosmos's
operator module per mode).

A :class:`Backend` answers every question the rest of the product asks about where work runs: which resource
settings it honours, how a distributed trial starts its ranks, what it runs now and how to stop it
(``gpusched queue``), how ``gpusched sweep run`` runs a stage, and (under Airflow) which tasks a sweep stage
becomes and which pools its job classes need. Nothing outside a backend's own module compares backend names.

Built in: ``local`` (this host's GPUs, :mod:`airflow_provider_gpusched.core.gpu.backend`) and ``slurm``
(:mod:`airflow_provider_gpusched.core.slurm.backend`). Another package adds one through the entry-point group
``airflow_provider_gpusched.backends`` (``name = "package.module:Class"``), or a program calls
:func:`register_backend`: one :class:`~airflow_provider_gpusched.core.registry.Registry`, as pruning rules, search
kinds and trackers have. docs/development.md, "Adding a backend", has a worked example.

Backends are named by ``module:Class`` strings and imported on first use, so listing this host's leases never
pays for the Slurm package.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.registry import Registry
from airflow_provider_gpusched.core.work_tag import WorkTag

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.command_handle import CommandHandle
    from airflow_provider_gpusched.core.health_check import Check, HealthContext
    from airflow_provider_gpusched.core.stops import StopRequest

#: the entry-point group other packages register backends under
ENTRY_POINT_GROUP = "airflow_provider_gpusched.backends"
#: the backend a sweep, a CLI command or a manifest means when it names none
DEFAULT_BACKEND = "local"


# -- what gpusched queue lists and stops: the records every backend answers in (core/queue.py re-exports them) ------
@dataclass
class QueueEntry:
    """One piece of running (or queued, on Slurm) work this provider launched."""

    backend: str  # the backend's name
    id: str  # Slurm job id (ARRAY_TASK for array tasks) or lease id
    tag: WorkTag
    state: str  # Slurm's state, or running / starting / yielding / stopping / orphaned
    elapsed: float | None = None
    requeues: int | None = None
    where: str = ""  # GPUs (local) or partition and nodes (Slurm)
    host: str = ""  # in a fleet: the GPU host that published the lease ('' for this host's own)
    reason: str = ""  # Slurm's pending reason, a yield or stop request
    pid: int | None = None
    output: str = ""  # a Slurm job's output file
    job_name: str = ""

    @property
    def job_class(self) -> str:
        return self.tag.job_class

    @property
    def stop_id(self) -> str:
        """What to cancel or stop: the array's job id for an array task (scancel cancels all its tasks)."""
        return get_backend(self.backend, "queue entry backend").stop_id(self.id)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["tag"] = self.tag.to_dict()
        return data

    def describe(self) -> str:
        what = self.tag.task or self.job_name or "(not launched by an Airflow task)"
        run = f" run {self.tag.run_id}" if self.tag.run_id else ""
        return f"{self.backend} {self.id} {self.state}: {what}{run}"


@dataclass
class StopOutcome:
    entry: QueueEntry
    action: str  # "cancelled", "stopped", "forced", "still running", "would stop", "failed"
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.entry.backend,
            "id": self.entry.id,
            "task": self.entry.tag.task,
            "run_id": self.entry.tag.run_id,
            "action": self.action,
            "detail": self.detail,
        }


class Backend:
    """One place work runs. Subclasses set the class attributes and override what they support; a method left
    as it is here says plainly that the backend does not do that."""

    #: the name users write (``backend: slurm``, ``--backend slurm``)
    name: ClassVar[str] = ""
    #: a few words for help texts and errors ("this host's GPUs")
    summary: ClassVar[str] = ""
    #: ``module:Class`` of its Airflow side (:class:`airflow_provider_gpusched.backends.AirflowBackend`): the
    #: tasks a sweep stage becomes, its pools. Imported only under Airflow.
    airflow: ClassVar[str] = ""
    #: the keyword through which :func:`~airflow_provider_gpusched.core.queue.list_work` and ``stop_work`` get
    #: this backend's handle (the object that lists and stops its work), and what that handle is, for errors
    handle: ClassVar[str] = ""
    handle_noun: ClassVar[str] = ""
    #: what one piece of its work is called ("GPU lease", "Slurm job")
    work_noun: ClassVar[str] = "piece of work"
    #: resource settings it cannot honour, name -> what the setting is; a trial asking for one is refused by name
    unsupported: ClassVar[Mapping[str, str]] = {}
    #: how its batched sweep stages are named in the Sweeps tab (the task that runs a chunk)
    chunk_task: ClassVar[str] = "run_batch"
    #: whether ``run_sweep`` runs an asynchronous search (its slots ask for trials as they free)
    asynchronous_search: ClassVar[bool] = False
    #: what a job class means on it: the settings of the job-class section named after it (core/job_classes.py
    #: parses it), a frozen dataclass with its defaults, its ``for_class(job_class)`` classmethod giving each
    #: class's, and ``checks`` (key -> check) for keys its field types do not say; None: it has no section
    job_class_settings: ClassVar[type[Any] | None] = None
    #: its options for a sweep task group (``SweepExecution(options=...)``, task_groups/execution.py): a dataclass
    #: that checks its fields (InvalidArgumentError naming the field); None: it takes none
    sweep_options: ClassVar[type[Any] | None] = None
    #: ``SweepExecution`` keywords that stand for fields of :attr:`sweep_options` (``slurm_conn_id`` -> ``conn_id``)
    sweep_keywords: ClassVar[Mapping[str, str]] = {}
    #: the folders it writes under Airflow, check name -> the ``[gpusched]`` option that names the folder
    #: (``gpusched queue health`` checks each is writable)
    folders: ClassVar[Mapping[str, str]] = {}

    # -- the sweep spec ------------------------------------------------------------------------------------
    def check_resources(self, resources: Any, sweep: str) -> None:
        """Refuse the settings of ``resources`` (a sweep's ``TrialResources``, read by the names in
        :attr:`unsupported`) this backend cannot honour, naming the setting and the backend."""
        given = [name for name in self.unsupported if getattr(resources, name) not in (None, False)]
        if given:
            name = given[0]
            raise GpuschedError(
                f"sweep {sweep}: resources.{name}={getattr(resources, name)!r}: {self.unsupported[name]} "
                f"is not something the {self.summary or self.name} backend honours; leave {name} out for "
                f"backend={self.name!r} (docs/sweeps.md lists each setting per backend)"
            )

    def trial_arguments(self, resources: Any) -> dict[str, Any]:
        """What a trial on this backend asks for, as its trial operator's arguments, read from ``resources`` (a
        sweep's ``TrialResources``: the shared record holds no backend's arguments)."""
        raise GpuschedError(f"the {self.name} backend has no trial arguments (it runs no trial operator)")

    # -- a trial's processes --------------------------------------------------------------------------------
    def rank_argv(
        self, mode: str, argv: Sequence[str], settings: Mapping[str, Any], env: Mapping[str, str], grace: float
    ) -> list[str]:
        """The command that starts a distributed trial's ``argv`` as ranks (``mode``: torchrun or srun)."""
        raise GpuschedError(f"the {self.name} backend cannot start a trial's command as ranks ({mode})")

    # -- what runs, and stopping it (gpusched queue) ---------------------------------------------------------
    def stop_id(self, entry_id: str) -> str:
        """What to stop for a listed entry (Slurm: the array's job id for an array task)."""
        return entry_id

    def states(self) -> tuple[str, ...]:
        """Every state its listed entries can have (``gpusched queue list --state`` checks against them)."""
        return ()

    def queue_entries(self, handle: Any) -> tuple[list[QueueEntry], list[str]]:
        """The work ``handle`` sees, and what could not be looked at (said as it is, never raised)."""
        return [], []

    def stop(self, entries: list[QueueEntry], request: StopRequest, handle: Any, wait: float) -> list[StopOutcome]:
        raise GpuschedError(f"the {self.name} backend cannot stop work")

    def default_handle(self, *, simulate: str | None = None, state_dir: str | None = None, shared: bool = False) -> Any:
        """The handle this backend works through when a command gives none (``gpusched sweep run``), from the
        command's options: ``simulate`` (simulated GPUs), ``state_dir`` (the lease directory), ``shared``."""
        return None

    def health_checks(self, context: HealthContext) -> list[Check]:
        """What ``gpusched queue health`` checks of this backend, in the order shown (``context``: its handle, if
        the command made one, and the command's options); none by default."""
        return []

    def command_handle(self, args: Any, connect: Callable[[str], CommandHandle]) -> CommandHandle | None:
        """How ``gpusched queue`` reaches it from the parsed command line ``args``; ``connect(conn_id)``: its handle
        through an Airflow connection (its Airflow side's). None: the command reaches it by no option of its own."""
        return None

    # -- a failed task's alert (notifications/notifiers.py) ----------------------------------------------------
    def output_tail(self, recorded: Callable[[str], Any], lines: int) -> tuple[str, str] | None:
        """The last ``lines`` of a one-off task's job output, as this backend's operator recorded them when the job
        ended, and where they came from; ``recorded(key)`` reads what the task recorded under ``key`` (its XCom,
        None when nothing). None: nothing recorded (the alert falls back to the task's local output.log)."""
        return None

    # -- gpusched sweep run ------------------------------------------------------------------------------------
    def run_sweep(
        self,
        spec: Any,
        session: Any,
        run: str,
        *,
        handle: Any = None,
        parallel: int | None = None,
        force_rerun: bool | None = None,
        progress: Any = True,
        on_event: Any = None,
        poll_interval: float = 2.0,
    ) -> dict[str, Any]:
        """Run every stage of a sweep in this process and return the session's summary: the signature is
        core/sweep/running/terminal.py's :class:`~airflow_provider_gpusched.core.sweep.running.terminal.SweepRunner` (``spec``,
        ``session``, ``run`` and its options; ``handle``: what it works through, its :meth:`default_handle` when
        None). Declared here without the sweep's types: the sweep is built on this module, not under it."""
        raise GpuschedError(f"gpusched sweep run: the {self.name} backend cannot run a sweep from the terminal")


def describe_names(names: Iterable[str] | None = None) -> str:
    """``'local' or 'slurm'``: the known names for an error's "expected"."""
    names = sorted(backend_names() if names is None else names)
    return ", ".join(repr(n) for n in names[:-1]) + (" or " if len(names) > 1 else "") + repr(names[-1])


#: registration order is the listing order of `gpusched queue list`: queued work first
REGISTRY: Registry[Backend] = Registry(
    "backend",
    Backend,
    ENTRY_POINT_GROUP,
    {
        "slurm": "airflow_provider_gpusched.core.slurm.backend:SlurmBackend",
        "local": "airflow_provider_gpusched.core.gpu.backend:LocalBackend",
    },
    function="register_backend",
    expected=describe_names,
)


def register_backend(cls: type[Backend] | str, name: str | None = None) -> None:
    """Make a backend known by its name (``cls.name``, or ``name`` for a ``module:Class`` string). Registering
    a name again replaces it (a test's stand-in, a site's own Slurm flavour)."""
    REGISTRY.register(cls, name)


def unregister_backend(name: str) -> None:
    REGISTRY.unregister(name)


def refresh_backends() -> None:
    """Forget what was loaded and read the entry points again (after a package that adds a backend was installed
    into a running process, such as a notebook's)."""
    REGISTRY.refresh()


def backend_names() -> list[str]:
    """Every known backend, in registration order (the built-in ones first)."""
    return REGISTRY.names()


def get_backend(name: object, argument: str = "backend") -> Backend:
    """The backend called ``name``; an unknown name is an error naming ``argument`` and the known names."""
    return REGISTRY.instance(name, argument)


def backends() -> list[Backend]:
    return [get_backend(n) for n in backend_names()]


def within_max_workers(parallel: int | None, max_workers: int | None) -> int | None:
    """Trials of a chunk at once: ``parallel`` (None: no bound of its own), at most the spec's ``max_workers``
    (None: no bound), each backend's cap (a local runner's leases, a Slurm array's ``%N``)."""
    if max_workers is None:
        return parallel
    return min(parallel or max_workers, max_workers)


def by_backend(items: Iterable[Any], key: Callable[[Any], str]) -> dict[str, list[Any]]:
    """``items`` grouped by their backend's name, groups in registration order."""
    groups: dict[str, list[Any]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    order = {n: i for i, n in enumerate(backend_names())}
    return dict(sorted(groups.items(), key=lambda kv: order.get(kv[0], len(order))))
