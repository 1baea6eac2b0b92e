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
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.registry import Registry

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.queue import QueueEntry, StopOutcome
    from airflow_provider_gpusched.core.stops import StopRequest
    from airflow_provider_gpusched.core.sweep.resources import TrialResources
    from airflow_provider_gpusched.core.sweep.session import SweepSession
    from airflow_provider_gpusched.core.sweep.spec import SweepSpec

#: the entry-point group other packages register backends under
ENTRY_POINT_GROUP = "airflow_provider_gpusched.backends"
#: the backend a sweep, a CLI command or a manifest means when it names none
DEFAULT_BACKEND = "local"


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

    # -- the sweep spec ------------------------------------------------------------------------------------
    def check_resources(self, resources: TrialResources, sweep: str) -> None:
        """Refuse the settings of ``resources`` this backend cannot honour, naming the setting and the backend."""
        given = [name for name in self.unsupported if getattr(resources, name) not in (None, False)]
        if given:
            name = given[0]
            raise GpuschedError(
                f"sweep {sweep}: resources.{name}={getattr(resources, name)!r}: {self.unsupported[name]} "
                f"is not something the {self.summary or self.name} backend honours; leave {name} out for "
                f"backend={self.name!r} (docs/sweeps.md lists each setting per backend)"
            )

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

    # -- gpusched sweep run ------------------------------------------------------------------------------------
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
        """Run every stage of ``spec`` in this process and return the session's summary (``run_sweep``'s
        options; ``handle``: what it works through, its :meth:`default_handle` when None)."""
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


def by_backend(items: Iterable[Any], key: Callable[[Any], str]) -> dict[str, list[Any]]:
    """``items`` grouped by their backend's name, groups in registration order."""
    groups: dict[str, list[Any]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    order = {n: i for i, n in enumerate(backend_names())}
    return dict(sorted(groups.items(), key=lambda kv: order.get(kv[0], len(order))))
