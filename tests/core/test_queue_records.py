"""The records `gpusched queue` writes and reads back (work tags, stop marks, stop orders): every value survives
the trip, and anything malformed, planted or expired is refused or ignored with a reason, never trusted."""

import json
import os
import time
from types import SimpleNamespace

import pytest

from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.gpu.lease_store import Lease
from airflow_provider_gpusched.core.queue import QueueEntry
from airflow_provider_gpusched.core.safe_files import BadRecordError, UnsafePathError
from airflow_provider_gpusched.core.slurm.job import job_comment, parse_job_comment
from airflow_provider_gpusched.core.stops import (
    Selector,
    StopOrders,
    StopRequest,
    read_slurm_stop_mark,
    slurm_stop_mark,
    write_slurm_stop_mark,
)
from airflow_provider_gpusched.core.work_tag import WorkTag


def test_a_task_instance_tag_survives_a_slurm_comment():
    ti = SimpleNamespace(
        dag_id="hpo.v2",
        run_id="manual__2026-11-23T10:00:00+00:00",
        task_id="lr_sweep.trial",
        map_index=12,
        try_number=3,
    )
    tag = WorkTag.of_task(ti, sweep="lr sweep: a=1", job_class="idle")
    comment = job_comment("k" * 24, 3, run=ti.run_id, tag=tag)
    assert "dag=hpo.v2" in comment and "ti=lr_sweep.trial" in comment and "map=12" in comment
    assert "sweep=~" in comment  # not plain: base64url, so ':' and '=' cannot break the comment
    back = WorkTag.from_comment(parse_job_comment(comment))
    assert back == WorkTag(
        dag_id="hpo.v2",
        run_id=ti.run_id,
        task_id="lr_sweep.trial",
        map_index=12,
        try_number=3,
        sweep="lr sweep: a=1",
        job_class="idle",
    )
    assert back.task == "hpo.v2.lr_sweep.trial[12]"
    # an older comment (key, run and try only) gives what it has
    old = WorkTag.from_comment(parse_job_comment(job_comment("k" * 24, 1, run="r1")))
    assert (old.dag_id, old.run_id, old.try_number, old.task) == ("", "r1", 1, "")


def test_unmapped_task_and_garbage_in_a_comment():
    tag = WorkTag.of_task(SimpleNamespace(dag_id="d", run_id="r", task_id="t", map_index=-1, try_number=1))
    assert "map=" not in job_comment("k", 1, tag=tag) and tag.task == "d.t"
    junk = WorkTag.from_comment({"dag": "~%%%", "ti": "a b", "map": "-3", "sweep": "~" + "A" * 5})
    assert (junk.dag_id, junk.task_id, junk.map_index) == ("", "", -1)


def test_a_lease_record_with_a_bad_work_tag_is_refused_by_key():
    base = {
        "lease_id": "0123456789abcdef",
        "gpus": [0],
        "uuids": ["u"],
        "memory": {"0": 1},
        "whole": False,
        "owner": "o",
        "pid": 1,
    }
    assert Lease.from_dict(base).tag == WorkTag(job_class="normal")  # a lease of an older version: no tag
    tagged = Lease.from_dict({**base, "work": WorkTag(dag_id="d", map_index=2).to_dict()})
    assert tagged.tag.dag_id == "d" and tagged.tag.map_index == 2
    with pytest.raises(BadRecordError, match=r"key 'work': key 'map_index': expected a whole number"):
        Lease.from_dict({**base, "work": {"map_index": "2"}}, source="f.json")
    with pytest.raises(BadRecordError, match=r"key 'dag_id': expected a string of at most 250"):
        Lease.from_dict({**base, "work": {"dag_id": "x" * 251}})
    with pytest.raises(BadRecordError, match=r"key 'work': expected an object"):
        Lease.from_dict({**base, "work": ["d"]})


def entry(backend="local", id_="0123456789abcdef", state="running", **tag):
    return QueueEntry(backend=backend, id=id_, tag=WorkTag(**tag), state=state)


def test_selector_matches_every_field_given():
    e = entry(dag_id="d", run_id="r", task_id="t", sweep="s", job_class="idle")
    assert Selector(dag_id="d", sweep="s").matches(e) and not Selector(dag_id="d", run_id="other").matches(e)
    assert Selector(states=("RUNNING",)).matches(e) and not Selector(states=("pending",)).matches(e)
    array_task = entry("slurm", "41_3", "RUNNING", dag_id="d")
    assert Selector(ids=("41",)).matches(array_task) and Selector(ids=("41_3",)).matches(array_task)
    assert not Selector(ids=("4",)).matches(array_task) and array_task.stop_id == "41"
    assert Selector().empty and Selector(ids=("1",)).by_tag == {}
    with pytest.raises(GpuschedError, match="--dag: longer than 250"):
        Selector(dag_id="x" * 251)


def test_stop_orders_match_expire_and_lift(tmp_path):
    orders = StopOrders(str(tmp_path))
    request = StopRequest.now("maintenance")
    with pytest.raises(GpuschedError, match="a stop order needs --dag"):
        orders.place(Selector(ids=("1",)), request, 60)
    path = orders.place(Selector(dag_id="d", sweep="s"), request, 60)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert orders.order_for(WorkTag(dag_id="d", sweep="s", run_id="any")).request == request
    assert orders.order_for(WorkTag(dag_id="d", sweep="other")) is None
    orders.place(Selector(run_id="r"), StopRequest("me@h", "old", time.time() - 100), 10)  # expired
    assert [o.selector for o in orders.active()] == [{"dag_id": "d", "sweep": "s"}]
    assert len([n for n in os.listdir(tmp_path) if n.startswith("stop-order-")]) == 1  # the expired one is gone
    (tmp_path / "stop-order-0000000000000000.json").write_text(
        json.dumps({"selector": {"ids": "1"}, "by": "x", "reason": "", "at": 1, "until": 9e9})
    )
    assert len(orders.active()) == 1 and "key 'selector'" in orders.problems[0]
    assert orders.lift(Selector(dag_id="other")) == 0
    assert orders.lift(Selector(sweep="s")) == 1 and orders.active() == []  # an order naming more fields goes too


def test_slurm_stop_marks_are_written_only_where_safe_and_read_only_when_sound(tmp_path):
    folder = tmp_path / "task"
    folder.mkdir(mode=0o700)
    output = str(folder / "%j.out")
    request = StopRequest.now("free the partition")
    path = write_slurm_stop_mark(output, "77", request)
    assert path == slurm_stop_mark(output, "77_4") == str(folder / "gpusched-stop-77.json")
    assert read_slurm_stop_mark(output, "77") == request
    assert read_slurm_stop_mark(output, "78") is None
    with open(path, "w") as fh:
        fh.write('{"by": 1}')
    assert read_slurm_stop_mark(output, "77") is None  # malformed: ignored, the task reports Slurm's state
    os.remove(path)
    os.symlink(str(tmp_path / "elsewhere.json"), path)
    assert read_slurm_stop_mark(output, "77") is None  # a planted link is never followed
    os.remove(path)
    folder.chmod(0o770)
    with pytest.raises(UnsafePathError, match="only it may write"):
        write_slurm_stop_mark(output, "77", request)
    folder.chmod(0o700)


def test_a_stop_request_says_who_when_and_why():
    request = StopRequest("alice@gpu1", "the deadline moved", 0.0)
    assert request.describe() == (
        "stopped by `gpusched queue stop` (alice@gpu1, 1970-01-01 00:00:00 UTC): the deadline moved"
    )
    with pytest.raises(BadRecordError, match="key 'at'"):
        StopRequest.from_record({"by": "a", "reason": "b", "at": "yesterday"}, "mark")
