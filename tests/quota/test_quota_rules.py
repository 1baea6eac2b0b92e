"""Team quotas, the rules and the configuration: what a group may run, borrow and reclaim, errors naming the key.
Pure functions and files; no Airflow."""

import json

import pytest

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.quota.book import QuotaBook
from airflow_provider_gpusched.core.quota.config import QuotaConfig, QuotaConfigError
from airflow_provider_gpusched.core.quota.policy import (
    Claim,
    Waiter,
    admit,
    borrowed_ids,
    fair_shares,
    jain_index,
    reclaim_order,
    usage,
)
from airflow_provider_gpusched.core.quota.slurm import sacctmgr_plan, slurm_settings

LAB = {
    "groups": {
        "vision": {"quota": 3, "weight": 2, "members": ["alice"], "slurm": {"account": "cv"}},
        "nlp": {"quota": 2, "borrowing_limit": 1, "members": ["bob"]},
        "misc": {"quota": "25%"},
    },
    "default_group": "misc",
}


def config(data=LAB):
    return QuotaConfig.from_dict(data, "quotas.yaml")


def claim(lease, group, amount=1.0, created=0.0, host="h1", priority=0):
    return Claim(lease.rjust(16, "0"), host, group, amount, created, priority, lease, 1e12)


def waiter(owner, group, kind, host="h1", amount=1.0, since=0.0):
    return Waiter(owner, host, group, amount, kind, since, 1e12)


@pytest.mark.parametrize(
    "data, message",
    [
        (
            {"groups": {"a": {"quota": "four"}}},
            'quotas.yaml: groups.a.quota: expected a number of GPUs >= 0 or a percentage such as "25%", got "four"',
        ),
        (
            {"groups": {"a": {"quota": 1, "wieght": 2}}},
            "quotas.yaml: groups.a.wieght: unknown setting; expected one of quota, borrowing_limit, weight, members, slurm",
        ),
        ({"groups": {"a": {"quota": 1, "weight": 0}}}, "quotas.yaml: groups.a.weight: expected a number > 0, got 0"),
        ({"groups": {"a": {"borrowing_limit": 1}}}, "quotas.yaml: groups.a.quota: missing"),
        (
            {"groups": {"a": 1, "b": {"quota": 1, "members": ["x"]}, "c": {"quota": 1, "members": ["x"]}}},
            "quotas.yaml: groups.c.members: 'x' is already a member of group b",
        ),
        ({"groups": {"a": "60%", "b": "50%"}}, "quotas.yaml: groups: the percentage quotas add up to 110%, over 100%"),
        ({"groups": {"a": 1}, "default_group": "z"}, 'quotas.yaml: default_group: expected one of a, got "z"'),
        (
            {"groups": {"a": 1}, "resource": "tpus"},
            'quotas.yaml: resource: expected one of gpus, gpu_memory, got "tpus"',
        ),
        ({"groups": {"a b": 1}}, "quotas.yaml: groups.a b: a group name is letters"),
        ({"groups": {}}, "quotas.yaml: groups: expected a mapping of group name -> settings"),
        ({"groups": {"a": 1}, "reclaim": {"grace": 3}}, "quotas.yaml: reclaim.grace: unknown setting"),
        (
            {"groups": {"a": {"quota": 1, "slurm": {"account": "a;rm"}}}},
            "quotas.yaml: groups.a.slurm.account: expected a Slurm account name",
        ),
        ({"groups": {"a": {"quota": float("nan")}}}, "quotas.yaml: groups.a.quota: expected a number of GPUs"),
    ],
)
def test_a_bad_configuration_is_refused_naming_the_key(data, message):
    with pytest.raises(QuotaConfigError) as err:
        config(data)
    assert str(err.value).startswith(message), str(err.value)


def test_loading_from_a_file_and_inline_text(tmp_path):
    path = tmp_path / "quotas.yaml"
    path.write_text("resource: gpu_memory\ngroups:\n  a: {quota: 80GiB, borrowing_limit: 40GiB}\n")
    loaded = QuotaConfig.load(str(path))
    assert loaded.source == str(path) and loaded.quota("a", 0) == 80 * 2**30
    assert loaded.borrowing_limit("a", 0) == 40 * 2**30
    assert QuotaConfig.load('{"groups": {"a": 2}}').quota("a", 8) == 2
    assert not QuotaConfig.load("").enabled
    with pytest.raises(QuotaConfigError, match=r"/nowhere.yaml: quota file not found"):
        QuotaConfig.load("/nowhere.yaml")
    with pytest.raises(QuotaConfigError, match=r"\[gpusched\] quotas: not valid YAML"):
        QuotaConfig.load("groups: [a: {")


def test_which_group_work_counts_for():
    c = config()
    assert c.group_for("nlp", "alice") == "nlp"  # an explicit group wins
    assert c.group_for(None, "alice") == "vision"
    assert c.group_for(None, "carol, bob") == "nlp"  # the first owner that is a member
    assert c.group_for(None, "carol") == "misc"  # default_group
    with pytest.raises(
        InvalidArgumentError, match=r"group: expected a group of quotas.yaml \(vision, nlp, misc\), got 'nope'"
    ):
        c.group_for("nope", "alice")
    # no default group: work in no group is "unassigned" (no quota: it only borrows), and turning quotas on breaks
    # no DAG; the name is reserved
    assert config({"groups": {"a": 1}}).group_for(None, "carol") == "unassigned"
    with pytest.raises(QuotaConfigError, match="groups.unassigned: 'unassigned' is the group of work in no group"):
        config({"groups": {"unassigned": 1}})
    assert "gpusched_group_unassigned" in config({"groups": {"a": 1}}).pool_plan(8)
    assert "gpusched_group_unassigned" not in config().pool_plan(8)  # with a default group, nothing is unassigned
    # a slot per GPU the group may hold (a quota of 3, no borrowing limit: the 8 GPUs), times [gpusched]
    # pool_slots_per_gpu, the unit of every gpusched pool: with 3, three memory slices of a GPU run at once
    a = config({"groups": {"a": 3}})
    assert a.pool_plan(8)["gpusched_group_a"] | {"description": ""} == {
        "slots": 8, "include_deferred": False, "classes": [], "description": ""
    }  # fmt: skip
    assert (
        a.pool_plan(8, 3)["gpusched_group_a"]["slots"] == 24
        and a.pool_plan(8, 3)["gpusched_group_a"]["include_deferred"]
    )
    limited = config({"groups": {"a": {"quota": 3, "borrowing_limit": 1}}})
    assert limited.pool_plan(8, 3)["gpusched_group_a"]["slots"] == 12
    assert QuotaConfig().group_for("x", "y") == ""  # quotas off


def test_oldest_claims_fill_the_quota_and_the_rest_is_borrowed():
    c = config()
    claims = [
        claim("1", "nlp", created=1),
        claim("2", "nlp", created=2),
        claim("3", "nlp", created=3),
        claim("4", "vision", created=0),
    ]
    assert borrowed_ids(c, claims, 8) == {"0000000000000003"}
    # when the oldest ends, the newest becomes the group's own: nothing of it is reclaimable any more
    assert borrowed_ids(c, claims[1:], 8) == set()
    use = usage(c, claims, [waiter("w", "misc", "quota")], 8)
    assert (use["nlp"].used, use["nlp"].in_quota, use["nlp"].borrowed) == (3, 2, 1)
    assert use["misc"].quota == 2 and use["misc"].waiting == 1
    # the one borrowed GPU is lent by the groups below their quota, in proportion to what they leave unused
    assert use["vision"].lent + use["misc"].lent == pytest.approx(1.0)
    assert use["vision"].lent == pytest.approx(2 / 4)


def test_admission_within_quota_borrowing_limit_and_in_quota_waiters():
    c = config()
    claims = [claim("1", "nlp"), claim("2", "nlp")]
    assert admit(c, 8, [], [], group="nlp", amount=2, host="h1", owner="x").kind == "quota"
    assert admit(c, 8, claims, [], group="nlp", amount=1, host="h1", owner="x").kind == "borrow"
    over = admit(c, 8, claims + [claim("3", "nlp")], [], group="nlp", amount=1, host="h1", owner="x")
    assert over.kind == "wait" and "over its borrowing limit 1 GPU" in over.reason
    # another group's in-quota request waits (anywhere): nobody borrows meanwhile
    held = admit(
        c, 8, claims, [waiter("v1", "vision", "quota", host="h2")], group="nlp", amount=1, host="h1", owner="x"
    )
    assert held.kind == "wait" and "group vision's work within its quota waits for GPUs (v1 on h2)" in held.reason
    # ... but it never stops a group within its own quota
    assert (
        admit(c, 8, [], [waiter("v1", "vision", "quota")], group="nlp", amount=1, host="h1", owner="x").kind == "quota"
    )


def test_borrowers_are_ordered_by_borrowed_per_weight():
    """vision (weight 2) borrows 2, nlp (weight 1) borrows 0 and waits: nlp goes first; with vision at 1 borrowed
    (1/2 = 0.5 after one more would be 1.0) and nlp at 1 (1/1, 2 after), vision goes first."""
    c = config({"groups": {"vision": {"quota": 1, "weight": 2}, "nlp": {"quota": 1}}})
    vision = [claim(str(i), "vision", created=i) for i in range(1, 4)]  # 1 in quota, 2 borrowed
    nlp = [claim("9", "nlp", created=0)]
    w_nlp = waiter("n2", "nlp", "borrow", since=1)
    verdict = admit(c, 8, vision + nlp, [w_nlp], group="vision", amount=1, host="h1", owner="v4")
    assert verdict.kind == "wait" and "group nlp is further below its weighted share" in verdict.reason
    vision = vision[:2]  # 1 borrowed: (1+1)/2 = 1.0 after
    nlp = nlp + [claim("8", "nlp", created=5)]  # 1 borrowed: (1+1)/1 = 2.0 after
    assert admit(c, 8, vision + nlp, [w_nlp], group="vision", amount=1, host="h1", owner="v4").kind == "borrow"
    # a borrower waiting on another host does not hold this one back
    elsewhere = waiter("n2", "nlp", "borrow", host="h2")
    assert (
        admit(
            c,
            8,
            [claim(str(i), "vision", created=i) for i in range(1, 4)] + [claim("9", "nlp")],
            [elsewhere],
            group="vision",
            amount=1,
            host="h1",
            owner="v4",
        ).kind
        == "borrow"
    )


def test_reclaim_order_is_lowest_priority_then_newest_and_respects_min_runtime():
    c = config({"groups": {"a": 1, "b": 3}, "reclaim": {"min_runtime": 10}})
    claims = [
        claim("1", "a", created=0),
        claim("2", "a", created=1),
        claim("3", "a", created=5, priority=5),
        claim("4", "a", created=3),
        claim("5", "a", created=95),  # too young
        claim("6", "a", created=2, host="h2"),
    ]
    ready, young = reclaim_order(c, 8, claims, group="b", host="h1", now=100)
    # a holds 6 with a quota of 1: any 5 of them may go, whichever host they are on
    assert [x.lease_id[-1] for x in ready] == ["4", "2", "1", "3"] and [x.lease_id[-1] for x in young] == ["5"]
    assert reclaim_order(c, 8, claims, group="a", host="h1", now=100) == ([], [])  # never its own group's
    assert [x.lease_id[-1] for x in reclaim_order(c, 8, claims, group="b", host="h2", now=100)[0]] == ["6"]


def test_reclaim_never_takes_a_group_below_its_quota():
    c = config({"groups": {"a": 4, "b": 4}})
    claims = [claim(str(i), "a", created=i) for i in range(1, 7)]  # 6 held, 2 beyond the quota
    ready, _ = reclaim_order(c, 8, claims, group="b", host="h1", now=100)
    assert [x.lease_id[-1] for x in ready] == ["6", "5"]
    two = [claim("1", "a", amount=3, created=1), claim("2", "a", amount=2, created=2)]  # 5 held, 1 beyond
    assert reclaim_order(c, 8, two, group="b", host="h1", now=100)[0] == []  # either lease would take too much


def test_fair_shares_water_fill_by_weight_and_jain_index():
    c = config(
        {
            "groups": {
                "a": {"quota": 2, "weight": 1},
                "b": {"quota": 2, "weight": 3},
                "c": {"quota": 4, "borrowing_limit": 0},
            }
        }
    )
    # c wants nothing: its 4 are surplus, divided 1:3 between a and b, who want more than that
    assert fair_shares(c, 8, {"a": 10, "b": 10, "c": 0}) == pytest.approx({"a": 3, "b": 5, "c": 0})
    # b wants only 3: a gets the rest
    assert fair_shares(c, 8, {"a": 10, "b": 3, "c": 0}) == pytest.approx({"a": 5, "b": 3, "c": 0})
    # c may not borrow: with everyone hungry, it gets exactly its quota
    assert fair_shares(c, 8, {"a": 10, "b": 10, "c": 10}) == pytest.approx({"a": 2, "b": 2, "c": 4})
    assert jain_index([1, 1, 1]) == pytest.approx(1.0)
    assert jain_index([1, 0, 0]) == pytest.approx(1 / 3)


def test_slurm_accounts_and_qos_for_each_group():
    c = config()
    assert slurm_settings(c, "vision") == {"account": "cv", "qos": "vision"}
    assert slurm_settings(c, "nope") == {}
    plan = [" ".join(x) for x in sacctmgr_plan(c, "lab", capacity_gpus=8)]
    assert "sacctmgr -i modify qos nlp set Priority=100 GrpTRES=gres/gpu=3" in plan
    assert "sacctmgr -i modify qos vision set Priority=200 GrpTRES=gres/gpu=8" in plan  # no borrowing limit
    assert "sacctmgr -i modify qos misc set Priority=100 GrpTRES=gres/gpu=8" in plan  # 25% + any: the cluster
    assert any(p.startswith("sacctmgr -i add account cv Cluster=lab Fairshare=200 QOS=vision") for p in plan)
    assert "sacctmgr -i add user bob Account=nlp Cluster=lab" in plan


def test_the_book_checks_what_it_reads_back_and_expires_dead_holders(tmp_path):
    c = config()
    book = QuotaBook(str(tmp_path / "quota"), c)
    with book.lock():
        book.add_claim(Claim("0000000000000001", "h1", "nlp", 1.0, 0.0, 0, "1", 150.0))  # renewed at t=90
        book.add_claim(Claim("0000000000000002", "h2", "nlp", 1.0, 0.0, 0, "x", 5.0))  # expired at t=5
    bad = tmp_path / "quota" / "claims" / "h1" / "00000000000000ff.json"
    bad.write_text(
        json.dumps({"lease_id": "00000000000000ff", "host": "h1", "group": "nlp", "amount": -1, "created": 0})
    )
    moved = tmp_path / "quota" / "claims" / "h1" / "00000000000000aa.json"
    moved.write_text(
        json.dumps(
            {"lease_id": "00000000000000aa", "host": "h9", "group": "nlp", "amount": 1, "created": 0, "until": 1e12}
        )
    )
    claims = book.claims(now=100)
    assert [x.lease_id for x in claims] == ["0000000000000001"]
    problems = dict(book.problems)
    assert "key 'amount'" in problems[str(bad)] and "expected an amount >= 0" in problems[str(bad)]
    assert "its host or lease id is not the one its path names" in problems[str(moved)]
    # the host itself drops its claims whose lease is gone
    assert book.claims(host="h1", live=[], now=100) == []
    assert not (tmp_path / "quota" / "claims" / "h1" / "0000000000000001.json").exists()


def test_claims_and_waiting_marks_that_say_more_than_they_may_count_for_nothing(tmp_path):
    """A claim counts for at most its lifetime (60 s) plus a little clock skew past the reader's now, for at most
    the GPUs there are, on a host that exists: a dead host whose clock ran 10 minutes ahead, a forged claim of a
    host that does not exist (its ``until`` 1e10), NaN, Infinity and 1e308 count for no group and are named, so
    a group's real lease stays within its quota."""
    from airflow_provider_gpusched.core.quota.report import quota_view

    book = QuotaBook(str(tmp_path / "quota"), config({"groups": {"nlp": 1, "vision": 7}}))
    book.host_known = lambda host: host in ("h1", "h2")
    now = 1000.0
    folder = tmp_path / "quota" / "claims"

    def write(kind, host, name, record):
        (tmp_path / "quota" / kind / host).mkdir(parents=True, exist_ok=True)
        path = tmp_path / "quota" / kind / host / name
        path.write_text(json.dumps(record) if isinstance(record, dict) else record)  # json.dumps writes NaN too
        return str(path)

    def raw(lease, host, until, amount=1, created=0):
        return {"lease_id": lease, "host": host, "group": "nlp", "amount": amount, "created": created, "until": until}

    real = "00000000000000a1"
    with book.lock():
        book.add_claim(Claim(real, "h1", "nlp", 1.0, 500.0, 0, "n0", now + 60))  # renewed just now
    bad = {
        "skewed": write("claims", "h2", "00000000000000b1.json", raw("00000000000000b1", "h2", now + 600)),
        "ghost": write("claims", "ghost", "00000000000000b2.json", raw("00000000000000b2", "ghost", 1e10)),
        "huge": write("claims", "h2", "00000000000000b3.json", raw("00000000000000b3", "h2", now + 30, 1e308)),
        "inf": write("claims", "h2", "00000000000000b4.json", raw("00000000000000b4", "h2", float("inf"))),
        "nan": write("claims", "h2", "00000000000000b5.json", raw("00000000000000b5", "h2", now + 30, float("nan"))),
        "big": write(
            "claims",
            "h2",
            "00000000000000b6.json",
            '{"lease_id": "00000000000000b6", "host": "h2", '
            '"group": "nlp", "amount": 1, "created": 0, "until": 1' + "0" * 400 + "}",
        ),
    }
    waiting = write(
        "waiting",
        "h2",
        "forged.json",
        {"owner": "w", "host": "h2", "group": "nlp", "amount": 1, "kind": "quota", "since": 0, "until": 1e10},
    )
    assert [c.lease_id for c in book.claims(now=now, capacity=8.0)] == [real]
    assert book.waiters(now, 8.0) == []
    problems = dict(book.problems)
    assert "600 s ahead of this host's clock, more than a record lives (60 s, 15 s more" in problems[bad["skewed"]]
    assert "host 'ghost' is not one of the fleet's hosts" in problems[str(folder / "ghost")]
    assert "key 'amount': 1e+308 is more than there is (8)" in problems[bad["huge"]]
    for name in ("inf", "big"):
        assert "key 'until': expected a time stamp (a finite number)" in problems[bad[name]]
    assert "key 'amount': expected an amount >= 0 (a finite number), got nan" in problems[bad["nan"]]
    assert "ahead of this host's clock" in problems[waiting]
    # the group's real lease is within its quota, and `gpusched queue health` (the quota view) names each bad record
    view = quota_view(book, 8.0, now)
    assert view["leases"] == {real: {"group": "nlp", "state": "within", "host": "h1"}}
    assert sorted(view["problems"]) == sorted(problems.values()) and len(problems) == len(bad) + 1
    # within the lifetime and the skew allowance a claim counts (a host whose clock is a few seconds ahead)
    write("claims", "h2", "00000000000000c1.json", raw("00000000000000c1", "h2", now + 70, created=900))
    assert "00000000000000c1" in [c.lease_id for c in book.claims(now=now, capacity=8.0)]


def test_one_hosts_claims_count_together_for_at_most_what_the_host_has(tmp_path):
    """Each claim within the fleet's GPUs is not enough: a writer of the book put N claims of a whole host's GPUs
    under one host (N x its GPUs counted, a group's real leases "borrowed"). A host's claims count together for at
    most what its record says it has, the oldest first; the others are named and count for nothing."""
    book = QuotaBook(str(tmp_path / "quota"), config({"groups": {"nlp": 1, "vision": 7}}))
    book.host_known = lambda host: host in ("h1", "h2")
    book.host_capacities = lambda: {"h1": 2.0, "h2": 4.0}
    now = 1000.0
    with book.lock():
        book.add_claim(Claim("00000000000000a1", "h1", "nlp", 1.0, 500.0, 0, "n0", now + 60))
        book.add_claim(Claim("00000000000000a2", "h1", "vision", 1.0, 501.0, 0, "v0", now + 60))
        for i in range(3):  # later (or forged) claims on the full host
            book.add_claim(Claim(f"00000000000000f{i}", "h1", "nlp", 2.0, 600.0 + i, 0, f"f{i}", now + 60))
        book.add_claim(Claim("00000000000000b1", "h2", "vision", 4.0, 700.0, 0, "v1", now + 60))
    counted = sorted(c.lease_id for c in book.claims(now=now, capacity=6.0))
    assert counted == ["00000000000000a1", "00000000000000a2", "00000000000000b1"]
    named = [why for _, why in book.problems]
    assert len(named) == 3 and all("host 'h1' has 2 in all, and its older claims hold 2" in w for w in named), named


def test_two_requests_never_reclaim_a_group_below_its_quota_between_them():
    c = config({"groups": {"a": 4, "b": 4}})
    claims = [claim(str(i), "a", created=i) for i in range(1, 6)]  # 5 held, 1 beyond the quota
    first, _ = reclaim_order(c, 8, claims, group="b", host="h1", now=100, owner="b1")
    assert [x.lease_id[-1] for x in first] == ["5"]
    asked = {first[0].lease_id: "b1"}
    # b1 asks again while its reclaim is under way: the same lease; b2 finds nothing left to take
    assert reclaim_order(c, 8, claims, group="b", host="h1", now=100, asked=asked, owner="b1")[0] == first
    assert reclaim_order(c, 8, claims, group="b", host="h1", now=100, asked=asked, owner="b2")[0] == []
