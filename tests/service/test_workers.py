"""A server's RPC workers, and the proxy's threads for blocking work, are set up to count before
they take a call (``Server.start_workers``, as ``budgeter serve`` runs it; the proxy's ``_config``),
and end with their server."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import time
from concurrent import futures

import httpx
import pytest

from budgeter.client import Client
from budgeter.service.server import create_server
from budgeter.sessions.workers import HotPool, start_all
from budgeter.store import MemoryStore
from budgeter.tokenizers import twin
from tests.service.conftest import settings
from tests.tokenizers.test_twin import _Recorder


def _workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("budgeter-rpc")]


def _set_up_on_every_thread(pool, workers: int) -> list[bool]:
    """Whether every fastokens counter of the process is set up, asked on each of the pool's
    ``workers`` threads at once (each waits at a gate, so no thread answers twice)."""
    live = list(twin._LIVE)
    assert live, "a fastokens counter lives (``_counter``)"
    gate = threading.Barrier(workers)

    def set_up() -> bool:
        ready = all(getattr(r._current[1], "done", False) for r in live)
        gate.wait(30)
        return ready

    return [f.result(timeout=60) for f in [pool.submit(set_up) for _ in range(workers)]]


@pytest.fixture
def _counter():
    """A fastokens counter of the process (the default profile counts with tiktoken)."""
    seen: list = []
    counter = twin.Renewing(lambda: _Recorder(seen), _Recorder(seen))
    yield counter
    twin._LIVE.discard(counter)


def _ended(threads) -> bool:
    deadline = time.monotonic() + 10
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        time.sleep(0.01)
    return not any(t.is_alive() for t in threads)


def test_warm_thread_sets_every_fastokens_counter_up_in_the_calling_thread():
    seen: list = []
    counter = twin.Renewing(lambda: _Recorder(seen), _Recorder(seen))
    worker = threading.Thread(target=twin.warm_thread)
    worker.start()
    worker.join()
    assert [t for ident, _, t in seen if ident == worker.ident] == list(twin.CORPUS)
    assert counter("a b") == 2  # this thread: set up at its first count, as before
    assert [t for ident, _, t in seen if ident == threading.get_ident()] == [*twin.CORPUS, "a b"]
    twin._LIVE.discard(counter)  # (not left for the other tests' workers to set up)


def test_warm_thread_never_raises_for_a_counter_that_fails(caplog):
    class Broken:
        def encode_ordinary(self, text):
            raise RuntimeError("cannot count")

    counter = twin.Renewing(Broken, Broken())
    worker = threading.Thread(target=twin.warm_thread)
    worker.start()
    worker.join()
    assert "cannot count" in caplog.text
    twin._LIVE.discard(counter)  # (the log record holds it until the test ends)


def test_a_server_starts_every_worker_set_up_to_count_and_ends_them_on_stop(_counter):
    """Every RPC worker runs, each with the process's fastokens tokenizers set up in its thread
    before any call reached it; a call is then served as before."""
    others = set(_workers())  # (another test's server may still be running)
    server = create_server(settings(max_workers=3), store=MemoryStore())
    mine: set[threading.Thread] = set()
    try:
        server.start_workers()
        mine = set(_workers()) - others
        assert len(mine) == 3
        assert server.pool is not None
        assert _set_up_on_every_thread(server.pool, 3) == [True] * 3
        with Client(server.target, timeout=30) as client:
            session = client.create_session(window=8192)
            assert session.prompt(append=[{"role": "user", "content": "hello there"}]).tokens > 0
    finally:
        server.stop(0)
    assert _ended(mine)


def test_the_proxy_does_its_blocking_work_on_threads_set_up_before_it_serves(tmp_path, _counter):
    """The proxy's worker threads start, set up to count, before it serves (Starlette's own pool
    starts a thread at a busy moment and retires it after 10 idle seconds, so a later burst's new
    threads set up at their first count); they end with the proxy."""
    from budgeter.proxy.server import start
    from budgeter.settings import Settings

    before = {t for t in threading.enumerate() if t.name.startswith("budgeter-proxy_")}
    proxy = start(Settings(proxy_port=0, upstream="http://127.0.0.1:9/v1", store=f"sqlite://{tmp_path}/p.db",
                           max_workers=3))
    try:
        mine = {t for t in threading.enumerate() if t.name.startswith("budgeter-proxy_")} - before
        assert len(mine) == 3
        assert _set_up_on_every_thread(proxy.proxy.pool, 3) == [True] * 3
        live = httpx.get(proxy.base_url.removesuffix("/v1") + "/health/liveness", timeout=30)  # (no upstream)
        assert live.json()["status"] == "SERVING"
    finally:
        proxy.stop()
    assert _ended(mine)


# -- the pool itself (``HotPool``) ------------------------------------------------------------


def _hold_every_worker(pool, workers: int) -> threading.Event:
    """Occupies all ``workers`` of ``pool`` (they run at once: each waits for all the others at a
    gate) until the returned event is set."""
    gate, release = threading.Barrier(workers + 1), threading.Event()

    def hold() -> None:
        gate.wait(30)
        release.wait(60)

    for _ in range(workers):
        pool.submit(hold)
    gate.wait(30)  # BrokenBarrierError unless all of them run at the same time
    return release


def test_calls_one_after_another_run_on_the_worker_that_went_idle_last():
    """An agent's turns come one after another: each runs on the thread that ran the last one,
    whose caches are warm (``ThreadPoolExecutor`` hands them round its threads in turn)."""
    pool = HotPool(4, "hot-test")
    try:
        start_all(pool, 4)
        threads = set()
        for _ in range(40):
            while len(pool._hub.idle) < 4:  # the last job's worker back on the stack (a state, not a delay)
                time.sleep(0.001)
            threads.add(pool.submit(threading.get_ident).result(timeout=30))
        assert len(threads) == 1
        release = _hold_every_worker(pool, 4)  # a burst still gets every worker
        release.set()
    finally:
        pool.shutdown()


def test_when_every_worker_is_busy_jobs_wait_and_run_in_order():
    pool = HotPool(1, "hot-test")
    try:
        release = _hold_every_worker(pool, 1)
        order: list[int] = []
        waiting = [pool.submit(order.append, i) for i in range(6)]
        assert not any(f.done() for f in waiting)
        assert waiting[2].cancel()  # a job that has not started can be called off
        release.set()
        futures.wait(waiting, timeout=60)
        assert order == [0, 1, 3, 4, 5]
    finally:
        pool.shutdown()


def test_a_job_s_exception_reaches_its_future_and_the_worker_serves_on():
    pool = HotPool(2, "hot-test")
    try:
        with pytest.raises(ZeroDivisionError):
            pool.submit(lambda: 1 / 0).result(timeout=30)
        assert pool.submit(sum, [1, 2]).result(timeout=30) == 3
        assert list(pool.map(str.upper, ["a", "b"])) == ["A", "B"]
    finally:
        pool.shutdown()


def test_shutdown_ends_the_workers_runs_or_cancels_what_waits_and_refuses_new_jobs():
    pool = HotPool(1, "hot-test")
    release = _hold_every_worker(pool, 1)
    kept = pool.submit(int, "7")
    threads = [t for t in threading.enumerate() if t.name.startswith("hot-test_")]
    pool.shutdown(wait=False)
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(int, "1")
    release.set()
    assert kept.result(timeout=60) == 7  # waiting when the pool ended: still run
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)

    pool = HotPool(1, "hot-test")
    release = _hold_every_worker(pool, 1)
    dropped = pool.submit(int, "7")
    pool.shutdown(wait=False, cancel_futures=True)
    assert dropped.cancelled()
    release.set()
    pool.shutdown(wait=True)


def test_a_job_whose_thread_cannot_start_is_refused_not_left_waiting(monkeypatch):
    pool = HotPool(2, "hot-test")
    try:
        def refuse(self):
            raise RuntimeError("can't start new thread")

        monkeypatch.setattr(threading.Thread, "start", refuse)
        with pytest.raises(RuntimeError, match="can't start"):
            pool.submit(int, "1")
        monkeypatch.undo()
        assert pool.submit(int, "2").result(timeout=30) == 2  # the refused one never ran
        assert not pool._hub.jobs
    finally:
        pool.shutdown()


def test_each_worker_is_set_up_once_as_it_starts():
    seen: list[int] = []
    pool = HotPool(3, "hot-test", initializer=lambda: seen.append(threading.get_ident()))
    try:
        start_all(pool, 3)
        for _ in range(10):
            pool.submit(int).result(timeout=30)
        assert len(seen) == len(set(seen)) == 3
    finally:
        pool.shutdown()


def test_a_pool_nobody_holds_ends_its_idle_workers():
    pool = HotPool(2, "hot-gone")
    start_all(pool, 2)
    threads = [t for t in threading.enumerate() if t.name.startswith("hot-gone_")]
    assert len(threads) == 2
    del pool
    gc.collect()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)


def test_a_process_whose_pool_idles_exits_when_its_main_thread_ends():
    """The workers are not daemon threads; the interpreter ends them at exit instead of waiting
    for them forever."""
    code = ("from budgeter.sessions.workers import counting_pool, start_all\n"
            "pool = counting_pool(3, 'idle')\n"
            "start_all(pool, 3)\n"
            "print(pool.submit(sum, [2, 3]).result())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stdout) == (0, "5\n"), done.stderr
