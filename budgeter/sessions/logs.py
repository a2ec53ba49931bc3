"""What the session layer and its front doors log about failures they did not expect."""

from __future__ import annotations

import logging
import traceback

log = logging.getLogger("budgeter.sessions")


def log_internal(exc: BaseException) -> None:
    """Type and stack only: an exception's message can hold message bodies or arguments, and
    logs never do."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = " <- ".join(f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} {f.name}" for f in reversed(frames[-8:]))
    log.error("internal error %s at %s", type(exc).__name__, where)
