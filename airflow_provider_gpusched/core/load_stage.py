"""A load stage's channel as a wrapper sees it (core/gpu/stages.py has the two-stage handshake itself): the
variable that names the channel's two file descriptors, and the descriptors that a wrapper starting the work as its
own child (a sweep's trial runner, on any backend) passes on. A leaf module, the standard library only: a trial
runner process imports it, and must start in a tenth of a second."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

#: where the child finds the channel's two file descriptors, "read,write"
STAGE_ENV = "GPUSCHED_STAGE_FDS"


def channel_fds(env: Mapping[str, Any] | None = None) -> tuple[int, ...]:
    """The channel's fds named in ``env`` (default ``os.environ``), for a wrapper that starts the work as its own
    child (``subprocess.Popen(..., pass_fds=channel_fds())``): () when there is none."""
    raw = (os.environ if env is None else env).get(STAGE_ENV, "")
    try:
        fds = tuple(int(x) for x in raw.split(",")) if raw else ()
    except ValueError:
        return ()
    return fds if len(fds) == 2 and all(fd > 2 for fd in fds) else ()


__all__ = ["STAGE_ENV", "channel_fds"]
