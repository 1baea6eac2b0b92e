"""scripts/stack.sh's own guards, checked without bringing a stack up."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_up_refuses_a_port_another_program_listens_on(tmp_path):
    """A second checkout's stack on the same port must not be reused silently (its clients would talk to the other
    checkout's api-server, plugin and DAGs): `up` stops before creating anything and names the port."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        stack_dir = tmp_path / "stack"
        out = subprocess.run(["bash", str(REPO / "scripts" / "stack.sh"), "up"], capture_output=True, text=True,
                             timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                              "GPUSCHED_STACK_DIR": str(stack_dir),
                                              "GPUSCHED_STACK_PORT": str(port)})
    assert out.returncode == 1, out.stderr
    assert f"port {port} is already in use by another program" in out.stderr
    assert "GPUSCHED_STACK_PORT" in out.stderr
    assert not stack_dir.exists()
