"""What the end-to-end DAGs' GPU children run: a trial that records, in ``$E2E_OUT/<name>-<pid>.json``, when it
started and ended, where it ran (``CUDA_VISIBLE_DEVICES``, lease, reserved memory) and how it ended. With
``$GPUSCHED_CHECKPOINT_DIR`` it works in one-second steps, checkpoints each (``checkpointed``: the last one
written) and resumes from its checkpoint after a preemption (``resumed_at``)."""

RECORDING_TRIAL = r"""
import json, os, signal, sys, time
name, seconds = sys.argv[1], float(sys.argv[2])
out = os.environ["E2E_OUT"]
os.makedirs(out, exist_ok=True)
record = {"name": name, "pid": os.getpid(), "start": time.time(), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
          "lease": os.environ.get("GPUSCHED_LEASE_ID"), "memory": int(os.environ.get("GPUSCHED_GPU_MEMORY_BYTES", 0)),
          "preemptions": int(os.environ.get("GPUSCHED_PREEMPTIONS", 0) or 0), "end": None, "how": "running"}
path = os.path.join(out, f"{name}-{os.getpid()}.json")
def save(how):
    record.update(end=time.time(), how=how)
    with open(path + ".tmp", "w") as fh:
        json.dump(record, fh)
    os.replace(path + ".tmp", path)
def on_term(signum, frame):
    save("terminated")
    sys.exit(143)
signal.signal(signal.SIGTERM, on_term)
save("running")
record["end"] = None
ckpt = os.environ.get("GPUSCHED_CHECKPOINT_DIR")
done = 0
if ckpt and os.path.exists(os.path.join(ckpt, "steps")):
    done = int(open(os.path.join(ckpt, "steps")).read())
record["resumed_at"] = record["checkpointed"] = done
while done < seconds:
    time.sleep(min(1.0, seconds - done))
    done += 1
    if ckpt:  # SIGTERM waits while the checkpoint and its record change together
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        with open(os.path.join(ckpt, "steps.tmp"), "w") as fh:
            fh.write(str(done))
        os.replace(os.path.join(ckpt, "steps.tmp"), os.path.join(ckpt, "steps"))
        record["checkpointed"] = done
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
save("finished")
"""
