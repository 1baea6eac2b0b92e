"""A checkpointing job for the preemption tests: 0.1 s steps, a checkpoint every 5 steps and on SIGTERM
(then exit 143), resumes from $GPUSCHED_CHECKPOINT_DIR. Usage: checkpointing_trainer.py TOTAL_STEPS [FIRST_RUN_STEPS]
(FIRST_RUN_STEPS: how far the run before any preemption may go: a long one waits to be preempted, so a test
does not depend on how fast the preempting task starts)."""

import os
import pathlib
import signal
import sys
import time

total = int(sys.argv[1])
if len(sys.argv) > 2 and os.environ["GPUSCHED_PREEMPTIONS"] == "0":
    total = int(sys.argv[2])
ck = pathlib.Path(os.environ["GPUSCHED_CHECKPOINT_DIR"]) / "step"
step = int(ck.read_text()) if ck.exists() else 0
print("start at step", step, "after", os.environ["GPUSCHED_PREEMPTIONS"], "preemption(s)", flush=True)
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
while step < total and not stop:
    time.sleep(0.1)
    step += 1
    if step % 5 == 0:
        ck.write_text(str(step))
ck.write_text(str(step))
print("stopped" if stop else "done", "at step", step, flush=True)
sys.exit(143 if stop else 0)
