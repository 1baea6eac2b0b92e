"""A Slurm command runner that answers from recorded outputs (tests/data/slurm_outputs.json), so the client's
parsing and the state model are tested in milliseconds, without root or a cluster — the way submitit tests
its Slurm executor. The tests against the real cluster (tests/slurm/) stay; these cover what a cluster
rarely shows on demand."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from airflow_provider_gpusched.core.slurm.transport import CommandResult, SlurmCommandError, SlurmTransport

OUTPUTS = json.loads((Path(__file__).resolve().parents[1] / "data" / "slurm_outputs.json").read_text())
RECORDED, CONSTRUCTED = OUTPUTS["recorded"], OUTPUTS["constructed"]


@dataclass
class ReplayRunner(SlurmTransport):
    """Answers each program (``argv[0]``) from its queue of recorded answers, in order; the last answer of a
    queue repeats. An answer is the stdout text, or ``{"returncode", "stdout", "stderr"}``. Every command it
    was asked to run is kept in ``seen``. Its target is not "local", so the jobcomp file is read through
    ``tail`` (an answer too), as on a login host."""

    answers: dict[str, list] = field(default_factory=dict)
    seen: list[list[str]] = field(default_factory=list)

    @property
    def target(self) -> str:
        return "replay"

    def run(
        self, argv: Sequence[str], *, input: str | None = None, check: bool = True, timeout: float | None = None
    ) -> CommandResult:
        argv = [str(a) for a in argv]
        self.seen.append(argv)
        self.calls[argv[0]] += 1
        queue = self.answers.get(argv[0])
        if not queue:
            raise SlurmCommandError(argv, 127, f"replay: no recorded answer for {argv[0]}")
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, str):
            answer = {"stdout": answer}
        result = CommandResult(argv, answer.get("returncode", 0), answer.get("stdout", ""), answer.get("stderr", ""))
        return result.check() if check else result

    def ran(self, program: str) -> list[list[str]]:
        return [a for a in self.seen if a[0] == program]
