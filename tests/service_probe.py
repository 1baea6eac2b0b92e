"""Not a test module of the suite (its name is not test_*): tests/test_services.py runs it through scripts/test.sh and
stops that run the ways a run ends (Ctrl-C, SIGTERM, SIGKILL). It starts a real service (the sshd of the login_host
fixture), says so in $GPUSCHED_PROBE_FILE, and waits to be stopped."""

import json
import os
import time
from pathlib import Path

from tests import services


def test_holds_a_service_until_it_is_stopped(login_host):
    port, _ = login_host
    mine = [r for _, r in services.records() if r["name"] == "sshd" and r["owner"] == services.owner()]
    assert len(mine) == 1, mine
    Path(os.environ["GPUSCHED_PROBE_FILE"]).write_text(json.dumps({"pgid": mine[0]["pgid"], "port": port}))
    time.sleep(600)
