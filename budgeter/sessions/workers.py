"""Worker threads set up to count before they take work: the gRPC server's RPC workers and the
proxy's pool for blocking work (store, tokenizer).

A thread's first count sets up fastokens' per-thread caches (``twin.warm_thread``): 13-290 ms
here. A pool whose threads start at the call that finds the others busy (``ThreadPoolExecutor``),
or that retires threads idle for 10 s and starts new ones later (anyio's, behind Starlette's
``run_in_threadpool``), makes some call pay for it. ``counting_pool`` and ``LastIdlePool`` set
every thread up as it starts, ``start_all`` starts them all at once, and they live as long as the
pool.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Callable
from concurrent import futures
from typing import Any

from budgeter.tokenizers.twin import warm_thread

Task = tuple[futures.Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


def counting_pool(workers: int, name: str) -> futures.ThreadPoolExecutor:
    """At most ``workers`` threads named ``name-N``, each set up to count as it starts."""
    return futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name, initializer=warm_thread)


def start_all(pool: futures.Executor, workers: int, timeout: float = 60.0) -> None:
    """Start all ``workers`` threads of ``pool`` now (each holds its thread until every one has
    started, so the pool cannot hand two of them to one idle thread)."""
    if workers <= 0:
        return
    gate = threading.Barrier(workers)

    def hold() -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            gate.wait(timeout)

    futures.wait([pool.submit(hold) for _ in range(workers)], timeout=timeout)


def _run(task: Task) -> None:
    future, fn, args, kwargs = task
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:
        future.set_exception(exc)
    else:
        future.set_result(result)


class _Slot:
    """An idle thread's mailbox: the task handed to it (None: the pool shut down)."""

    __slots__ = ("task", "wake")

    def __init__(self) -> None:
        self.task: Task | None = None
        self.wake = threading.Event()


class LastIdlePool(futures.Executor):
    """At most ``workers`` threads, each set up to count as it starts; the thread that went idle
    last takes the next task, as in anyio's pool, so a lone caller's turns run on one thread whose
    caches hold what the previous turn left. ``ThreadPoolExecutor`` hands each task to whichever
    idle thread wakes first, and a lone agent's turns through the proxy rotate over all of them:
    overhead p50 3.15-3.78 ms against 2.65-2.71 on one thread (``bench_proxy``)."""

    def __init__(self, workers: int, name: str) -> None:
        self._max, self._name = workers, name
        self._lock = threading.Lock()
        self._idle: list[_Slot] = []  # the last to go idle on top
        self._backlog: deque[Task] = deque()
        self._threads: list[threading.Thread] = []
        self._closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> futures.Future[Any]:
        future: futures.Future[Any] = futures.Future()
        task: Task = (future, fn, args, kwargs)
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if self._idle:
                slot = self._idle.pop()
                slot.task = task
                slot.wake.set()
            elif len(self._threads) < self._max:
                slot = _Slot()
                slot.task = task  # (not the thread's args, which it would hold while it lives)
                thread = threading.Thread(target=self._work, args=(slot,), daemon=True,
                                          name=f"{self._name}_{len(self._threads)}")
                self._threads.append(thread)
                thread.start()
            else:
                self._backlog.append(task)
        return future

    def _work(self, slot: _Slot) -> None:
        warm_thread()
        task, slot.task = slot.task, None
        while task is not None:
            _run(task)
            task = None  # an idle thread holds nothing of the task it ran
            with self._lock:
                if self._backlog:
                    task = self._backlog.popleft()
                    continue
                if self._closed:
                    return
                slot.task = None
                slot.wake.clear()
                self._idle.append(slot)
            slot.wake.wait()
            task = slot.task

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            if cancel_futures:
                while self._backlog:
                    self._backlog.popleft()[0].cancel()
        for slot in idle:  # their task stays None: they end
            slot.wake.set()
        if wait:
            for thread in list(self._threads):
                if thread is not threading.current_thread():
                    thread.join()
