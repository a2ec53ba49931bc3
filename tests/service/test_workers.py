"""A server's RPC workers, and the proxy's threads for blocking work, start only when calls come
(an idle server holds no counting thread) and end with their server."""

from __future__ import annotations

import threading
import time

import httpx

from budgeter.client import Client
from budgeter.service.server import create_server
from budgeter.store import MemoryStore
from tests.service.conftest import settings


def _named(prefix: str) -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith(prefix)}


def _ended(threads) -> bool:
    deadline = time.monotonic() + 10
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        time.sleep(0.01)
    return not any(t.is_alive() for t in threads)


def test_a_server_starts_workers_at_calls_and_ends_them_on_stop():
    others = _named("budgeter-rpc")  # (another test's server may still be running)
    server = create_server(settings(max_workers=3), store=MemoryStore())
    mine: set[threading.Thread] = set()
    try:
        assert not _named("budgeter-rpc") - others
        with Client(server.target, timeout=30) as client:
            session = client.create_session(window=8192)
            for _ in range(3):  # a lone caller's calls: one thread serves them all
                assert session.prompt(append=[{"role": "user", "content": "hello there"}]).tokens > 0
        mine = _named("budgeter-rpc") - others
        assert 1 <= len(mine) <= 3
    finally:
        server.stop(0)
    assert _ended(mine)


def test_the_proxy_does_its_blocking_work_on_its_own_threads(tmp_path):
    """The proxy's threads start with its first blocking work and end with the proxy."""
    from budgeter.proxy import start
    from budgeter.settings import Settings

    before = _named("budgeter-proxy_")
    proxy = start(Settings(proxy_port=0, upstream="http://127.0.0.1:9/v1", store=f"sqlite://{tmp_path}/p.db",
                           max_workers=3))
    mine: set[threading.Thread] = set()
    try:
        pool = proxy.server.config.app.state.proxy.pool
        assert pool.submit(threading.current_thread).result(timeout=30).name.startswith("budgeter-proxy_")
        mine = _named("budgeter-proxy_") - before
        assert len(mine) == 1
        live = httpx.get(proxy.base_url.removesuffix("/v1") + "/health/liveness", timeout=30)  # (no upstream)
        assert live.json()["status"] == "SERVING"
    finally:
        proxy.stop()
    assert _ended(mine)
