"""A server's RPC workers are set up to count before they take a call (``Server.start_workers``,
as ``budgeter serve`` runs it), and end with the server."""

from __future__ import annotations

import threading
import time

from budgeter.client import Client
from budgeter.service.server import create_server
from budgeter.store import MemoryStore
from budgeter.tokenizers import twin
from tests.service.conftest import settings
from tests.tokenizers.test_twin import _Recorder


def _workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("budgeter-rpc")]


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


def test_a_server_starts_every_worker_set_up_to_count_and_ends_them_on_stop():
    """Every RPC worker runs, each with the process's fastokens tokenizers set up in its thread
    before any call reached it; a call is then served as before."""
    others = set(_workers())  # (another test's server may still be running)
    server = create_server(settings(max_workers=3), store=MemoryStore())
    mine: set[threading.Thread] = set()
    try:
        live = list(twin._LIVE)
        assert live, "the default profile counts with fastokens"
        server.start_workers()
        mine = set(_workers()) - others
        assert len(mine) == 3
        gate = threading.Barrier(3)

        def set_up() -> bool:  # run on each worker at once: the three wait at the gate
            ready = all(getattr(r._current[1], "done", False) for r in live)
            gate.wait(30)
            return ready

        assert server.pool is not None
        assert [f.result(timeout=60) for f in [server.pool.submit(set_up) for _ in range(3)]] == [True] * 3
        with Client(server.target, timeout=30) as client:
            session = client.create_session(window=8192)
            assert session.prompt(append=[{"role": "user", "content": "hello there"}]).tokens > 0
    finally:
        server.stop(0)
    deadline = time.monotonic() + 10
    while any(t.is_alive() for t in mine) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(t.is_alive() for t in mine)
