"""PBT's checkpoint hand-over (core/sweep/searches/pbt.py hand_over, core/safe_files.py copy_tree_at): regular files and
folders only, walked and written by directory fds, never through a link at either end; sparse; bounded."""

import json
import logging
import os
import stat
import time

import pytest

from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.safe_files import UnsafePathError
from airflow_provider_gpusched.core.sweep.searches.pbt import hand_over, read_handed_over

NOTE = {"from_member": 1, "generation": 0, "trial_id": "t1", "exploited": True}
WHAT = "sweep s: PBT member 1's trial of generation 0"


@pytest.fixture
def sweep(tmp_path):
    """A sweep's trials folder with a donor trial whose checkpoint holds a file and a nested folder, and a secret
    outside the sweep."""
    trials = tmp_path / "results" / "s" / "trials"
    ckpt = trials / "donor" / "checkpoint"
    (ckpt / "shards" / "rank0").mkdir(parents=True)
    (ckpt / "model.pt").write_bytes(b"weights")
    (ckpt / "shards" / "rank0" / "part.bin").write_bytes(b"shard")
    (ckpt / "handed_over.json").write_text('{"from_member": 3}')  # the donor's own note stays the donor's
    outside = tmp_path / "private"
    outside.mkdir()
    (outside / "id_rsa").write_text("SECRET")
    return trials, outside


def over(trials, member="member"):
    hand_over(str(trials / "donor"), str(trials / member), NOTE, WHAT)
    return trials / member / "checkpoint"


def test_files_and_nested_folders_are_copied_private_with_the_note(sweep):
    trials, _ = sweep
    dst = over(trials)
    assert (dst / "model.pt").read_bytes() == b"weights"
    assert (dst / "shards" / "rank0" / "part.bin").read_bytes() == b"shard"
    assert stat.S_IMODE((dst / "model.pt").stat().st_mode) == 0o600
    assert stat.S_IMODE((dst / "shards").stat().st_mode) == 0o700
    note = read_handed_over(str(dst))
    assert note == {**NOTE, "folder": str(trials / "donor" / "checkpoint")}
    assert sorted(os.listdir(dst)) == ["handed_over.json", "model.pt", "shards"]  # no temporary file left
    (trials / "donor" / "checkpoint" / "model.pt").write_bytes(b"newer")
    over(trials)  # done once: a member that has its note keeps what it was given
    assert (dst / "model.pt").read_bytes() == b"weights"


def test_a_donor_checkpoint_folder_that_is_a_link_is_refused_and_nothing_is_copied_from_outside(sweep):
    trials, outside = sweep
    ckpt = trials / "donor" / "checkpoint"
    ckpt.rename(trials / "donor" / "real")
    ckpt.symlink_to(outside)
    with pytest.raises(UnsafePathError, match=r"checkpoint folder .*/donor/checkpoint is a symbolic link"):
        over(trials)
    assert not (trials / "member" / "checkpoint" / "id_rsa").exists()


def test_a_donor_trial_folder_that_is_a_link_is_refused(sweep):
    trials, outside = sweep
    (outside / "checkpoint").mkdir()
    (outside / "checkpoint" / "id_rsa").write_text("SECRET")
    (trials / "donor").rename(trials / "donor.real")
    (trials / "donor").symlink_to(outside)
    with pytest.raises(UnsafePathError, match=r"trial folder .*/trials/donor is a symbolic link"):
        over(trials)
    assert not (trials / "member" / "checkpoint" / "id_rsa").exists()


def test_a_member_checkpoint_folder_that_is_a_link_is_refused_and_its_target_untouched(sweep, tmp_path):
    trials, _ = sweep
    victim = tmp_path / "victim"
    victim.mkdir()
    (trials / "member").mkdir()
    (trials / "member" / "checkpoint").symlink_to(victim)
    with pytest.raises(UnsafePathError, match=r"checkpoint folder .*/member/checkpoint is a symbolic link"):
        over(trials)
    assert os.listdir(victim) == []


def test_a_member_trial_folder_that_is_a_link_is_refused_and_its_target_untouched(sweep, tmp_path):
    trials, _ = sweep
    victim = tmp_path / "victim"
    victim.mkdir()
    (trials / "member").symlink_to(victim)
    with pytest.raises(UnsafePathError, match=r"trial folder .*/trials/member is a symbolic link"):
        over(trials)
    assert os.listdir(victim) == []


def test_a_member_file_that_is_a_link_is_replaced_and_its_target_keeps_content_and_mode(sweep, tmp_path):
    trials, _ = sweep
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    victim.chmod(0o644)
    dst = trials / "member" / "checkpoint"
    dst.mkdir(parents=True)
    (dst / "model.pt").symlink_to(victim)
    over(trials)
    assert victim.read_text() == "mine" and stat.S_IMODE(victim.stat().st_mode) == 0o644
    assert not (dst / "model.pt").is_symlink() and (dst / "model.pt").read_bytes() == b"weights"


def test_links_and_fifos_inside_the_donor_are_left_out_and_named(sweep, caplog):
    trials, outside = sweep
    ckpt = trials / "donor" / "checkpoint"
    (ckpt / "key").symlink_to(outside / "id_rsa")
    (ckpt / "shards" / "outside").symlink_to(outside)
    os.mkfifo(ckpt / "shards" / "rank0" / "pipe")
    with caplog.at_level(logging.WARNING):
        dst = over(trials)
    assert not os.path.lexists(dst / "key") and not os.path.lexists(dst / "shards" / "outside")
    assert not os.path.lexists(dst / "shards" / "rank0" / "pipe")
    assert (dst / "model.pt").read_bytes() == b"weights"
    skipped = read_handed_over(str(dst))["skipped"]
    assert sorted(skipped) == [
        "key (a symbolic link)",
        "shards/outside (a symbolic link)",
        "shards/rank0/pipe (not a regular file: a FIFO, socket or device)",
    ]
    assert "key (a symbolic link)" in caplog.text and "left out" in caplog.text


def test_a_donor_with_only_links_left_no_checkpoint(sweep):
    trials, outside = sweep
    ckpt = trials / "donor" / "checkpoint"
    for name in ("model.pt", "handed_over.json"):
        (ckpt / name).unlink()
    (ckpt / "shards" / "rank0" / "part.bin").unlink()
    (ckpt / "model.pt").symlink_to(outside / "id_rsa")
    with pytest.raises(GpuschedError, match=r"left no checkpoint in .*/donor/checkpoint"):
        over(trials)


def test_a_2_gib_sparse_checkpoint_is_copied_sparse_in_well_under_a_second(sweep):
    trials, _ = sweep
    path = trials / "donor" / "checkpoint" / "big.bin"
    size = 2 << 30
    with open(path, "wb") as fh:
        fh.write(b"head")
        fh.seek(size - 4)
        fh.write(b"tail")
    if os.stat(path).st_blocks * 512 > 1 << 20:
        pytest.skip("this file system does not keep sparse files")
    started = time.monotonic()
    dst = over(trials)
    took = time.monotonic() - started
    st = os.stat(dst / "big.bin")
    assert st.st_size == size
    assert st.st_blocks * 512 <= 1 << 20, st.st_blocks  # holes stay holes: not 2 GiB allocated
    with open(dst / "big.bin", "rb") as fh:
        assert fh.read(4) == b"head"
        fh.seek(size - 4)
        assert fh.read(4) == b"tail"
    assert took < 1.0, took


def test_a_checkpoint_larger_than_the_free_space_is_a_clear_error_naming_the_file(sweep, monkeypatch):
    trials, _ = sweep

    class Full:
        f_bavail, f_frsize = 1, 4

    monkeypatch.setattr(os, "fstatvfs", lambda fd: Full())
    with pytest.raises(
        GpuschedError, match=r"/member/checkpoint/\S+: the [57] bytes of data of \S+/donor/checkpoint/\S+ do not fit"
    ):
        over(trials)


def test_a_full_disk_while_copying_names_the_file(sweep, monkeypatch):
    trials, _ = sweep
    import errno

    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    with pytest.raises(GpuschedError, match=r"/member/checkpoint/.*: No space left on device copying .*/donor/"):
        over(trials)
    leftovers = [n for _, _, names in os.walk(trials / "member") for n in names if n.endswith(".tmp")]
    assert leftovers == []


def test_the_note_is_written_through_no_link_and_read_back_through_none(sweep, tmp_path):
    trials, _ = sweep
    victim = tmp_path / "victim.json"
    victim.write_text(json.dumps({"from_member": 9}))
    dst = trials / "member" / "checkpoint"
    dst.mkdir(parents=True)
    (dst / "handed_over.json").symlink_to(victim)
    assert read_handed_over(str(dst)) is None  # a link is no note: the hand-over is not taken for done
    over(trials)
    assert json.loads(victim.read_text()) == {"from_member": 9}
    assert read_handed_over(str(dst))["from_member"] == 1
