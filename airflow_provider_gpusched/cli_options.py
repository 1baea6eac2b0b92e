"""What the ``gpusched`` commands read from their options and the environment: the simulated inventory, the lease
directory, whether it is shared, the fleet directory. Shared by cli.py and cli_queue.py."""

from __future__ import annotations

import argparse

from airflow_provider_gpusched.core.errors import GpuschedError


def simulate_option(args: argparse.Namespace) -> str | None:
    """The simulated inventory: ``--simulate``, else ``AIRFLOW__GPUSCHED__SIMULATE_GPUS`` (``get_inventory``
    itself falls back to ``GPUSCHED_SIMULATE_GPUS``)."""
    import os

    return args.simulate or os.environ.get("AIRFLOW__GPUSCHED__SIMULATE_GPUS") or None


def state_dir_option(args: argparse.Namespace, create: bool = False) -> str | None:
    """The lease directory: ``--state-dir`` (which must exist, unless ``create``: a command that runs work makes it,
    private to this user), else ``AIRFLOW__GPUSCHED__GPU_STATE_DIR`` (``LeaseManager`` itself falls back to
    ``GPUSCHED_STATE_DIR``, then ``<tmp>/gpusched-<uid>``)."""
    import os

    if create and args.state_dir and not os.path.lexists(args.state_dir):
        try:
            os.makedirs(args.state_dir, mode=0o700)
        except OSError as exc:
            raise GpuschedError(f"--state-dir {args.state_dir}: cannot create it ({exc.strerror or exc})") from None
    if args.state_dir and not os.path.isdir(args.state_dir):
        what = "is not a directory" if os.path.exists(args.state_dir) else "does not exist (nothing has run here yet?)"
        raise GpuschedError(f"--state-dir {args.state_dir}: {what}")
    return args.state_dir or os.environ.get("AIRFLOW__GPUSCHED__GPU_STATE_DIR") or None


def shared_option() -> bool:
    """Whether the lease directory is a group directory shared on purpose: ``GPUSCHED_STATE_DIR_SHARED`` or
    ``AIRFLOW__GPUSCHED__GPU_STATE_DIR_SHARED`` (the CLI reads the environment, not Airflow's configuration)."""
    import os

    from airflow_provider_gpusched.core.gpu.lease_store import shared_from_env

    return shared_from_env() or os.environ.get("AIRFLOW__GPUSCHED__GPU_STATE_DIR_SHARED", "").strip().lower() in (
        "1",
        "true",
        "yes",
        "on",
    )


def fleet_dir(args: argparse.Namespace, required: bool = True) -> str:
    """``--fleet-dir``, else ``[gpusched] fleet_dir`` (its environment variable, else Airflow's configuration
    where Airflow is installed); '' with ``required=False`` when none is set (one host)."""
    import os

    if getattr(args, "no_fleet", False):
        return ""
    folder = getattr(args, "fleet_dir", None) or os.environ.get("AIRFLOW__GPUSCHED__FLEET_DIR", "")
    if not folder and airflow_config_may_set("fleet_dir"):
        try:
            from airflow_provider_gpusched import settings

            folder = settings.fleet_dir()
        except ImportError:  # the core without Airflow: only the option and the environment
            folder = ""
    if not folder and required:
        raise GpuschedError(
            "no fleet directory: give --fleet-dir DIR or set AIRFLOW__GPUSCHED__FLEET_DIR ([gpusched] fleet_dir)"
        )
    return os.path.expanduser(folder)


def airflow_config_may_set(name: str) -> bool:
    """Whether Airflow's configuration could give ``[gpusched] name`` a value: a variable of the environment for it
    (``AIRFLOW__GPUSCHED__NAME``, ``..._CMD``, ``..._SECRET``) or the name in its ``airflow.cfg``
    (``AIRFLOW_CONFIG``, else ``$AIRFLOW_HOME/airflow.cfg``). Where neither is there the option has its default,
    and the command need not import Airflow to learn it: ``gpusched gpus`` answers in a tenth of a second instead
    of two."""
    import os

    variable = f"AIRFLOW__GPUSCHED__{name.upper()}"
    if any(key == variable or key.startswith(variable + "_") for key in os.environ):
        return True
    home = os.environ.get("AIRFLOW_HOME") or os.path.join("~", "airflow")
    path = os.environ.get("AIRFLOW_CONFIG") or os.path.join(os.path.expanduser(home), "airflow.cfg")
    try:
        with open(os.path.expanduser(path), encoding="utf-8", errors="replace") as fh:
            return name in fh.read()
    except OSError:  # no file (Airflow would write its defaults) or none readable: the default
        return False


def quota_config(args: argparse.Namespace):
    """The team quotas: ``--quotas`` (a file or inline YAML), else ``[gpusched] quotas`` (its environment variable,
    else Airflow's configuration where Airflow is installed). ``QuotaConfig()`` (off) when none is set."""
    import os

    from airflow_provider_gpusched.core.quota.config import QuotaConfig

    value = getattr(args, "quotas", None) or os.environ.get("AIRFLOW__GPUSCHED__QUOTAS", "")
    if not value and airflow_config_may_set("quotas"):
        try:
            from airflow_provider_gpusched import settings

            return settings.quota_config()
        except ImportError:
            pass
    if not value:
        return QuotaConfig.load(value)
    # a file: its last good version stays in force while it is broken (core/quota/last_good.py), as in Airflow
    from airflow_provider_gpusched.core.gpu.lease_store import default_state_dir
    from airflow_provider_gpusched.core.quota.last_good import QUOTAS

    state_dir = getattr(args, "state_dir", None) or os.environ.get("AIRFLOW__GPUSCHED__GPU_STATE_DIR") or ""
    return QUOTAS.load(value, state_dir or default_state_dir(), shared=shared_option())


def quota_book(args: argparse.Namespace, state_dir: str | None = None):
    """``(book, capacity)`` of the team quotas this command looks at, or ``(None, 0.0)`` when there are none: the
    fleet's book (``<fleet_dir>/quota``) or this host's (``<lease dir>/quota``)."""
    import os

    config = quota_config(args)
    if not config.enabled:
        return None, 0.0
    from airflow_provider_gpusched.core.fleet import open_quota_book
    from airflow_provider_gpusched.core.gpu.lease_store import default_state_dir

    folder = fleet_dir(args, required=False)
    state = state_dir or os.environ.get("AIRFLOW__GPUSCHED__GPU_STATE_DIR") or default_state_dir()
    if folder:
        return open_quota_book(config, folder, state, shared=shared_option())
    from airflow_provider_gpusched.core.gpu.inventory import get_inventory

    gpus = get_inventory(simulate_option(args)).gpus()
    return open_quota_book(config, "", state, shared=shared_option(), gpus=gpus)
