"""What a sweep of real training did: each trial's learning-curve end point, the epochs pruning saved, and the
best accuracy (the demo's summary of gpusched_digits_hpo; also the figures in docs/examples.md).
Usage: python scripts/demo_training.py SWEEP_FOLDER"""

import json
import sys
from pathlib import Path

folder = Path(sys.argv[1])
try:
    records = json.loads((folder / "summary.json").read_text())["records"]
except (OSError, ValueError, KeyError) as exc:
    sys.exit(f"{folder}/summary.json: no sweep summary to read ({exc})")
planned = max((r["params"].get("epochs", 0) for r in records), default=0)
print(f"{'trial':<44} {'state':<10} {'epochs':>6} {'loss':>7} {'val_loss':>8} {'accuracy':>8}")
ran = saved = 0
for r in records:
    last = (r.get("reports") or {}).get("last") or {}
    epochs = (r.get("reports") or {}).get("last_step") or 0
    ran += epochs
    if r["state"] == "pruned":
        saved += planned - epochs
    fmt = lambda key, last=last: f"{last[key]:.4f}" if isinstance(last.get(key), (int, float)) else "-"  # noqa: E731
    print(
        f"{r['label'][:44]:<44} {r['state']:<10} {epochs:>6} {fmt('loss'):>7} {fmt('val_loss'):>8} {fmt('accuracy'):>8}"
    )
done = [r for r in records if r["state"] == "succeeded"]
pruned = [r for r in records if r["state"] == "pruned"]
print(
    f"{len(records)} trials: {len(done)} trained all {planned} epochs, {len(pruned)} pruned; {ran} epochs trained, "
    f"{saved} saved by pruning ({100 * saved / max(1, ran + saved):.0f}% of {ran + saved})"
)
if done:
    best = max(done, key=lambda r: r["result"]["accuracy"])
    print(
        f"best accuracy {best['result']['accuracy']:.4f} (chance: 0.1) with {best['label']} "
        f"on {best['result']['device']}"
    )
