"""The examples' training code (airflow_provider_gpusched.examples), without Airflow: real PyTorch training on
scikit-learn's digits, checkpoints, SIGTERM and resumption."""

import os
import subprocess
import sys
import textwrap

import pytest

from ..polling import need_torch


@pytest.fixture(autouse=True)
def _torch():
    need_torch()


@pytest.fixture(autouse=True)
def _no_runner_environment(monkeypatch):
    for name in ("GPUSCHED_CHECKPOINT_DIR", "GPUSCHED_TRIAL_DIR", "GPUSCHED_REPORT_FILE", "GPUSCHED_PRUNING"):
        monkeypatch.delenv(name, raising=False)


def test_an_mlp_learns_digits_well_above_chance_and_reports_every_epoch(tmp_path, monkeypatch):
    from airflow_provider_gpusched.core.sweep.records.reports import read_reports
    from airflow_provider_gpusched.examples.digits import train_digits

    reports = tmp_path / "reports.jsonl"
    monkeypatch.setenv("GPUSCHED_REPORT_FILE", str(reports))
    result = train_digits({"epochs": 8, "lr": 0.01}, checkpoints=str(tmp_path / "ck"))
    assert result["accuracy"] > 0.9 and result["device"] == "cpu" and result["epochs"] == 8
    curve = result["curve"]
    assert [c["epoch"] for c in curve] == list(range(1, 9))
    assert curve[-1]["val_loss"] < curve[0]["val_loss"] and curve[-1]["accuracy"] > curve[0]["accuracy"]
    lines, problems = read_reports(str(reports))
    assert problems == []
    assert [r["step"] for r in lines] == list(range(1, 9))
    assert lines[-1]["metrics"]["accuracy"] == pytest.approx(result["accuracy"], abs=1e-5)
    assert lines[-1]["checkpoint"] == str(tmp_path / "ck" / "last.pt")
    assert result["params"] == 64 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10 and result["flops"] is None


def test_a_cnn_reports_its_flops_counted_by_pytorch():
    import torch

    from airflow_provider_gpusched.examples.digits import build_model, train_digits

    params = {"block0": {"channels": 8, "kernel": 3}, "block1": {"channels": 16, "kernel": 1}, "epochs": 1}
    result = train_digits(params)
    # conv 3x3 1->8 on 8x8, pool, conv 1x1 8->16 on 4x4, pool, linear 16->10: 2 FLOPs per multiply-add
    assert result["flops"] == 2 * (8 * 8 * 8 * 9 + 4 * 4 * 16 * 8 + 16 * 10)
    assert result["params"] == sum(p.numel() for p in build_model(params).parameters())
    assert isinstance(build_model(params)[0], torch.nn.Conv2d)


def _stop_after(checks: int):
    """A stand-in for stop_requested() that says "stop" at its ``checks``-th call (one call per batch)."""
    calls = [0]

    def stop_requested() -> bool:
        calls[0] += 1
        return calls[0] >= checks

    return stop_requested


def test_a_run_stopped_mid_epoch_resumes_there_and_ends_exactly_as_an_uninterrupted_run(tmp_path, monkeypatch):
    from airflow_provider_gpusched.examples import digits

    params = {"epochs": 4, "lr": 0.01, "batch_size": 100, "dropout": 0.2}  # 14 batches per epoch
    whole = digits.train_digits(params)
    with monkeypatch.context() as m:
        m.setattr(digits, "stop_requested", _stop_after(14 + 6))  # epoch 1, after its 5th batch
        with pytest.raises(SystemExit) as stopped:
            digits.train_digits(params, checkpoints=str(tmp_path))
    assert stopped.value.code == 143
    resumed = digits.train_digits(params, checkpoints=str(tmp_path))
    assert resumed["stops"] == [{"epoch": 1, "batch": 5}] and resumed["resumed_from"] == {"epoch": 1, "batch": 5}
    assert resumed["epochs_run"] == 3  # epochs 2 to 4: the first was not trained again
    # the same batches in the same order, the same dropout draws: the same model
    assert resumed["curve"] == whole["curve"]
    assert (resumed["accuracy"], resumed["val_loss"]) == (whole["accuracy"], whole["val_loss"])
    again = digits.train_digits(params, checkpoints=str(tmp_path))  # finished: nothing left to train
    assert again["epochs_run"] == 0 and again["curve"] == whole["curve"]


def test_the_digits_data_is_scikit_learns_read_without_importing_it():
    import subprocess
    import sys

    import numpy as np
    from sklearn.datasets import load_digits

    from airflow_provider_gpusched.examples.digits import digits_arrays

    images, target = digits_arrays()
    reference = load_digits()
    assert images.shape == (1797, 8, 8) and np.array_equal(images, reference.images)
    assert np.array_equal(target, reference.target)
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from airflow_provider_gpusched.examples.digits import digits_arrays; digits_arrays(); "
            "print('sklearn' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "False"  # its import costs each trial process ~2 s of CPU


@pytest.mark.heavy
def test_sigterm_saves_a_checkpoint_and_exits_143_and_the_next_start_resumes(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""
        import os, signal
        from airflow_provider_gpusched.examples.digits import train_digits

        def preempt(epoch, metrics):
            if epoch == 2 and os.environ.get("FIRST"):
                os.kill(os.getpid(), signal.SIGTERM)   # as the runner does when normal work needs the GPU

        r = train_digits({"epochs": 4}, on_epoch_end=preempt)
        print("RESULT", r["resumed_from"], r["stops"], r["epochs_run"], signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)
    """)
    )
    env = {**os.environ, "GPUSCHED_CHECKPOINT_DIR": str(tmp_path / "ck")}
    first = subprocess.run(
        [sys.executable, str(script)], env={**env, "FIRST": "1"}, capture_output=True, text=True, timeout=120
    )
    assert first.returncode == 143, first.stderr
    assert "stopped by SIGTERM at epoch 2, batch 0" in first.stdout
    assert oct((tmp_path / "ck" / "last.pt").stat().st_mode & 0o777) == "0o600"
    # the next start, here (this process has PyTorch loaded already): it resumes where the first stopped, and
    # SIGTERM's handling is what it was once training ended
    import contextlib
    import io
    import signal

    from airflow_provider_gpusched.examples.digits import train_digits

    handling = signal.getsignal(signal.SIGTERM)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        r = train_digits({"epochs": 4}, checkpoints=str(tmp_path / "ck"))
    assert "resuming from epoch 2, batch 0" in out.getvalue()
    assert (r["resumed_from"], r["stops"], r["epochs_run"]) == ({"epoch": 2, "batch": 0}, [{"epoch": 2, "batch": 0}], 2)
    assert signal.getsignal(signal.SIGTERM) == handling


def test_a_checkpoint_for_other_parameters_or_not_a_checkpoint_is_an_error_naming_the_file(tmp_path):
    from airflow_provider_gpusched.examples.checkpoints import CheckpointError
    from airflow_provider_gpusched.examples.digits import train_digits

    train_digits({"epochs": 1}, checkpoints=str(tmp_path))
    path = tmp_path / "last.pt"
    with pytest.raises(CheckpointError, match=f"checkpoint {path}: written for other parameters"):
        train_digits({"epochs": 1, "lr": 0.5}, checkpoints=str(tmp_path))
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match=f"checkpoint {path}: not a readable PyTorch checkpoint"):
        train_digits({"epochs": 1}, checkpoints=str(tmp_path))
    from airflow_provider_gpusched.examples.checkpoints import Checkpoints, fingerprint_of
    from airflow_provider_gpusched.examples.digits import check_params

    Checkpoints(str(tmp_path), fingerprint=fingerprint_of(check_params({"epochs": 1}))).save({"epoch": 1})
    with pytest.raises(CheckpointError, match=f"checkpoint {path}: has no batch, curve, epoch_loss"):
        train_digits({"epochs": 1}, checkpoints=str(tmp_path))
    path.unlink()
    (tmp_path / "elsewhere.pt").write_bytes(b"x")
    path.symlink_to(tmp_path / "elsewhere.pt")  # planted by someone else: never followed
    with pytest.raises(CheckpointError, match=str(path)):
        train_digits({"epochs": 1}, checkpoints=str(tmp_path))


def test_a_checkpoint_holding_code_is_refused_not_run(tmp_path):
    import pickle

    from airflow_provider_gpusched.examples.checkpoints import CheckpointError, Checkpoints

    class Payload:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "ran"),))

    import torch

    torch.save(
        {"format": "gpusched-checkpoint/1", "fingerprint": "", "x": Payload()},
        tmp_path / "last.pt",
        pickle_module=pickle,
    )
    with pytest.raises(CheckpointError, match="not a readable PyTorch checkpoint"):
        Checkpoints(str(tmp_path)).load()
    assert not (tmp_path / "ran").exists()


def test_where_checkpoints_go(tmp_path, monkeypatch):
    from airflow_provider_gpusched.examples.checkpoints import checkpoint_dir

    assert checkpoint_dir() is None
    assert checkpoint_dir(tmp_path) == str(tmp_path / "checkpoint")  # a sweep trial's folder
    monkeypatch.setenv("GPUSCHED_CHECKPOINT_DIR", "/runner/checkpoint")  # the local GPU runner's: it wins
    assert checkpoint_dir(tmp_path) == "/runner/checkpoint"


@pytest.mark.parametrize(
    "params, message",
    [
        ({"lr": 0}, "params.lr: expected a number > 0, got 0"),
        ({"lr": "fast"}, "params.lr: expected a number > 0, got 'fast'"),
        ({"epochs": 2.5}, "params.epochs: expected a whole number >= 1, got 2.5"),
        ({"dropout": 1.5}, "params.dropout: expected a number from 0.0 to 0.95, got 1.5"),
        ({"optimizer": "lbfgs"}, "params.optimizer: expected adam, adamw or sgd, got 'lbfgs'"),
        ({"widht": 64}, "params.widht: unknown parameter"),
        ({"block0": {"channels": 8}, "block2": {"channels": 8}}, "blocks block0, block1, ... without gaps"),
        ({"block0": {"channels": 8, "kernel": 4}}, "params.block0.kernel: expected a whole number >= 1 and odd, got 4"),
        ({"block0": [8, 3]}, r"params.block0: expected \{channels: C, kernel: K\}"),
        ("lr=0.1", "params: expected a mapping of parameters, got str"),
    ],
)
def test_bad_parameters_are_refused_naming_the_parameter(params, message):
    from airflow_provider_gpusched.examples.digits import check_params

    with pytest.raises(ValueError, match=message):
        check_params(params)
