"""Worker threads set up to count before they take work: the gRPC server's RPC workers and the
proxy's pool for blocking work (store, tokenizer).

A thread's first count with a fastokens tokenizer sets up per-thread state, which a turn must
not pay for (``bench_service``): ``counting_pool`` sets every thread up as it starts and
``start_all`` starts them all before the server serves.

Each job goes to the worker that went idle last (``HotPool``). ``ThreadPoolExecutor``'s idle
workers all wait on one queue and take turns, so calls that come one after another, as an agent's
turns do, each ran on the thread that had waited longest, whose stack, objects and tokenizer state
(tiktoken keeps a regex per thread) had left the CPU's caches: the same turns cost more CPU with
eight workers than with one (``bench_flat``'s ``serve`` rows).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import weakref
from collections import deque
from collections.abc import Callable
from concurrent import futures
from typing import Any

from budgeter.tokenizers.twin import warm_thread

log = logging.getLogger("budgeter.sessions")

_Job = tuple["futures.Future[Any]", Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class _Worker:
    __slots__ = ("job", "wake")

    def __init__(self) -> None:
        self.wake = threading.Lock()
        self.wake.acquire()  # released by whoever hands this worker a job (or ends the pool)
        self.job: _Job | None = None


class _Hub:
    """What a pool's workers share: they hold this, not the pool, so a pool nobody holds is
    collected and its idle workers end (as ``ThreadPoolExecutor``'s do)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: list[_Worker] = []  # a stack: the last to go idle is handed the next job
        self.jobs: deque[_Job] = deque()  # waiting, in order, while every worker is busy
        self.threads: list[threading.Thread] = []
        self.closed = False

    def close(self, *, cancel: bool = False) -> list[threading.Thread]:
        """No new jobs; waiting jobs still run unless ``cancel``; idle workers end. Returns the
        workers' threads."""
        with self.lock:
            self.closed = True
            cancelled = [self.jobs.popleft()[0] for _ in range(len(self.jobs))] if cancel else []
            idle, self.idle = self.idle, []
        for future in cancelled:
            future.cancel()
        for worker in idle:
            worker.job = None
            worker.wake.release()
        return list(self.threads)

    def work(self, me: _Worker, initializer: Callable[[], object] | None) -> None:
        if initializer is not None:
            try:
                initializer()
            except Exception:  # a worker that could not warm up still serves (it warms on use)
                log.exception("budgeter: a worker thread's set-up failed")
        while True:
            with self.lock:
                if self.jobs:
                    job: _Job | None = self.jobs.popleft()
                elif self.closed:
                    return
                else:
                    self.idle.append(me)
                    job = None
            if job is None:
                me.wake.acquire()
                job, me.job = me.job, None
                if job is None:  # the pool ended
                    return
            _run(job)
            job = None  # (the result is not held while this worker idles)


def _run(job: _Job) -> None:
    future, fn, args, kwargs = job
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:  # as ThreadPoolExecutor: the future carries it
        future.set_exception(exc)
    else:
        future.set_result(result)


class HotPool(futures.Executor):
    """At most ``workers`` threads named ``name_N``, started as jobs come; each job goes to the
    worker that went idle last (why: this module's docstring), or, when every worker is busy,
    waits its turn in order."""

    def __init__(self, workers: int, name: str, initializer: Callable[[], object] | None = None) -> None:
        if workers < 1:
            raise ValueError("a pool needs at least one worker")
        self._workers = workers
        self._name = name
        self._initializer = initializer
        self._hub = hub = _Hub()
        self._count = itertools.count()
        _HUBS.add(hub)
        weakref.finalize(self, hub.close)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> futures.Future[Any]:
        future: futures.Future[Any] = futures.Future()
        job: _Job = (future, fn, args, kwargs)
        hub = self._hub
        with hub.lock:
            if hub.closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if hub.idle:
                worker = hub.idle.pop()
                worker.job = job
                worker.wake.release()
                return future
            hub.jobs.append(job)
            if len(hub.threads) < self._workers:
                thread = threading.Thread(target=hub.work, args=(_Worker(), self._initializer),
                                          name=f"{self._name}_{next(self._count)}")
                try:
                    thread.start()
                except BaseException:  # (no thread to be had): the caller is told, the job is not left queued
                    hub.jobs.remove(job)
                    raise
                hub.threads.append(thread)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        threads = self._hub.close(cancel=cancel_futures)
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()


_HUBS: weakref.WeakSet[_Hub] = weakref.WeakSet()


def _at_exit() -> None:
    """The workers are not daemon threads (a daemon thread inside a Rust tokenizer when the
    interpreter exits aborts the process): end them as ``ThreadPoolExecutor`` does, before the
    interpreter waits for its threads."""
    threads = [t for hub in list(_HUBS) for t in hub.close()]
    for thread in threads:
        thread.join()


# (what concurrent.futures.thread registers for its own workers)
threading._register_atexit(_at_exit)  # type: ignore[attr-defined]


def counting_pool(workers: int, name: str) -> HotPool:
    """At most ``workers`` threads named ``name_N``, each set up to count as it starts."""
    return HotPool(workers, name, initializer=warm_thread)


def start_all(pool: futures.Executor, workers: int, timeout: float = 60.0) -> None:
    """Start all ``workers`` threads of ``pool`` now (each holds its thread until every one has
    started, so the pool cannot hand two of them to one idle thread)."""
    gate = threading.Barrier(workers)

    def hold() -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            gate.wait(timeout)

    futures.wait([pool.submit(hold) for _ in range(workers)], timeout=timeout)
