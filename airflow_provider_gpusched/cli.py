"""The ``gpusched`` command line: look at and act on the work this provider schedules."""

from __future__ import annotations

import argparse
import json
import sys

from airflow_provider_gpusched.cli_options import fleet_dir, shared_option, simulate_option, state_dir_option
from airflow_provider_gpusched.core.backends import DEFAULT_BACKEND, backend_names
from airflow_provider_gpusched.core.errors import GpuschedError

# Each subcommand imports what it uses, inside its function: `gpusched partition` must not pay for the
# Slurm client (asyncio) or the sweep package, nor `gpusched slurm status` for numpy.


def _slurm_client():
    from airflow_provider_gpusched.core.slurm import SlurmClient, SlurmTransport

    return SlurmClient(SlurmTransport())


def _slurm_status(args) -> int:
    client = _slurm_client()
    statuses = client.statuses(args.job_ids)
    if args.json:
        print(json.dumps({k: v.to_dict() for k, v in statuses.items()}, indent=2))
    else:
        for status in statuses.values():
            print(status.describe())
            for task in status.tasks.values():
                print("  " + task.describe())
    return 0


def _slurm_cancel(args) -> int:
    _slurm_client().cancel(args.job_ids, signal=args.signal)
    return 0


def _slurm_tail(args) -> int:
    import os

    if os.path.isdir(args.path):
        raise GpuschedError(f"{args.path}: is a directory, not a job output file")
    if not os.path.exists(args.path):
        raise GpuschedError(f"{args.path}: no such file (has the job started? Slurm creates it when it starts)")
    if not os.access(args.path, os.R_OK):
        raise GpuschedError(f"{args.path}: not readable by this user")
    import stat

    if not stat.S_ISREG(os.stat(args.path).st_mode):  # a FIFO or a device would block the read forever
        raise GpuschedError(f"{args.path}: not a regular file (a job output file is one)")
    print(_slurm_client().tail(args.path, args.lines))
    return 0


def _sweep_folder(args) -> str:
    """A sweep's folder from NAME (under --results-root, the configured root) or a folder path."""
    import os

    from airflow_provider_gpusched.core.sweep.records.store import check_sweep_name
    from airflow_provider_gpusched.core.sweep.running.session import default_results_root

    if os.sep in args.sweep or args.sweep in (".", ".."):
        folder = os.path.abspath(args.sweep)
    else:
        check_sweep_name(args.sweep, "NAME")
        folder = os.path.join(os.path.abspath(args.results_root or default_results_root()), args.sweep)
    if not os.path.isdir(os.path.join(folder, "trials")) and not os.path.isdir(os.path.join(folder, "search")):
        raise GpuschedError(f"{folder}: not a sweep's folder (no trials/ in it); give NAME and --results-root")
    return folder


def _sweep_dashboard(args) -> int:
    """optuna-dashboard on the sweep's own Optuna journal, as it is (nothing converted or copied)."""
    import os

    folder = _sweep_folder(args)
    journal = os.path.join(folder, "search", "optuna.journal")
    if not os.path.isfile(journal):
        raise GpuschedError(
            f"{journal}: no Optuna journal; only search: optuna sweeps keep one (for every sweep, the Sweeps tab, "
            f"MLflow, TensorBoard or W&B: docs/tracking.md)"
        )
    try:
        import optuna_dashboard
    except ImportError as exc:
        raise GpuschedError(
            f"optuna-dashboard is not installed ({exc}): pip install 'airflow-provider-gpusched[dashboard]'"
        ) from None
    from airflow_provider_gpusched.core.sweep.records.journal import open_journal

    storage = open_journal(journal)
    print(f"optuna-dashboard: {journal} at http://{args.host}:{args.port}/ (Ctrl-C stops it)", flush=True)
    optuna_dashboard.run_server(storage, host=args.host, port=args.port)
    return 0


def _sweep_track(args) -> int:
    """Send a sweep's trials to its trackers now: what an earlier sync could not send (a server that was down),
    or a sweep that ran before it had trackers (``--to``)."""
    import os

    from airflow_provider_gpusched.core.sweep.records.store import read_json
    from airflow_provider_gpusched.core.sweep.running.trial_run import Manifest
    from airflow_provider_gpusched.core.tracking import SweepRun, TrackingSync, parse_tracking
    from airflow_provider_gpusched.core.tracking.config import score_of
    from airflow_provider_gpusched.tracking import build_callbacks

    folder = _sweep_folder(args)
    manifests: dict[str | None, Manifest] = {}
    for base, _dirs, files in os.walk(folder):
        for name in files:
            if name.endswith("manifest.json") and os.path.relpath(base, folder).split(os.sep)[0] in (
                ".",
                "runs",
                "rounds",
            ):
                try:
                    m = Manifest(os.path.join(base, name))
                except GpuschedError:
                    continue
                if m.record.group_of is None and (args.run is None or m.record.run == args.run):
                    manifests.setdefault(m.record.run, m)
    if not manifests:
        raise GpuschedError(f"{folder}: no plan of {'run ' + repr(args.run) if args.run else 'any run'} in it")
    summary = read_json(os.path.join(folder, "summary.json"))
    told = 0
    for run, manifest in sorted(manifests.items(), key=lambda kv: str(kv[0])):
        record = manifest.record
        configs = parse_tracking(args.to.split(",") if args.to else record.tracking, "--to" if args.to else "tracking")
        callbacks = build_callbacks(configs, folder, print)
        if not callbacks:
            print(f"run {run}: no trackers (the spec has no tracking; give --to mlflow,tensorboard,wandb)")
            continue
        sweep = SweepRun(
            sweep=record.sweep, run=run, folder=folder, search=record.search or "", objective=record.objective
        )
        ends = summary if isinstance(summary, dict) and summary.get("run") == run else None
        outcome = TrackingSync(sweep, callbacks, score=score_of(record.objective)).sync(final=True, summary=ends)
        print(f"run {run}: {outcome.describe()}")
        told += sum(o.told for o in outcome.callbacks.values())
        if any(o.error for o in outcome.callbacks.values()):
            return 1
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


def _gpus(args) -> int:
    import time

    from airflow_provider_gpusched.core.gpu.accounting import accounting_totals
    from airflow_provider_gpusched.core.gpu.inventory import get_inventory
    from airflow_provider_gpusched.core.gpu.lease_store import LeaseStore
    from airflow_provider_gpusched.core.gpu.leases import LeaseManager
    from airflow_provider_gpusched.core.gpu.placement import gpu_usage
    from airflow_provider_gpusched.core.units import format_bytes

    if not args.this_host and fleet_dir(args, required=False):
        return _fleet_hosts(args)  # the head node's view: every host of the fleet, from its records
    inventory = get_inventory(simulate_option(args))
    manager = LeaseManager(inventory, state_dir_option(args), shared=shared_option())
    gpus, leases = manager.snapshot()
    yielding = {lease.lease_id: manager.yields.request_for(lease.lease_id) for lease in leases}
    yielding = {k: v for k, v in yielding.items() if v}
    waiting = manager.yields.waiting()
    totals = accounting_totals(manager.ledger.records())
    usage = gpu_usage(gpus, LeaseStore.views(gpus, leases))
    if args.json:
        driver = manager.inventory.driver_version() if manager.inventory.source == "nvml" else None
        print(
            json.dumps(
                {
                    "source": manager.inventory.source,
                    "driver": driver,
                    "state_dir": manager.state_dir,
                    "gpus": [
                        {
                            **g.to_dict(),
                            "reserved": usage[g.index].reserved,
                            "available": usage[g.index].available(),
                            "foreign_processes": usage[g.index].foreign_processes,
                        }
                        for g in gpus
                    ],
                    "leases": [
                        {**lease.to_dict(), "yield_requested": yielding.get(lease.lease_id)} for lease in leases
                    ],
                    "waiting": waiting,
                    "gpu_time": totals,
                    "unreadable": [{"file": f, "problem": why} for f, why in manager.unreadable],
                },
                indent=2,
            )
        )
        return 0
    simulated = manager.inventory.source == "simulated"
    source = (
        "SIMULATED: no GPU found through NVML" if simulated else f"NVML, driver {manager.inventory.driver_version()}"
    )
    print(f"GPUs ({source}), leases in {manager.state_dir}")
    print(
        f"{'GPU':>3}  {'name':<24} {'total':>9} {'used':>9} {'reserved':>9} {'available':>9} {'util':>5} "
        f"{'foreign':>7}  uuid"
    )
    for g in gpus:
        u = usage[g.index]
        util = "-" if g.utilization is None else f"{g.utilization}%"
        print(
            f"{g.index:>3}  {g.name[:24]:<24} {format_bytes(g.memory_total):>9} {format_bytes(g.memory_used):>9} "
            f"{format_bytes(u.reserved):>9} {format_bytes(max(0, u.available())):>9} {util:>5} "
            f"{u.foreign_processes:>7}  {g.uuid}"
        )
    print()
    now = time.time()
    if not leases:
        print("no leases")
    else:
        print(f"{'lease':<16} {'GPUs':<8} {'memory':<12} {'class':<7} {'prio':>4} {'pid':>7} {'age':>7}  owner")
        for lease in leases:
            memory = "whole" if lease.whole else format_bytes(next(iter(lease.memory.values())))
            state = ""
            if lease.orphaned_at:
                state = f"  [ORPHAN: its worker died; stopping it since {now - lease.orphaned_at:.0f}s]"
            elif lease.lease_id in yielding:
                state = f"  [yielding to {(yielding[lease.lease_id] or {}).get('by', '?')}]"
            elif lease.preemptible:
                state = "  [preemptible]"
            print(
                f"{lease.lease_id:<16} {','.join(map(str, lease.gpus)):<8} {memory:<12} {lease.job_class:<7} "
                f"{lease.priority:>4} {lease.pid:>7} {now - lease.created:>6.0f}s  {lease.owner}{state}"
            )
    for mark in waiting:
        print(f"waiting (normal class, idle work held back): {mark.get('owner', '?')}")
    for _path, why in manager.unreadable:
        print(f"UNREADABLE lease file of a live holder (its GPUs count as taken): {why}")
    if totals:
        print()
        print("GPU time on this host (from the ledger):")
        for job_class, t in sorted(totals.items()):
            print(
                f"  {job_class:<7} {t['gpu_seconds']:>10.1f} GPU-s used in {t['attempts']} attempt(s), "
                f"{t['lost_gpu_seconds']:.1f} GPU-s lost to {t['preemptions']} preemption(s)"
            )
    return 0


def _sweep_run(args) -> int:
    from airflow_provider_gpusched.core.backends import get_backend
    from airflow_provider_gpusched.core.sweep.records.store import FAILED_STATES
    from airflow_provider_gpusched.core.sweep.running.terminal import SweepInterrupted, load_spec, run_sweep

    spec = load_spec(args.spec)
    handle = get_backend(args.backend).default_handle(
        simulate=simulate_option(args), state_dir=state_dir_option(args, create=True), shared=shared_option()
    )
    try:
        summary = run_sweep(
            spec,
            results_root=args.results_root,
            handle=handle,
            parallel=args.parallel,
            force_rerun=True if args.force_rerun else None,
            backend=args.backend,
        )
    except SweepInterrupted as exc:
        print(str(exc), file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps({k: v for k, v in summary.items() if k != "text"}, indent=2, default=str))
    else:
        print(summary["text"])
    bad = sum(summary["counts"].get(state, 0) for state in FAILED_STATES)
    allowed = spec.max_failed_trials
    return 1 if allowed is not None and bad > allowed else 0


def _sweep_schema(args) -> int:
    from airflow_provider_gpusched.core.sweep.definition.schema import sweep_schema

    print(json.dumps(sweep_schema(), indent=2))
    return 0


def _sweep_preview(args) -> int:
    from airflow_provider_gpusched.core.sweep.parts.expand import DEFAULT_LABELS
    from airflow_provider_gpusched.core.sweep.running.session import SweepSession
    from airflow_provider_gpusched.core.sweep.running.terminal import load_spec
    from airflow_provider_gpusched.core.text import format_table

    spec = load_spec(args.spec)
    if args.force_rerun:
        spec.force_rerun = True
    preview = SweepSession(spec, args.results_root).preview()
    if args.labels:  # GPU Task Scheduler's "all test instances in a string"
        if spec.in_rounds or spec.asks_as_it_goes:
            raise GpuschedError(
                f"{args.spec}: search {spec.search} makes its trials "
                f"{'round by round' if spec.in_rounds else 'as its workers ask'}: no labels before it runs"
            )
        print((spec.label_format or DEFAULT_LABELS).instance_separator.join(t["label"] for t in preview["table"]))
        return 0
    if args.json:
        print(json.dumps(preview, indent=2, default=str))
        return 0
    print(f"sweep {preview['sweep']} ({preview['search']}): {preview['trials']} trials; results in {preview['folder']}")
    if spec.in_rounds:
        print(format_table([(r["round"], r["trials"]) for r in preview["rounds"]], ["round", "trials"]))
        if preview.get("space_size") is not None:
            print(f"the space holds {preview['space_size']:,} distinct points, and the search runs each at most once")
        print("trials of later rounds depend on earlier scores: nothing more to show before running")
        return 0
    if preview.get("asynchronous"):
        print(
            f"asynchronous: {preview['workers']} worker(s), each asking the study for its next trial as its slot frees"
        )
        if preview.get("space_size") is not None:
            print(f"the space holds {preview['space_size']:,} distinct points, and the search runs each at most once")
        if preview["would_skip"]:
            print(
                f"would run {preview['would_run']}, skip {preview['would_skip']} (already succeeded or pruned; "
                f"--force-rerun runs them again)"
            )
        print("which parameters each trial gets depends on the scores so far: nothing more to show before running")
        return 0
    if preview["would_skip"]:
        print(
            f"would run {preview['would_run']}, skip {preview['would_skip']} (already succeeded or pruned; "
            f"--force-rerun runs them again)"
        )
    elif spec.force_rerun:
        print(
            f"would run {preview['would_run']} (--force-rerun: trials that already succeeded or were pruned run again)"
        )
    else:
        print(f"would run {preview['would_run']}; none has succeeded yet, nothing to skip")
    rows = [(t["index"], t["trial_id"], t["state"], t["label"] or "-") for t in preview["table"][: args.limit]]
    print(format_table(rows, ["#", "trial", "state", "parameters"]))
    if len(preview["table"]) > args.limit:
        print(f"... {len(preview['table']) - args.limit} more (--limit N, or --json for all)")
    return 0


def _sweep_results(args) -> int:
    import os

    from airflow_provider_gpusched.core.sweep.parts.objective import Objective, format_leaderboard
    from airflow_provider_gpusched.core.sweep.records.store import format_counts, read_json

    if not os.path.isdir(args.folder):
        raise GpuschedError(f"{args.folder}: no such sweep folder (expected <results root>/<sweep name>)")
    path = os.path.join(args.folder, "summary.json")
    summary = read_json(path)
    if summary is None:
        raise GpuschedError(f"{path}: missing (has the sweep's collect task run?)")
    if not isinstance(summary, dict) or "_unreadable" in summary:
        raise GpuschedError(
            f"{path}: malformed: {summary.get('_unreadable') if isinstance(summary, dict) else 'not an object'}"
        )
    if not isinstance(summary.get("table"), dict) or not isinstance(summary.get("counts"), dict):
        raise GpuschedError(f"{path}: malformed: expected the keys 'table' and 'counts' written by collect")
    board = read_json(os.path.join(args.folder, "leaderboard.json"))
    if board is not None and (
        not isinstance(board, dict)
        or not isinstance(board.get("leaderboard"), list)
        or not isinstance(board.get("objective"), dict)
    ):
        raise GpuschedError(
            f"{os.path.join(args.folder, 'leaderboard.json')}: malformed: expected 'objective' "
            f"and 'leaderboard' written by collect"
        )
    if args.json:
        listed = {"counts": summary["counts"], "leaderboard": (board or {}).get("leaderboard")}
        print(json.dumps({**listed, "problems": _problems(summary)}, indent=2))
        return 0
    print(f"sweep {summary.get('sweep', '?')} ({summary.get('search', '?')}) in {summary.get('folder', args.folder)}")
    print(format_counts(summary["table"]))
    if isinstance(board, dict):
        print(format_leaderboard(board["leaderboard"], Objective(**board["objective"])))
    problems = _problem_lines(_problems(summary))
    if problems:
        print(problems)
    progress = _latest_reports(args.folder, summary.get("records"))
    if progress:
        print(progress)
    return 0


def _problems(summary: dict) -> list:
    """The run's trials that failed, were invalid or timed out (summary.json's records, as collect wrote them)."""
    from airflow_provider_gpusched.core.sweep.records.store import FAILED_STATES

    records = summary.get("records")
    return [
        {k: r.get(k) for k in ("index", "trial_id", "label", "state", "error")}
        for r in (records if isinstance(records, list) else [])
        if isinstance(r, dict) and r.get("state") in FAILED_STATES
    ]


def _problem_lines(problems, limit: int = 20) -> str:
    """The trials that failed, were invalid or timed out, each with its error line, as the Sweeps tab and the
    check_trials task show them (``problems`` as collect wrote them in summary.json; anything else is skipped)."""
    from airflow_provider_gpusched.core.text import printable

    rows = [p for p in problems if isinstance(p, dict)] if isinstance(problems, list) else []
    if not rows:
        return ""
    lines = [f"{len(rows)} trial(s) failed or gave an invalid result:"]
    for p in rows[:limit]:
        name = printable(str(p.get("label") or p.get("trial_id") or "?"))[:80]
        error = printable(str(p.get("error")))[:300]
        lines.append(f"  {p.get('index', '?')} {name} [{p.get('state', '?')}]: {error}")
    if len(rows) > limit:
        lines.append(f"  ... {len(rows) - limit} more (summary.json)")
    return "\n".join(lines)


def _latest_reports(folder: str, records, limit: int = 20) -> str:
    """The last intermediate report of each trial that made any, read now from its folder (running trials
    first): live progress, not as of the last collect."""
    import os

    from airflow_provider_gpusched.core.sweep.records.reports import REPORTS_FILE, read_reports, summarise
    from airflow_provider_gpusched.core.text import format_table, printable

    if not isinstance(records, list):
        return ""
    rows, problems = [], []
    for record in records:
        if not isinstance(record, dict) or not isinstance(record.get("folder"), str):
            continue
        # only a folder of this sweep: the record came from disk
        trial_dir = os.path.join(folder, "trials", os.path.basename(record["folder"]))
        found, bad = read_reports(os.path.join(trial_dir, REPORTS_FILE))
        problems += bad
        latest = summarise(found)
        if latest is None:
            continue
        metrics = ", ".join(
            f"{k}={v:.6g}" if isinstance(v, (int, float)) else f"{k}={v}" for k, v in list(latest["last"].items())[:6]
        )
        rows.append(
            (
                record.get("state") != "running",
                record.get("index", "?"),
                printable(str(record.get("label") or record.get("trial_id", "?")))[:40],
                record.get("state", "?"),
                latest["last_step"],
                metrics,
                latest.get("checkpoint", ""),
            )
        )
    if not rows and not problems:
        return ""
    rows.sort(key=lambda r: (r[0], r[1] if isinstance(r[1], int) else 0))
    text = f"latest reports ({len(rows)} trials; state as of the last collect):\n"
    text += format_table([r[1:] for r in rows[:limit]], ["#", "trial", "state", "step", "metrics", "checkpoint"])
    if len(rows) > limit:
        text += f"\n... {len(rows) - limit} more"
    if problems:
        text += "\nlines that are not reports:\n" + "\n".join(f"  {printable(p)}" for p in problems[:10])
    return text


def _pools_sync(args) -> int:
    from airflow.sdk.exceptions import AirflowNotFoundException
    from sqlalchemy.exc import SQLAlchemyError

    from airflow_provider_gpusched.pools import desired_pools, sync_pools

    try:
        plan = desired_pools(args.backend, args.slurm_conn_id)
    except AirflowNotFoundException:
        raise GpuschedError(
            f"--slurm-conn-id {args.slurm_conn_id}: no such Airflow connection (airflow connections list)"
        ) from None
    try:
        rows = sync_pools(plan, dry_run=args.dry_run)
    except SQLAlchemyError as exc:
        first = str(exc).splitlines()[0][:300]
        raise GpuschedError(
            f"cannot use the Airflow metadata database ({first}); is AIRFLOW_HOME / "
            f"sql_alchemy_conn right, and has 'airflow db migrate' run?"
        ) from None
    if args.json:
        print(json.dumps({"dry_run": args.dry_run, "pools": rows}, indent=2))
        return 0
    if not rows:
        print("the job-class mapping names no pools: nothing to do")
        return 0
    verb = (
        {"create": "would create", "update": "would update"}
        if args.dry_run
        else {"create": "created", "update": "updated"}
    )
    for r in rows:
        what = verb.get(r["action"], "unchanged")
        was = f" (was {r['was']})" if r["action"] == "update" else ""
        whom = f"{', '.join(r['classes'])}-class work" if r["classes"] else f"group {r['pool'].split('_group_', 1)[-1]}"
        print(f"{r['pool']}: {what}, {r['slots']} slots{was}, for {whom}")
    return 0


def _quota_book(args):
    from airflow_provider_gpusched.cli_options import quota_book

    book, capacity = quota_book(args, state_dir_option(args))
    if book is None:
        print("no team quotas: set [gpusched] quotas (AIRFLOW__GPUSCHED__QUOTAS) or give --quotas (docs/quotas.md)")
    return book, capacity


def _quota_accounts(args) -> int:
    from airflow_provider_gpusched.core.quota.slurm import sacctmgr_plan

    book, capacity = _quota_book(args)
    if book is not None:
        for argv in sacctmgr_plan(book.config, args.cluster, int(capacity) or None):
            print(" ".join(argv))
    return 0


def _quota(args) -> int:
    from airflow_provider_gpusched.core.quota.report import quota_lines, quota_view, starved

    book, capacity = _quota_book(args)
    if book is None:
        return 0
    view = quota_view(book, capacity)
    if args.json:
        print(json.dumps({**view, "config": book.config.to_dict(), "starved": starved(view)}, indent=2))
        return 0
    print("\n".join(quota_lines(view)))
    return 0


def _partition(args) -> int:
    from airflow_provider_gpusched.core.partition import PartitionInputError, load_problem, partition
    from airflow_provider_gpusched.core.partition.report import (
        explain_table,
        not_proven_note,
        schedule_json,
        schedule_yaml,
    )

    if args.time_limit is not None and not args.time_limit > 0:  # said before the inputs are read
        raise PartitionInputError(f"--time-limit: expected a number of seconds > 0, got {args.time_limit}")
    problem = load_problem(
        args.models,
        args.device_types,
        args.devices,
        model=args.model,
        dtype=args.dtype,
        batch_size=args.batch_size,
        buffers_in=args.buffers_in,
        buffers_out=args.buffers_out,
    )
    schedule = partition(problem, time_limit=args.time_limit)
    if not schedule.optimal:
        print(f"gpusched: warning: {not_proven_note(schedule, args.time_limit)}", file=sys.stderr)
    if args.json:
        print(json.dumps(schedule_json(problem, schedule), indent=2))
        return 0
    print(schedule_yaml(schedule))
    if not schedule.optimal:
        print(f"# {not_proven_note(schedule, args.time_limit)}")
    if args.explain:
        print("\n".join("# " + line for line in explain_table(problem, schedule).splitlines()))
    return 0


def _profile(args) -> int:
    from airflow_provider_gpusched.core.partition.problem import PartitionInputError

    try:
        import torch  # noqa: F401 - only to say clearly that it is needed
    except ImportError:
        raise PartitionInputError(
            "gpusched profile needs PyTorch: pip install 'airflow-provider-gpusched[examples]' "
            "(or the torch build for your GPU)"
        ) from None
    from airflow_provider_gpusched.core.partition.profile import (
        check_profile_files,
        host_device_type,
        parse_shape,
        profile_model,
        time_limit,
        write_profile,
    )
    from airflow_provider_gpusched.core.text import format_table

    shape = parse_shape(args.input_shape) if args.input_shape else None
    for flag, value in (("--bw-mbps", args.bw_mbps), ("--mem-mb", args.mem_mb)):
        if value is not None and not value > 0:
            raise PartitionInputError(f"{flag}: expected a number > 0, got {value}")
    if not args.time_limit > 0:
        raise PartitionInputError(f"--time-limit: expected a number of seconds > 0, got {args.time_limit}")
    device_type = args.device_type or host_device_type()
    check_profile_files(
        models_file=args.models, device_types_file=args.device_types, device_type=device_type, bw_mbps=args.bw_mbps
    )  # what the write would refuse, said before minutes of measuring
    with time_limit(args.time_limit, f"profiling {args.model}"):
        profile = profile_model(
            args.model,
            dtype=args.dtype,
            batch_size=args.batch_size,
            input_shape=shape,
            device=args.device,
            warmup=args.warmup,
            repeat=args.repeat,
        )
    written = write_profile(
        profile,
        models_file=args.models,
        device_types_file=args.device_types,
        device_type=device_type,
        name=args.name,
        bw_mbps=args.bw_mbps,
        mem_mb=args.mem_mb,
    )
    mib = 1024 * 1024
    rows = [
        (
            i + 1,
            lp.name,
            f"{lp.time_s * 1000:.3f}",
            f"{lp.weights_bytes / mib:.3f}",
            f"{lp.activation_bytes / mib:.3f}",
            lp.out_elements,
        )
        for i, lp in enumerate(profile.layers)
    ]
    print(format_table(rows, ["layer", "module", "forward ms", "weights MiB", "activations MiB", "out/sample"]))
    print(
        f"{written['model']}: {written['layers']} layers, {profile.dtype}, micro-batch {profile.batch_size}, input "
        f"{','.join(map(str, profile.input_shape))}, measured on {profile.device}; wrote {args.models} and "
        f"{args.device_types} (device type {device_type})"
    )
    return 0


def _fleet_hosts(args) -> int:
    import time

    from airflow_provider_gpusched.core import fleet
    from airflow_provider_gpusched.core.units import format_bytes

    view = fleet.read_fleet(fleet_dir(args))
    now = time.time()
    if args.json:
        print(
            json.dumps(
                {
                    "hosts": [
                        {
                            **h.to_dict(),
                            "fresh": h.fresh(now),
                            "age": round(h.age(now), 1),
                            "clock_off": round(h.clock_off, 1),
                        }
                        for h in view.hosts
                    ],
                    "unreadable": [{"file": f, "problem": why} for f, why in view.unreadable],
                },
                indent=2,
            )
        )
        return 0
    if not view.hosts:
        print("no host has published a record (is [gpusched] fleet_dir the same on the hosts?)")
    for h in view.hosts:
        state = "up" if h.fresh(now) else f"GONE (last record {h.age(now):.0f}s ago)"
        if h.clock_off:
            state += f"; {h.clock_note()}"
        simulated = " SIMULATED" if h.source == "simulated" else ""
        print(f"{h.host}: {h.sizes()}{simulated}, {len(h.leases)} lease(s), {state}")
        usage = h.usage()
        for g in h.gpus:
            holders = [lease for lease in h.leases if g.index in lease.gpus]
            who = "; ".join(f"{lease.job_class} {lease.owner}" for lease in holders) or (
                "processes of others" if g.index in h.foreign_busy else "free"
            )
            print(
                f"  GPU {g.index} {format_bytes(g.memory_total):>9}  reserved "
                f"{format_bytes(usage[g.index].reserved):>9}  {who}"
            )
    for _f, why in view.unreadable:
        print(f"unreadable: {why}", file=sys.stderr)
    return 0


def _fleet_queues(args) -> int:
    from airflow_provider_gpusched.core import fleet
    from airflow_provider_gpusched.core.gpu.inventory import get_inventory
    from airflow_provider_gpusched.core.host_name import this_host

    print(
        ",".join(
            fleet.host_queues(
                get_inventory(simulate_option(args)).gpus(), args.lane, this_host() if args.lane == "gpu" else ""
            )
        )
    )
    return 0


def _fleet_publish(args) -> int:
    from airflow_provider_gpusched.core import fleet
    from airflow_provider_gpusched.core.gpu.inventory import get_inventory
    from airflow_provider_gpusched.core.gpu.leases import LeaseManager
    from airflow_provider_gpusched.core.host_name import this_host

    manager = LeaseManager(get_inventory(simulate_option(args)), state_dir_option(args), shared=shared_option())
    record = fleet.record_of(manager, this_host())
    print(fleet.publish(fleet_dir(args), record, shared=shared_option()))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpusched", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("gpus", help="this host's GPUs and who holds them (leases)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--simulate",
        help="simulated inventory where NVML finds no GPU, e.g. 4x24GiB (default: $GPUSCHED_SIMULATE_GPUS)",
    )
    p.add_argument("--state-dir", help="lease directory (default: $GPUSCHED_STATE_DIR or <tmp>/gpusched-<uid>)")
    p.add_argument(
        "--fleet-dir",
        help="in a fleet: every host's GPUs from the records they published (default: "
        "[gpusched] fleet_dir; docs/fleet.md)",
    )
    p.add_argument("--this-host", action="store_true", help="this host's GPUs and leases only, even in a fleet")
    p.set_defaults(func=_gpus)
    fleet = sub.add_parser("fleet", help="several GPU hosts as one pool (docs/fleet.md)").add_subparsers(
        dest="fleet_command", required=True
    )
    p = fleet.add_parser(
        "hosts", help="every GPU host of the fleet: its GPUs and leases, from the records it published"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--fleet-dir", help="the fleet directory (default: $AIRFLOW__GPUSCHED__FLEET_DIR)")
    p.set_defaults(func=_fleet_hosts)
    p = fleet.add_parser("queues", help="the executor queues this host's worker serves (comma-separated)")
    p.add_argument("--lane", choices=("gpu", "idle"), default="gpu", help="normal work (gpu) or idle-class work")
    p.add_argument("--simulate", help="simulated inventory where NVML finds no GPU (default: $GPUSCHED_SIMULATE_GPUS)")
    p.set_defaults(func=_fleet_queues)
    p = fleet.add_parser("publish", help="publish this host's GPUs and leases to the fleet directory once")
    p.add_argument("--fleet-dir", help="the fleet directory (default: $AIRFLOW__GPUSCHED__FLEET_DIR)")
    p.add_argument("--simulate", help="simulated inventory where NVML finds no GPU (default: $GPUSCHED_SIMULATE_GPUS)")
    p.add_argument("--state-dir", help="lease directory (default: $GPUSCHED_STATE_DIR or <tmp>/gpusched-<uid>)")
    p.set_defaults(func=_fleet_publish)
    slurm = sub.add_parser("slurm", help="Slurm jobs").add_subparsers(dest="slurm_command", required=True)
    p = slurm.add_parser("status", help="state, exit code and restarts of jobs (one squeue call)")
    p.add_argument("job_ids", nargs="+")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_slurm_status)
    p = slurm.add_parser("cancel", help="scancel jobs")
    p.add_argument("job_ids", nargs="+")
    p.add_argument("--signal", help="send this signal instead of cancelling (e.g. USR1)")
    p.set_defaults(func=_slurm_cancel)
    p = slurm.add_parser("tail", help="last lines of a job output file")
    p.add_argument("path")
    p.add_argument("-n", "--lines", type=_positive_int, default=40, help="lines to show (>= 1, default 40)")
    p.set_defaults(func=_slurm_tail)
    sweep = sub.add_parser("sweep", help="sweep specs").add_subparsers(dest="sweep_command", required=True)
    p = sweep.add_parser("preview", help="dry run: the trials a sweep spec defines, their count and state")
    p.add_argument("spec", help="a YAML sweep spec, or package.module:ATTR naming a SweepSpec")
    p.add_argument(
        "--results-root",
        help="where the sweep keeps results (default: the spec's results_root, "
        "$AIRFLOW__GPUSCHED__SWEEP_RESULTS_ROOT or $AIRFLOW_HOME/gpusched/sweeps)",
    )
    p.add_argument("--force-rerun", action="store_true", help="count succeeded trials as to-run")
    p.add_argument("--limit", type=_positive_int, default=50, help="rows of the table to print (default 50)")
    p.add_argument("--json", action="store_true", help="every trial, machine-readable")
    p.add_argument(
        "--labels",
        action="store_true",
        help="only the trial labels, joined by label_format.instance_separator "
        "(GPU Task Scheduler's test_config_string_inst_separator, default +)",
    )
    p.set_defaults(func=_sweep_preview)
    p = sweep.add_parser(
        "run",
        help="run a sweep on this host's GPUs without Airflow (resumable; a DAG of the same "
        "sweep later skips what it finished)",
    )
    p.add_argument("spec", help="a YAML sweep spec, or package.module:ATTR naming a SweepSpec")
    p.add_argument(
        "--results-root",
        help="where the sweep keeps results (default: the spec's results_root, "
        "$AIRFLOW__GPUSCHED__SWEEP_RESULTS_ROOT or $AIRFLOW_HOME/gpusched/sweeps)",
    )
    p.add_argument("--parallel", type=_positive_int, help="trials at once (default: what fits on the GPUs)")
    p.add_argument(
        "--backend",
        choices=sorted(backend_names()),
        default=DEFAULT_BACKEND,
        help="this host's GPUs (default), or Slurm: job arrays through the local Slurm CLI",
    )
    p.add_argument("--force-rerun", action="store_true", help="run succeeded and pruned trials again")
    p.add_argument("--simulate", help="simulated GPUs, e.g. 4x24GiB (default: NVML, else $GPUSCHED_SIMULATE_GPUS)")
    p.add_argument(
        "--state-dir", help="the GPU lease directory (default: Airflow's, $AIRFLOW__GPUSCHED__GPU_STATE_DIR)"
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=_sweep_run)
    p = sweep.add_parser("results", help="status table and leaderboard of a sweep that ran")
    p.add_argument("folder", help="the sweep's folder (<results root>/<sweep name>)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_sweep_results)
    p = sweep.add_parser(
        "track",
        help="send a sweep's trials to its experiment trackers now (what waited, or --to for a sweep that ran "
        "without them; docs/tracking.md)",
    )
    p.add_argument("sweep", metavar="NAME", help="the sweep's name (or its folder)")
    p.add_argument("--results-root", help="where the sweep keeps results (default: the configured root)")
    p.add_argument("--run", help="only this DAG run (default: every run planned in the folder)")
    p.add_argument("--to", help="these trackers instead of the spec's (comma-separated: mlflow,tensorboard,wandb)")
    p.set_defaults(func=_sweep_track)
    p = sweep.add_parser(
        "dashboard", help="serve an Optuna sweep's study in optuna-dashboard, from its journal as it is"
    )
    p.add_argument("sweep", metavar="NAME", help="the sweep's name (or its folder)")
    p.add_argument("--results-root", help="where the sweep keeps results (default: the configured root)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    p.set_defaults(func=_sweep_dashboard)
    p = sweep.add_parser(
        "schema", help="the JSON Schema of a sweep spec file, for editors that complete and check YAML"
    )
    p.set_defaults(func=_sweep_schema)
    pools = sub.add_parser("pools", help="Airflow pools of the job classes").add_subparsers(
        dest="pools_command", required=True
    )
    p = pools.add_parser(
        "sync", help="create or update the pools that [gpusched] job_classes names (one slot per GPU); idempotent"
    )
    p.add_argument(
        "--backend",
        choices=sorted(backend_names()),
        default=DEFAULT_BACKEND,
        help="count this host's GPUs (local, default) or the classes' Slurm partitions' GPUs",
    )
    p.add_argument("--slurm-conn-id", help="Slurm connection for --backend slurm (default slurm_default)")
    p.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_pools_sync)
    quota = sub.add_parser("quota", help="team quotas: each group's quota, use, borrowed and lent GPUs, who waits")
    qsub = quota.add_subparsers(dest="quota_command", required=True)
    for name, text in (
        ("show", "each group's quota, use, borrowed and lent GPUs, and who waits on whom (docs/quotas.md)"),
        ("slurm", "the sacctmgr commands that give each group its Slurm account and QOS with its limits"),
    ):
        p = qsub.add_parser(name, help=text)
        p.add_argument("--quotas", help="the quota file or inline YAML (default: [gpusched] quotas)")
        p.add_argument("--fleet-dir", help="the fleet directory (default: [gpusched] fleet_dir)")
        p.add_argument("--state-dir", help="lease directory on one host (default: $GPUSCHED_STATE_DIR)")
        p.add_argument(
            "--simulate", help="simulated inventory where NVML finds no GPU (default: $GPUSCHED_SIMULATE_GPUS)"
        )
        if name == "show":
            p.add_argument("--json", action="store_true", help="machine-readable output")
        else:
            p.add_argument(
                "--cluster", default="", help="the Slurm cluster name for the accounts (default: none given)"
            )
        p.set_defaults(func=_quota if name == "show" else _quota_accounts)
    from airflow_provider_gpusched.cli_queue import add_queue_parser

    add_queue_parser(sub)
    p = sub.add_parser(
        "partition",
        help="split a model's layers into pipeline stages on heterogeneous hosts "
        "(sched-pipeline compatible, optimal bottleneck)",
        description="Prints the schedule as YAML (- HOST: [first, last] per stage, [] when no "
        "schedule fits). Exit codes: 0 schedule printed (also []), 2 bad input, "
        "3 an input file is missing or unreadable.",
    )
    p.add_argument(
        "-d", "--dtype", default="torch.float32", help="torch.float32 (default), torch.float16 or torch.bfloat16"
    )
    p.add_argument("-b", "--batch-size", type=int, default=8, help="microbatch size (default 8)")
    p.add_argument("-i", "--buffers-in", type=int, default=2, help="receive buffers (default 2)")
    p.add_argument("-o", "--buffers-out", type=int, default=2, help="send buffers (default 2)")
    p.add_argument(
        "-m",
        "--model",
        default="google/vit-base-patch16-224",
        help="model name in the models file (default google/vit-base-patch16-224)",
    )
    p.add_argument("-M", "--models", default="models.yml", help="models file (default models.yml)")
    p.add_argument(
        "-T", "--device-types", default="device_types.yml", help="device types file (default device_types.yml)"
    )
    p.add_argument("-D", "--devices", default="devices.yml", help="devices file (default devices.yml)")
    p.add_argument(
        "--time-limit",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="stop searching after this long and print the best schedule found, with the proven lower "
        "bound and the gap, when the optimum is not proven by then (default 60)",
    )
    p.add_argument("--json", action="store_true", help="schedule with per-stage times, memory and the bottleneck")
    p.add_argument(
        "--explain", action="store_true", help="also a per-stage table (as YAML comments), the bottleneck marked"
    )
    p.set_defaults(func=_partition)
    p = sub.add_parser(
        "profile",
        help="measure a PyTorch model layer by layer on this host's device and write the "
        "partitioner's models.yml and device_types.yml (merged with what they hold)",
        description="MODEL is a built-in example (mlp, convnet, tiny-vit) or package.module:callable "
        "returning an nn.Sequential. Measures each layer's forward time, weight and "
        "activation memory and output size on the leased GPU (CUDA_VISIBLE_DEVICES) or "
        "the CPU. Exit codes: 0 written, 2 bad input, 3 a file is unreadable.",
    )
    p.add_argument("model", help="mlp, convnet, tiny-vit, or package.module:callable")
    p.add_argument("--input-shape", help="one sample's input shape, e.g. 3,224,224 (built-in models know theirs)")
    p.add_argument(
        "-d", "--dtype", default="torch.float32", help="torch.float32 (default), torch.float16 or torch.bfloat16"
    )
    p.add_argument("-b", "--batch-size", type=int, default=8, help="micro-batch size (default 8)")
    p.add_argument("--device", default="auto", help="auto (the GPU PyTorch sees, else the CPU), cpu, cuda, cuda:N")
    p.add_argument(
        "--device-type", help="the device type's name in device_types.yml (default: the GPU's or CPU's model name)"
    )
    p.add_argument("--name", help="the model's name in models.yml (default: MODEL as given)")
    p.add_argument(
        "--bw-mbps", type=float, help="the device type's link bandwidth, 2^20 bits/s (needed for a new type)"
    )
    p.add_argument(
        "--mem-mb",
        type=float,
        help="the device type's usable memory, MiB (default for a new type: the "
        "device's total; leave room for the runtime)",
    )
    p.add_argument("-M", "--models", default="models.yml", help="models file to write (default models.yml)")
    p.add_argument(
        "-T", "--device-types", default="device_types.yml", help="device types file to write (default device_types.yml)"
    )
    p.add_argument("--warmup", type=int, default=2, help="untimed runs per layer (default 2)")
    p.add_argument("--repeat", type=int, default=5, help="timed runs per layer, the median taken (default 5)")
    p.add_argument(
        "--time-limit",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="stop measuring after this long, exit code 124 (default 600)",
    )
    p.set_defaults(func=_profile)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(args.func, args)


def run_command(func, args) -> int:
    """Run one subcommand's function: its exit code, and errors said in one line (no traceback). ``gpusched`` and
    ``airflow gpusched`` (cli_airflow.py) both come here."""
    import os

    try:
        code = func(args)
        sys.stdout.flush()
        return code
    except GpuschedError as exc:
        print(f"gpusched: error: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 2)
    except BrokenPipeError:  # `gpusched ... | head`: the reader has gone; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # a file or directory the user named: say which and why, no traceback
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"gpusched: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
