"""``gpusched queue list | stop | health``: the provider's running work on this host and its Slurm cluster.

Each backend says how the command reaches it from its options (``Backend.command_handle``: Slurm through
``--slurm-conn-id`` or the local ``squeue``); the lease directory and the simulated inventory come from the same
options and environment as ``gpusched gpus``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from airflow_provider_gpusched.core.backends import DEFAULT_BACKEND, backend_names, backends, get_backend
from airflow_provider_gpusched.core.command_handle import CommandHandle
from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.text import printable


def _reached(args) -> dict[str, CommandHandle]:
    """How the command reaches each backend that takes options of its own (``Backend.command_handle``: Slurm
    through ``--slurm-conn-id`` or the local ``squeue``), by the backend's name, in registration order."""
    reached = {}
    for backend in backends():
        found = backend.command_handle(args, _connect(backend.name))
        if found is not None:
            reached[backend.name] = found
    return reached


def _connect(name: str) -> Callable[[str], CommandHandle]:
    """The backend's handle through an Airflow connection: its Airflow side's (imported only when asked)."""

    def connect(conn_id: str) -> CommandHandle:
        from airflow_provider_gpusched.backends import airflow_backend

        return airflow_backend(name).connect(conn_id)

    return connect


def _handles(reached: dict[str, CommandHandle]) -> dict[str, Any]:
    """The handles reached, by each backend's handle keyword (as ``list_work`` and ``stop_work`` take them)."""
    return {get_backend(name).handle: r.handle for name, r in reached.items() if r.handle is not None}


def _leases(args) -> tuple[object | None, str]:
    """``(lease manager, why there is none)``."""
    if getattr(args, "no_local", False):
        return None, "local GPUs not looked at (--no-local)"
    from airflow_provider_gpusched.cli_options import shared_option, simulate_option, state_dir_option
    from airflow_provider_gpusched.core.gpu.inventory import GPUInventoryError, get_inventory
    from airflow_provider_gpusched.core.gpu.leases import LeaseManager

    try:
        return LeaseManager(get_inventory(simulate_option(args)), state_dir_option(args), shared=shared_option()), ""
    except GPUInventoryError as exc:
        return None, f"local GPUs not looked at: {exc}"


def _orders(args):
    """The stop orders this host heeds: in its lease directory, whether or not its leases are looked at, and in
    a fleet the fleet's. In a fleet, orders are placed and lifted in the fleet's folder (every host heeds it)."""
    from airflow_provider_gpusched.cli_options import fleet_dir, shared_option, state_dir_option
    from airflow_provider_gpusched.core.fleet import orders_dir
    from airflow_provider_gpusched.core.gpu.lease_store import default_state_dir
    from airflow_provider_gpusched.core.safe_files import ensure_private_dir
    from airflow_provider_gpusched.core.stops import StopOrders

    shared = shared_option()
    fleet_folder = fleet_dir(args, required=False)
    if fleet_folder:
        folder = ensure_private_dir(orders_dir(fleet_folder), shared=shared, what="fleet stop orders directory")
        own = state_dir_option(args) or default_state_dir()
        return StopOrders(folder, 0o660 if shared else 0o600, also=[own] if os.path.isdir(own) else [])
    state_dir = ensure_private_dir(
        state_dir_option(args) or default_state_dir(), shared=shared, what="GPU lease directory"
    )
    return StopOrders(state_dir, 0o660 if shared else 0o600)


def _selector(args):
    from airflow_provider_gpusched.core.queue import known_states
    from airflow_provider_gpusched.core.stops import Selector

    unknown = [s for s in getattr(args, "state", None) or () if s.lower() not in known_states()]
    if unknown:
        raise GpuschedError(
            f"--state {unknown[0]!r}: not a state of listed work; expected one of {', '.join(sorted(known_states()))}"
        )
    return Selector(
        dag_id=args.dag or "",
        run_id=args.run or "",
        task_id=args.task or "",
        sweep=args.sweep or "",
        job_class=args.job_class or "",
        states=tuple(getattr(args, "state", None) or ()),
        ids=tuple(getattr(args, "ids", None) or ()),
    )


def _listing(args):
    from airflow_provider_gpusched.core.queue import list_work

    reached = _reached(args)
    manager, no_local = _leases(args)
    handles = {**_handles(reached), "manager": manager}
    listing = list_work(**handles, orders=_orders(args))
    listing.problems[:0] = [p for p in (*(r.unavailable for r in reached.values()), no_local) if p]
    fleet_folder = _fleet_dir_of(args)
    if fleet_folder:  # every GPU host's leases, from the records they published (no ssh)
        from airflow_provider_gpusched.core.fleet import queue_entries, read_fleet

        entries, problems = queue_entries(read_fleet(fleet_folder), fleet_folder)
        here = {e.id for e in listing.entries}  # this host's own leases, as its lease manager sees them
        listing.entries += [e for e in entries if e.id not in here]
        listing.problems += problems
    return listing, handles, reached


def _fleet_dir_of(args) -> str:
    from airflow_provider_gpusched.cli_options import fleet_dir

    return fleet_dir(args, required=False)


def _elapsed(seconds) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def _table(entries, quota_states: dict[str, str] | None = None) -> str:
    """The listing; with team quotas a ``group`` column: the lease's group, and ``borrowed`` when it runs beyond
    its group's quota (``quota_states``: lease id -> "within" / "borrowed")."""
    from airflow_provider_gpusched.core.text import format_table

    groups = any(e.tag.group for e in entries)
    rows = []
    for e in entries:
        what = e.tag.task or (f"({e.job_name})" if e.job_name else "-")
        sweep = e.tag.sweep + (f": {e.tag.trial}" if e.tag.trial else "") if e.tag.sweep else ""
        row = [
            e.backend,
            e.id,
            e.state + (f" ({e.reason})" if e.reason else ""),
            _elapsed(e.elapsed),
            "-" if e.requeues is None else e.requeues,
            e.where,
            e.job_class or "-",
        ]
        if groups:
            state = (quota_states or {}).get(e.id, "")
            row.append((e.tag.group or "-") + (" (borrowed)" if state == "borrowed" else ""))
        rows.append((*row, what, e.tag.run_id or "-", sweep[:60] or "-"))
    heads = ["backend", "id", "state", "elapsed", "requeues", "where", "class"]
    return format_table(rows, [*heads, *(["group"] if groups else []), "task", "run", "sweep"])


def _quotas(args):
    """The team quotas' view now (core/quota/report.QuotaView), or None without quotas."""
    from airflow_provider_gpusched.cli_options import quota_book, state_dir_option
    from airflow_provider_gpusched.core.quota.report import quota_view

    book, capacity = quota_book(args, state_dir_option(args) if hasattr(args, "state_dir") else None)
    return None if book is None else quota_view(book, capacity)


def queue_list(args) -> int:
    selector = _selector(args)
    count = 0
    while True:
        listing, _, reached = _listing(args)
        entries = [e for e in listing.entries if selector.matches(e)]
        quotas = _quotas(args)
        states = {k: v["state"] for k, v in quotas["leases"].items()} if quotas is not None else {}
        if args.json:
            print(
                json.dumps(
                    {
                        "time": time.time(),
                        **{name: r.reached or None for name, r in reached.items()},
                        "selector": selector.describe(),
                        "entries": [e.to_dict() for e in entries],
                        "problems": listing.problems,
                        "stop_orders": [o.describe() for o in listing.orders],
                        "quotas": quotas,
                    },
                    indent=2,
                )
            )
        else:
            if args.watch and sys.stdout.isatty():
                print("\033[H\033[2J", end="")
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            print(
                f"{stamp}  {len(entries)} of {len(listing.entries)} running ({printable(selector.describe())})"
                + "".join(
                    f"; {get_backend(name).summary} through {r.reached}" for name, r in reached.items() if r.reached
                )
            )
            if entries:
                print(_table(entries, states))
            if quotas is not None:
                from airflow_provider_gpusched.core.quota.report import quota_lines

                print("\n".join(printable(line) for line in quota_lines(quotas)))
            for order in listing.orders:  # a reason may hold newlines or terminal escapes: shown escaped
                print(f"stop order in force: {printable(order.describe())}")
            for problem in listing.problems:
                print(f"note: {printable(problem)}")
        sys.stdout.flush()
        count += 1
        if not args.watch or (args.count and count >= args.count):
            return 0
        try:
            time.sleep(args.watch)
        except KeyboardInterrupt:
            return 0


def queue_stop(args) -> int:
    from airflow_provider_gpusched.core.queue import stop_work
    from airflow_provider_gpusched.core.stops import DEFAULT_HOLD, StopRequest

    selector = _selector(args)
    if selector.empty and not args.all:
        raise GpuschedError(
            "say what to stop: job or lease ids, --dag, --run, --task, --sweep or --class "
            "(or --all for everything this provider runs)"
        )
    if args.all and not selector.empty:
        raise GpuschedError("--all stops everything: give it alone, without ids or --dag/--run/--task/--sweep/--class")
    request = StopRequest.now(args.reason)
    hold = DEFAULT_HOLD if args.hold is None else args.hold
    order_path = ""
    if not args.dry_run and hold > 0 and selector.by_tag:  # first, so that no task of it starts while we look
        order_path = _orders(args).place(selector, request, hold)
    listing, handles, _ = _listing(args)
    entries = [e for e in listing.entries if selector.matches(e)]

    def stop(chosen):
        here = [e for e in chosen if not e.host]
        there = [e for e in chosen if e.host]
        done = stop_work(here, request, **handles, dry_run=args.dry_run, wait=args.wait)
        if there and args.dry_run:
            done += stop_work(there, request, dry_run=True)
        elif there:  # on other GPU hosts: through the fleet directory, which their holders heed
            from airflow_provider_gpusched.cli_options import shared_option
            from airflow_provider_gpusched.core.fleet import stop_on_hosts

            done += stop_on_hosts(
                _fleet_dir_of(args), there, request, shared=shared_option(), wait=args.wait + _longest_grace()
            )
        return done

    outcomes = stop(entries)
    if not args.dry_run:  # a task that looked for stop orders just before ours was placed may have launched since
        seen = {e.id for e in entries}
        late = [e for e in _listing(args)[0].entries if selector.matches(e) and e.id not in seen]
        entries += late
        outcomes += stop(late) if late else []
    missing = [i for i in selector.ids if not any(i in (e.id, e.stop_id) for e in entries)]
    bad = [o for o in outcomes if o.action in ("failed", "still running")]
    if args.json:
        print(
            json.dumps(
                {
                    "selector": selector.describe(),
                    "dry_run": args.dry_run,
                    "stopped": [o.to_dict() for o in outcomes],
                    "not_found": missing,
                    "stop_order": order_path or None,
                    "problems": listing.problems,
                },
                indent=2,
            )
        )
    else:
        verb = "would stop" if args.dry_run else "stopping"
        print(f"{verb} {len(entries)} ({printable(selector.describe())})")
        for o in outcomes:
            print(printable(f"  {o.entry.describe()}: {o.action}" + (f" ({o.detail})" if o.detail else "")))
        for i in missing:
            print(f"  {printable(i)}: not running (no such Slurm job of this provider's, nor lease)")
        if order_path:
            where = "on any host of the fleet" if _fleet_dir_of(args) else "on this host"
            print(
                f"stop order for {hold:.0f}s: tasks of {selector.describe()} that start {where} now fail "
                f"at once ({order_path}; `gpusched queue lift` ends it)"
            )
        for problem in listing.problems:
            print(f"note: {printable(problem)}")
    return 1 if bad or (missing and not entries) else 0


def _longest_grace() -> float:
    """The longest grace period of the job classes (how long a stopped holder may take), 0 if unknown here."""
    try:
        from airflow_provider_gpusched import settings

        mapping = settings.job_class_mapping()
        return max(mapping[c].local.grace_period for c in ("normal", "idle"))
    except Exception:  # noqa: BLE001 - no Airflow configuration here: --wait alone
        return 0.0


def queue_lift(args) -> int:
    selector = _selector(args)
    removed = _orders(args).lift(None if selector.empty else selector)
    print(f"lifted {removed} stop order(s)")
    return 0


# -- health ---------------------------------------------------------------------------------------------------
def _airflow_checks(args, simulate: str | None, conn_id: str | None) -> list[Any]:
    """Pools against the job-class mapping (counted as ``gpusched pools sync --backend`` does, through ``conn_id``:
    the connection the command line named for that backend), and the triggerer's heartbeat, through Airflow's
    metadata database (where this host reaches it)."""
    from airflow_provider_gpusched.core.health import FAIL, OK, SKIP, WARN, Check

    checks = []
    try:
        from sqlalchemy.exc import SQLAlchemyError

        from airflow_provider_gpusched.pools import desired_pools, sync_pools

        rows = sync_pools(desired_pools(args.pools_backend, conn_id, simulate=simulate), dry_run=True)
        wrong = [r for r in rows if r["action"] != "unchanged"]
        if not rows:
            checks.append(Check("airflow pools", OK, "the job-class mapping names no pools"))
        elif wrong:
            found = ["missing" if r["was"] is None else f"{r['was']} slots" for r in wrong]
            checks.append(
                Check(
                    "airflow pools",
                    FAIL,
                    "; ".join(
                        f"{r['pool']}: {have}, the job classes want {r['slots']}"
                        for r, have in zip(wrong, found, strict=True)
                    )
                    + " (gpusched pools sync fixes it)",
                )
            )
        else:
            checks.append(Check("airflow pools", OK, ", ".join(f"{r['pool']} ({r['slots']} slots)" for r in rows)))
    except SQLAlchemyError as exc:
        return [
            Check(
                "airflow pools",
                SKIP,
                f"the Airflow metadata database is not reachable from here ({str(exc).splitlines()[0][:160]})",
            ),
            Check("triggerer alive", SKIP, "the Airflow metadata database is not reachable from here"),
        ]
    except Exception as exc:  # noqa: BLE001 - the check reports what went wrong
        checks.append(
            Check(
                "airflow pools",
                FAIL,
                f"cannot check: {str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}",
            )
        )
    # Airflow's own check: a TriggererJob whose heartbeat is recent (`airflow jobs check`, exit 0 / 1)
    argv = [sys.executable, "-m", "airflow", "jobs", "check", "--job-type", "TriggererJob"]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        checks.append(Check("triggerer alive", WARN, f"airflow jobs check: {exc}"))
        return checks
    text = (result.stdout + result.stderr).strip()
    last = text.splitlines()[-1][:200] if text else ""
    if result.returncode == 0:
        checks.append(Check("triggerer alive", OK, f"airflow jobs check: {last}"))
    elif "No alive jobs found" in text:
        checks.append(
            Check(
                "triggerer alive",
                FAIL,
                "no triggerer with a recent heartbeat: deferred tasks (Slurm "
                "jobs, GPU waits) never resume (start one: airflow triggerer)",
            )
        )
    else:
        checks.append(Check("triggerer alive", WARN, f"airflow jobs check could not tell: {last}"))
    return checks


def _job_classes_checked(use_airflow: bool, args) -> tuple[Any, Any]:
    """The job-class mapping health checks against, and the check of its file: a FAIL while the file is broken (its
    last good version is the one in force and checked, core/quota/last_good.py; the defaults when there is none)."""
    from airflow_provider_gpusched.core.health import check_settings_file
    from airflow_provider_gpusched.core.job_classes import JobClassMapping

    try:
        if use_airflow:
            from airflow_provider_gpusched import settings

            mapping = settings.job_class_mapping()
        else:
            from airflow_provider_gpusched.cli_options import shared_option, state_dir_option
            from airflow_provider_gpusched.core.gpu.lease_store import default_state_dir
            from airflow_provider_gpusched.core.quota.last_good import JOB_CLASSES

            state = state_dir_option(args) or default_state_dir()
            mapping = JOB_CLASSES.load(os.environ.get("AIRFLOW__GPUSCHED__JOB_CLASSES"), state, shared=shared_option())
    except GpuschedError as exc:  # broken, and never good here
        return JobClassMapping(), check_settings_file("job-class file", "", f"{exc} (no good version of it was read)")
    return mapping, check_settings_file("job-class file", mapping.source, mapping.config_error)


def _backend_checks(args, mapping: Any, reached: dict[str, CommandHandle]) -> list[Any]:
    """Every backend's own checks (``Backend.health_checks``), in registration order, then the fleet's."""
    from airflow_provider_gpusched.cli_options import shared_option, simulate_option, state_dir_option
    from airflow_provider_gpusched.core.backends import backends
    from airflow_provider_gpusched.core.health import HealthContext

    fleet_dir = _fleet_dir_of(args)
    options = {
        "job_classes": mapping,
        "simulate": simulate_option(args),
        "state_dir": state_dir_option(args),
        "shared": shared_option(),
        "fleet_dir": fleet_dir,
    }
    checks = []
    for backend in backends():
        found = reached.get(backend.name)
        checks += backend.health_checks(HealthContext(**(found.health_fields() if found else {}), **options))
    if fleet_dir:
        from airflow_provider_gpusched.core.health import check_fleet

        checks += check_fleet(fleet_dir)
    return checks


def _folder_checks() -> list[Any]:
    """The folders the provider writes under Airflow: the sweeps' results, and each backend's own."""
    from airflow_provider_gpusched import settings
    from airflow_provider_gpusched.core.backends import backends
    from airflow_provider_gpusched.core.health import check_writable

    folders = [("sweep results root", settings.sweep_results_root())]
    for backend in backends():  # each names a [gpusched] option, read by the settings function of that name
        folders += [(name, getattr(settings, option)()) for name, option in backend.folders.items()]
    return [check_writable(name, path) for name, path in folders]


def queue_health(args) -> int:
    from airflow_provider_gpusched.core.health import FAIL, Check

    use_airflow = not args.no_airflow
    checks: list[Check] = []
    reached = _reached(args)
    mapping, classes_check = _job_classes_checked(use_airflow, args)
    checks.append(classes_check)
    checks += _backend_checks(args, mapping, reached)
    try:
        quotas = _quotas(args)
    except GpuschedError as exc:
        checks.append(Check("team quotas", FAIL, str(exc)))
    else:
        if quotas is not None:
            from airflow_provider_gpusched.core.health import check_quotas

            checks += check_quotas(quotas)
    if use_airflow:
        from airflow_provider_gpusched.cli_options import simulate_option

        checks += _folder_checks()
        pools_through = reached.get(args.pools_backend)
        checks += _airflow_checks(args, simulate_option(args), pools_through.conn_id if pools_through else None)
    return _report_health(checks, args.json)


def _report_health(checks: list[Any], as_json: bool) -> int:
    """The checks, as lines or JSON; 1 when one failed."""
    failed = [c for c in checks if c.failed]
    if as_json:
        print(json.dumps({"healthy": not failed, "checks": [c.to_dict() for c in checks]}, indent=2))
    else:
        for c in checks:
            print(c.line())
        print(
            f"{len(checks) - len(failed)} of {len(checks)} checks passed or warned; {len(failed)} failed"
            if failed
            else f"healthy: {len(checks)} checks, none failed"
        )
    return 1 if failed else 0


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds (a number >= 0), got {text!r}") from None
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"expected seconds (a number >= 0), got {text!r}")
    return value


def add_queue_parser(sub) -> None:
    queue = sub.add_parser("queue", help="what the provider runs (Slurm jobs, local GPU leases): list, stop, health")
    commands = queue.add_subparsers(dest="queue_command", required=True)

    def common(p, selectors: bool = True) -> None:
        # read by the Slurm backend's command_handle (core/slurm/command_line.py); declared here, as building the
        # command line loads no backend (`gpusched partition` pays for no Slurm package)
        p.add_argument(
            "--slurm-conn-id",
            help="reach Slurm through this Airflow connection (default: the local squeue when it is on the PATH)",
        )
        p.add_argument("--no-slurm", action="store_true", help="leave Slurm out")
        p.add_argument("--no-local", action="store_true", help="leave this host's GPU leases out")
        p.add_argument("--simulate", help="simulated inventory where NVML finds no GPU (as for gpusched gpus)")
        p.add_argument("--state-dir", help="lease directory (default: $GPUSCHED_STATE_DIR or <tmp>/gpusched-<uid>)")
        p.add_argument(
            "--fleet-dir",
            help="a fleet's directory: every GPU host's work from the records the hosts "
            "published, stopped through it (default: [gpusched] fleet_dir; "
            "docs/fleet.md)",
        )
        p.add_argument("--no-fleet", action="store_true", help="this host only, even in a fleet")
        if selectors:
            p.add_argument("--dag", help="only this DAG's work")
            p.add_argument("--run", help="only this DAG run's work (its run id)")
            p.add_argument("--task", help="only this task's work (task id, every map index)")
            p.add_argument("--sweep", help="only this sweep's trials (the sweep's name)")
            p.add_argument("--class", dest="job_class", choices=["normal", "idle"], help="only this job class")
        p.add_argument("--json", action="store_true", help="machine-readable output")

    p = commands.add_parser("list", help="everything this provider launched that has not finished")
    common(p)
    p.add_argument(
        "--state",
        action="append",
        help="only work in this state (RUNNING, PENDING, running, stopping, ...); repeat for several",
    )
    p.add_argument("--watch", type=_non_negative, metavar="SECONDS", help="refresh every SECONDS until Ctrl-C")
    p.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)  # refreshes before --watch ends (tests)
    p.set_defaults(func=queue_list)

    p = commands.add_parser(
        "stop",
        help="stop work: cancel its Slurm jobs, stop its local GPU processes (SIGTERM, "
        "grace period, SIGKILL); its Airflow tasks fail saying who stopped them",
    )
    p.add_argument("ids", nargs="*", help="Slurm job ids or lease ids (gpusched queue list shows them)")
    common(p)
    p.add_argument("--all", action="store_true", help="everything this provider runs here")
    p.add_argument("--reason", default="", help="said in the stopped tasks' failure message")
    p.add_argument("--dry-run", action="store_true", help="list what would be stopped, stop nothing")
    p.add_argument(
        "--hold",
        type=_non_negative,
        help="seconds for which tasks of the same --dag/--run/--task/"
        "--sweep/--class fail at once instead of starting "
        "(default 600; 0: no stop order)",
    )
    p.add_argument(
        "--wait",
        type=_non_negative,
        default=30.0,
        help="seconds past the grace period to wait for local work to stop before killing it (default 30)",
    )
    p.set_defaults(func=queue_stop)

    p = commands.add_parser(
        "lift", help="end stop orders (all, or those of the given --dag/--run/--task/--sweep/--class)"
    )
    common(p)
    p.set_defaults(func=queue_lift)

    p = commands.add_parser(
        "health",
        help="check the setup: Slurm, partitions, QOS, preemption, GPUs, lease "
        "directory, folders, Airflow pools, triggerer; exit 1 on a failure",
    )
    common(p, selectors=False)
    p.add_argument(
        "--no-airflow", action="store_true", help="leave out the checks that need Airflow's configuration and database"
    )
    p.add_argument(
        "--pools-backend",
        choices=sorted(backend_names()),
        default=DEFAULT_BACKEND,
        help="count pool slots as gpusched pools sync --backend does (default local)",
    )
    p.set_defaults(func=queue_health)
