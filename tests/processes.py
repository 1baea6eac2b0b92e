"""Processes the tests start as "someone else's": not descendants of the test process (their parent exits at once),
as another user's job on a shared GPU host would be."""

from __future__ import annotations

import subprocess
import sys

_START = (
    "import subprocess, sys\n"
    "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(%d)'], start_new_session=True,\n"
    "                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    "print(p.pid)"
)


def start_foreign_process(seconds: int = 600) -> int:
    """A sleeping process in a session of its own whose parent has exited (kill it when done); its pid."""
    out = subprocess.run(
        [sys.executable, "-c", _START % seconds], capture_output=True, text=True, check=True, timeout=30
    )
    return int(out.stdout)
