"""Running the proxy with uvicorn: ``serve(settings)`` in the foreground (``budgeter proxy``), or
``start(settings)`` in a thread on a given socket (tests and benchmarks bind ``127.0.0.1:0``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import uvicorn

from budgeter.errors import BudgeterError
from budgeter.proxy.app import Proxy, create_app
from budgeter.sessions.cpus import pin
from budgeter.sessions.sessions import Sessions, from_settings
from budgeter.sessions.tokenizers import settle
from budgeter.sessions.workers import start_all
from budgeter.settings import Settings
from budgeter.store import open_store
from budgeter.tokenizers.twin import background

log = logging.getLogger("budgeter.proxy")


def open_sessions(settings: Settings) -> Sessions:
    """The same session layer and store as ``budgeter serve`` (so both can share one store)."""
    return from_settings(settings, open_store(settings.store_url, **settings.store_options()))


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """SIGTERM and Ctrl-C stop the server gracefully and the process exits 0 (uvicorn's own
        handler re-raises the signal after shutdown)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class _HeadDeadline(asyncio.Protocol):
    """Closes a connection whose request head (request line and headers) is not in within
    ``head_timeout`` seconds: from the connection, or from the first byte of a next request on a
    kept-alive one. Mixed into uvicorn's own HTTP protocol (``head_deadline``), whichever it is:
    both make a new ``cycle`` when a head is complete, and nothing else here depends on them."""

    head_timeout: float
    cycle: Any
    transport: asyncio.Transport
    _deadline: asyncio.TimerHandle | None = None
    _cycle_before: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._deadline is None and (self.cycle is None or self.cycle.response_complete):
            self._arm()  # the first bytes of the next request
        super().data_received(data)
        if self._deadline is not None and self.cycle is not self._cycle_before:
            self._disarm()  # its head is in: a cycle was made for it

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._cycle_before = self.cycle
        self._deadline = asyncio.get_running_loop().call_later(self.head_timeout, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        log.debug("closing a connection whose request head took over %s s", self.head_timeout)
        self.transport.close()


def head_deadline(head_timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (httptools where installed, else h11) with ``_HeadDeadline``."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    return type("HeadDeadlineProtocol", (_HeadDeadline, AutoHTTPProtocol), {"head_timeout": head_timeout})


def _config(settings: Settings, sessions: Sessions, *, log_level: str) -> tuple[uvicorn.Config, Proxy]:
    """The app, with its worker threads started and set up to count, in uvicorn's config; and its
    handlers."""
    app = create_app(settings, sessions)
    proxy: Proxy = app.state.proxy
    start_all(proxy.pool, settings.max_workers)
    return uvicorn.Config(app, host=settings.host, port=settings.proxy_port, log_level=log_level,
                          access_log=False, timeout_graceful_shutdown=int(settings.grace) or None,
                          lifespan="on", http=head_deadline(settings.header_timeout)), proxy


@dataclass
class ProxyServer:
    server: uvicorn.Server
    thread: threading.Thread
    port: int
    sessions: Sessions
    proxy: Proxy

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def settled(self, timeout: float | None = None) -> bool:
        """Wait until the replies already answered are in their sessions (each is appended just
        after its response goes out): for a reader of the store beside the proxy."""
        return self.proxy.turns.settled(timeout)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sessions.store.close()


class CannotListen(BudgeterError):
    reason = "CANNOT_LISTEN"


def _bind(settings: Settings) -> socket.socket:
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say so, and without it a reply
    # written as head then body waits for the client's delayed ACK (~40 ms a turn, bench_proxy)
    sock = socket.socket(socket.AF_INET6 if ":" in settings.host else socket.AF_INET, socket.SOCK_STREAM,
                         socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.host, settings.proxy_port))
    except OSError as exc:
        sock.close()
        raise CannotListen(f"cannot listen on {settings.host}:{settings.proxy_port}: {exc.strerror}",
                            metadata={"port": settings.proxy_port}) from exc
    return sock


def start(settings: Settings, *, sessions: Sessions | None = None, log_level: str = "warning") -> ProxyServer:
    """The proxy on ``settings.host:settings.proxy_port`` (0: a free port) in a background thread."""
    sessions = sessions or open_sessions(settings)
    sock = _bind(settings)
    config, proxy = _config(settings, sessions, log_level=log_level)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="budgeter-proxy")
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    if not server.started:
        raise BudgeterError("the proxy did not start")
    return ProxyServer(server, thread, sock.getsockname()[1], sessions, proxy)


def serve(settings: Settings, *, log_level: str = "info") -> None:
    """Run in the foreground until SIGTERM or Ctrl-C; in-flight requests get ``settings.grace``
    seconds."""
    pin(settings.cpus)
    background()  # a profile's fastokens twin is made while the proxy answers (exact either way)
    sessions = open_sessions(settings)
    settle(sessions.tokenizers, [settings.default_tokenizer])
    try:
        sock = _bind(settings)
        port = sock.getsockname()[1]
        chat_format = settings.chat_formats.get(settings.default_tokenizer)
        shown = f", chat format {chat_format}" if chat_format else ""
        print(f"budgeter proxy: serving on http://{settings.host}:{port}/v1 -> {settings.upstream} "
              f"(store {settings.store_url}, tokenizer {settings.default_tokenizer}{shown})", flush=True)
        _Server(_config(settings, sessions, log_level=log_level)[0]).run(sockets=[sock])
    finally:
        sessions.store.close()
    print("budgeter proxy: stopped", flush=True)
