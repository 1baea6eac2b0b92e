"""The GPU timeline's segments: recorded from real attempts on leased (SIMULATED) GPUs, bounded, checked when read
back, and laid out per GPU for a window (clipped, short bars merged, preemptions and OOMs kept as marks, shared
GPUs in lanes)."""

import sys
import threading
import time

import pytest

from airflow_provider_gpusched.core.gpu.attempts import Attempt
from airflow_provider_gpusched.core.gpu.oom import OOMRetryPolicy
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.gpu.supervisor import GPUWorkSupervisor, Work
from airflow_provider_gpusched.core.gpu.sweep_batch import run_local_batch
from airflow_provider_gpusched.core.gpu.timeline import (
    MAX_SEGMENTS,
    SegmentLog,
    build_timeline,
    read_history_record,
    segment_of,
)
from airflow_provider_gpusched.core.safe_files import BadRecordError
from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, uniform
from airflow_provider_gpusched.core.sweep.running.session import SweepSession
from tests.gpu.test_launch_and_oom import NEEDS_MEMORY


def test_an_oom_retry_leaves_an_oom_segment_then_a_succeeded_one_on_this_host(manager, tmp_path):
    program = tmp_path / "train.py"
    program.write_text(NEEDS_MEMORY)
    log = SegmentLog()
    runner = GPUWorkSupervisor(
        manager,
        oom_policy=OOMRetryPolicy(retries=2, factor=1.5),
        host="gpu-a",
        on_attempt=lambda a, lease: log.add(segment_of(a, job_class="normal", label="t")),
    )
    before = time.time()
    runner.run(GPURequest(gpu_memory="4GiB"), Work(argv=[sys.executable, str(program), "5"]), str(tmp_path / "log"))
    segments = read_history_record(log.record(), "test")["segments"]
    assert [s["outcome"] for s in segments] == ["oom", "succeeded"]
    assert all(s["host"] == "gpu-a" and len(s["gpus"]) == 1 for s in segments)
    assert "GPU out of memory with 4.0GiB on 1 GPU" in segments[0]["detail"]
    assert (
        before
        <= segments[0]["start"]
        <= segments[0]["end"]
        <= segments[1]["start"]
        <= segments[1]["end"]
        <= time.time() + 0.001
    )  # stamps kept to the ms
    assert [s["attempt"] for s in segments] == [1, 2]


def test_a_batched_sweep_tells_each_group_of_trials_with_its_label(manager, tmp_path):
    spec = SweepSpec(
        name="tl",
        search="random",
        space={"x": uniform(0, 1)},
        count=12,
        seed=0,
        python_callable=lambda p: {"y": p["x"]},
        objective=Objective("y"),
        results_root=str(tmp_path),
    )
    manifest = SweepSession(spec).prepare()
    seen: list[tuple[str, str]] = []
    ticks = []
    run_local_batch(
        manifest,
        manifest.pending,
        manager,
        GPURequest(gpus=1),
        parallel=2,
        trials_per_process=4,
        on_attempt=lambda a, label: seen.append((label, segment_of(a, job_class="normal")["outcome"])),
        on_tick=lambda: ticks.append(1),
        tick_seconds=0.05,
    )
    assert sorted(seen) == [
        ("trials 0-3 (4)", "succeeded"),
        ("trials 4-7 (4)", "succeeded"),
        ("trials 8-11 (4)", "succeeded"),
    ]
    assert ticks  # the caller's thread was woken while the trials ran


def outcome_of(**kw):
    base = dict(number=1, request="1 GPU", gpus=[0], exit_code=0, oom=None, seconds=2.0, started=100.0, host="h")
    return segment_of(Attempt(**{**base, **kw}), job_class="idle")


def test_how_each_attempt_ended_is_named():
    assert outcome_of()["outcome"] == "succeeded"
    assert outcome_of(exit_code=1)["outcome"] == "failed"
    assert (
        outcome_of(exit_code=-15, stopped=True, preempted="normal work of dag.t needs the GPU")["outcome"]
        == "preempted"
    )
    assert outcome_of(exit_code=1, oom="CUDA out of memory")["outcome"] == "oom"
    assert outcome_of(exit_code=-15, stopped=True, timed_out="reached its time limit")["outcome"] == "timeout"
    assert outcome_of(exit_code=-15, stopped=True, halted="stopped by alice")["outcome"] == "stopped"
    assert outcome_of()["end"] == 102.0
    assert outcome_of(started=None) is None  # a payload from before attempts carried their start
    assert outcome_of(gpus=[]) is None  # never held a GPU (a load stage that failed)


def test_a_segment_log_keeps_the_newest_and_counts_the_rest():
    log = SegmentLog(limit=3)
    threads = [threading.Thread(target=lambda k=k: log.add(outcome_of(started=float(k)))) for k in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    record = log.record()
    assert len(record["segments"]) == 3 and record["dropped"] == 2
    assert MAX_SEGMENTS >= 1000


@pytest.mark.parametrize(
    "bad, says",
    [
        ({"segments": "x"}, "key 'segments': expected a list of at most 2000 segments"),
        ({"dropped": 0}, "key 'segments' is missing"),
        ({"segments": [], "dropped": -1}, "'dropped': expected a count"),
        (
            {"segments": [{"job_class": "", "gpus": [0], "start": 1, "end": 2, "outcome": "succeeded"}]},
            "key 'segments[0].job_class'",
        ),
        (
            {"segments": [{"job_class": "idle", "gpus": [], "start": 1, "end": 2, "outcome": "succeeded"}]},
            "key 'segments[0].gpus'",
        ),
        (
            {"segments": [{"job_class": "idle", "gpus": [0], "start": "1", "end": 2, "outcome": "succeeded"}]},
            "key 'segments[0].start'",
        ),
        (
            {"segments": [{"job_class": "idle", "gpus": [0], "start": 3, "end": 2, "outcome": "succeeded"}]},
            "before its start",
        ),
        (
            {"segments": [{"job_class": "idle", "gpus": [0], "start": 1, "end": 2, "outcome": "exploded"}]},
            "key 'segments[0].outcome'",
        ),
        (
            {
                "segments": [
                    {"job_class": "idle", "gpus": [0], "start": 1, "end": 2, "outcome": "oom", "map_index": "3"}
                ]
            },
            "key 'segments[0].map_index'",
        ),
        # issue 53, item 3: bounds of one record (a forged 3 MB history drew 1,024 GPUs of made-up hosts)
        (
            {"segments": [{"job_class": "idle", "gpus": list(range(1024)), "start": 1, "end": 2, "outcome": "oom"}]},
            "at most 64 GPU indices",
        ),
        (
            {
                "segments": [
                    {"job_class": "idle", "gpus": [0], "start": 1, "end": 2, "outcome": "oom", "label": "x" * 201}
                ]
            },
            "key 'segments[0].label': expected a string of at most 200 characters",
        ),
        (
            {"segments": [{"job_class": "idle", "gpus": [0], "start": 1, "end": 2, "outcome": "oom"}] * 2001},
            "key 'segments': expected a list of at most 2000 segments (a task publishes its newest 2000), got 2001 items",
        ),
    ],
)
def test_a_bad_history_record_is_refused_naming_the_key(bad, says):
    with pytest.raises(BadRecordError) as err:
        read_history_record(bad, "XCom gpusched_lease_history of d.t[-1] (r)")
    assert says in str(err.value) and "XCom gpusched_lease_history of d.t[-1] (r)" in str(err.value)


def seg(gpu, start, end, outcome="succeeded", job_class="normal", host="h", task="t"):
    return {
        "host": host,
        "gpus": [gpu],
        "job_class": job_class,
        "start": start,
        "end": end,
        "outcome": outcome,
        "detail": "",
        "request": "",
        "label": "",
        "dag_id": "d",
        "run_id": "r",
        "task_id": task,
        "map_index": -1,
    }


def test_the_timeline_clips_to_the_window_and_lists_idle_gpus():
    t = build_timeline(
        [seg(0, 50, 150), seg(0, 900, 1200), seg(1, 10, 20)], since=100, until=1000, known_gpus={"h": [0, 1, 2]}
    )
    rows = {(r["host"], r["gpu"]): r for r in t["rows"]}
    assert sorted(rows) == [("h", 0), ("h", 1), ("h", 2)]  # GPU 1's only lease ended before the window
    bars = rows[("h", 0)]["bars"]
    assert [(b["start"], b["end"]) for b in bars] == [(100, 150), (900, 1000)]
    assert rows[("h", 0)]["busy_fraction"] == pytest.approx(150 / 900, abs=1e-4)
    assert rows[("h", 1)]["bars"] == [] and rows[("h", 2)]["busy_fraction"] == 0


def test_short_bars_merge_but_preemptions_and_ooms_stay_marks():
    # 1,000 one-second leases on one GPU over a day, a quarter of them idle: far narrower than a pixel
    many = [seg(0, 1000 + 2 * k, 1001 + 2 * k, job_class="idle" if k % 4 == 0 else "normal") for k in range(1000)]
    marks = [seg(0, 3100, 3101, "preempted", "idle"), seg(0, 3102, 3103, "oom")]
    t = build_timeline(many + marks + [seg(0, 3104, 3105)], since=0, until=86400)
    bars = t["rows"][0]["bars"]
    assert [b.get("count", 1) for b in bars] == [1000, 1, 1, 1]
    assert [b["outcome"] for b in bars[1:3]] == ["preempted", "oom"]
    assert bars[0]["busy"] == pytest.approx(1000) and bars[0]["outcomes"] == {"succeeded": 1000}
    assert bars[0]["classes"] == {"idle": 250, "normal": 750} and bars[0]["job_class"] == "normal"
    assert bars[0]["outcome"] == "merged" and bars[0]["task_id"] == "t"  # the first lease's task: its link
    # a row that fits is drawn lease by lease, however short its leases
    few = build_timeline(many[:100], since=0, until=86400)
    assert len(few["rows"][0]["bars"]) == 100 and all("count" not in b for b in few["rows"][0]["bars"])
    assert t["counts"]["preempted"] == 1 and t["counts"]["oom"] == 1 and t["counts"]["succeeded"] == 1001
    assert t["bars"] == 4
    # zoomed in on ten minutes the same leases are drawn one by one
    zoomed = build_timeline(many, since=1000, until=1600)
    assert len(zoomed["rows"][0]["bars"]) == 300 and all("count" not in b for b in zoomed["rows"][0]["bars"])


def test_leases_sharing_a_gpu_at_once_get_lanes():
    t = build_timeline(
        [seg(0, 0, 100, task="a"), seg(0, 50, 150, task="b"), seg(0, 120, 200, task="c")], since=0, until=200
    )
    row = t["rows"][0]
    assert row["lanes"] == 2
    assert [(b["task_id"], b["lane"]) for b in row["bars"]] == [("a", 0), ("b", 1), ("c", 0)]
    assert row["busy_fraction"] == 1.0  # covered, not summed


@pytest.mark.heavy  # 0.6 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_a_timeline_answer_is_bounded_and_says_what_it_cut():
    """Issue 53, item 3: every answer has bounds (GPU rows, bars), and says when it reached them."""
    from airflow_provider_gpusched.core.gpu.timeline import MAX_BARS, MAX_ROWS

    rows = [seg(g % 64, 10, 20, host=f"h{g // 64:03d}") for g in range(MAX_ROWS + 100)]
    timeline = build_timeline(rows, since=0, until=100)
    assert len(timeline["rows"]) == MAX_ROWS and timeline["cut"] == [
        f"100 GPU row(s) past the first {MAX_ROWS} are not drawn"
    ]
    crowded = [seg(0, i * 0.001, i * 0.001 + 0.0005, outcome="oom", host=f"h{i % 40}") for i in range(MAX_BARS + 2000)]
    timeline = build_timeline(crowded, since=0, until=100)
    assert timeline["bars"] <= MAX_BARS + 1000 and any("bars at most" in c for c in timeline["cut"]), timeline["cut"]
    assert build_timeline([seg(0, 1, 2)], since=0, until=100)["cut"] == []


def test_segments_carry_their_quota_group_to_the_bars_and_merged_runs():
    """With team quotas the timeline colours by group: each bar keeps its group, the answer lists the groups, and a
    merged run of short leases takes the group most of them had."""
    segments = [{**seg(0, 100 + i, 100.5 + i), "group": "vision" if i % 3 else "nlp"} for i in range(30)]
    segments.append({**seg(1, 100, 200), "group": "nlp"})
    timeline = build_timeline(segments, since=0, until=1000, resolution=10)
    assert timeline["groups"] == ["nlp", "vision"]
    rows = {r["gpu"]: r for r in timeline["rows"]}
    merged = [b for b in rows[0]["bars"] if b.get("count")]
    assert merged and all(b["group"] == "vision" for b in merged)
    assert rows[1]["bars"][0]["group"] == "nlp"
    assert build_timeline([seg(0, 1, 2)], since=0, until=10)["groups"] == []
