"""Pinning a server process to CPUs (``Settings.cpus``, ``--cpus``).

A replica's turn touches the same few megabytes every time and runs faster with them in its
core's caches (``bench_turns --cold``); pinned, a replica keeps to one core. Like nginx's
``worker_cpu_affinity``, an operator's choice: a pinned replica cannot borrow an idle core, so give
each its own (``deploy/OPERATIONS.md``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence

from budgeter.errors import InvalidInput


def span(cpus: Sequence[int] | set[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    runs: list[list[int]] = []  # [first, last] of each run of consecutive CPUs
    for n in sorted(set(cpus)):
        if runs and runs[-1][1] == n - 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def pin(cpus: Sequence[int]) -> None:
    """Run this process, every thread it has now and every thread it starts later, on ``cpus``
    (nothing to do when empty). ``InvalidInput`` (reason ``CPUS_UNAVAILABLE``) when the OS cannot
    pin here or the process may not run on one of them."""
    if not cpus:
        return
    if not hasattr(os, "sched_setaffinity"):
        raise InvalidInput("cpus: this OS offers no way to pin a process to CPUs; leave cpus unset",
                           field="cpus", reason="CPUS_UNAVAILABLE")
    allowed, wanted = os.sched_getaffinity(0), set(cpus)
    missing = wanted - allowed
    if missing:
        raise InvalidInput(f"cpus {span(missing)} are not available to this process (it may run on "
                           f"{span(allowed)}); choose among those with --cpus (BUDGETER_CPUS)",
                           field="cpus", reason="CPUS_UNAVAILABLE",
                           metadata={"cpus": span(cpus), "available": span(allowed)})
    os.sched_setaffinity(0, wanted)  # the calling thread: the threads it starts inherit it
    for task in _tasks():  # threads started before (a library's own): all of them
        with contextlib.suppress(ProcessLookupError, PermissionError):  # ended meanwhile
            os.sched_setaffinity(task, wanted)


def _tasks() -> list[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:  # no /proc: the calling thread's mask is what there is
        return []
