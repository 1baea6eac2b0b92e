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
        out = subprocess.run(
            ["bash", str(REPO / "scripts" / "stack.sh"), "up"],
            capture_output=True,
            text=True,
            timeout=60,
            env={
                "PATH": "/usr/bin:/bin",
                "HOME": str(tmp_path),
                "GPUSCHED_STACK_DIR": str(stack_dir),
                "GPUSCHED_STACK_PORT": str(port),
            },
        )
    said = (out.returncode, out.stdout[-2000:], out.stderr[-2000:])  # every assertion shows what the script said
    assert out.returncode == 1, said
    assert f"port {port} is already in use by another program" in out.stderr, said
    assert "GPUSCHED_STACK_PORT" in out.stderr, said
    assert not stack_dir.exists(), said


def _stack(tmp_path, *args, **env):
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "stack.sh"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env},
    )


def test_status_and_down_read_the_settings_the_stack_was_started_with(tmp_path):
    """Issue 52: `status` in a new shell forgot a custom port and said 'api-server not answering' while all was
    healthy. Every command but `up` uses the settings `up` recorded, whatever this shell exports."""
    stack_dir = tmp_path / "stack"
    assert _stack(tmp_path, "status", GPUSCHED_STACK_DIR=str(stack_dir)).stdout.startswith("no stack in ")
    stack_dir.mkdir()
    pg = tmp_path / "pgbase"
    pg.mkdir()
    (stack_dir / "pgdata").write_text(f"{pg}\n")
    (stack_dir / "settings.env").write_text(
        "PORT=39391\nPG_PORT=39392\nAPI_HOST=127.0.0.1\nEXTRA_DAGS=/x y\n"
        "PARALLELISM=8\nENV=export A='1'\\nexport B=\"2\\\\n\"\n"
    )
    status = _stack(tmp_path, "status", GPUSCHED_STACK_DIR=str(stack_dir), GPUSCHED_STACK_PORT="28080")
    assert status.returncode == 1  # nothing runs there
    assert "api-server http://127.0.0.1:39391, PostgreSQL port 39392, extra DAGs /x y" in status.stdout, status.stdout
    assert "api-server: stopped" in status.stdout and "health: api-server not answering" in status.stdout
    down = _stack(tmp_path, "down", GPUSCHED_STACK_DIR=str(stack_dir))
    assert down.returncode == 0, down.stderr
    assert f"kept: its PostgreSQL data in {pg} and its files in {stack_dir}" in down.stderr
    assert "destroy removes both" in down.stderr
