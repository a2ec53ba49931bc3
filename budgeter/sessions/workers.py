"""Worker threads set up to count before they take work: the gRPC server's RPC workers and the
proxy's pool for blocking work (store, tokenizer).

A thread's first count with a fastokens tokenizer sets up per-thread state, which a turn must
not pay for (``bench_service``): ``counting_pool`` sets every thread up as it starts and
``start_all`` starts them all before the server serves.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent import futures

from budgeter.tokenizers.twin import warm_thread


def counting_pool(workers: int, name: str) -> futures.ThreadPoolExecutor:
    """At most ``workers`` threads named ``name-N``, each set up to count as it starts."""
    return futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name, initializer=warm_thread)


def start_all(pool: futures.Executor, workers: int, timeout: float = 60.0) -> None:
    """Start all ``workers`` threads of ``pool`` now (each holds its thread until every one has
    started, so the pool cannot hand two of them to one idle thread)."""
    gate = threading.Barrier(workers)

    def hold() -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            gate.wait(timeout)

    futures.wait([pool.submit(hold) for _ in range(workers)], timeout=timeout)
