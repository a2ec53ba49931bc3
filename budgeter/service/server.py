"""Server assembly: store, tokenizers, servicer, health, reflection, metrics, graceful stop.

``create_server(settings)`` returns a started ``Server`` bound to ``settings.port`` (0 picks a free
one; tests bind ``127.0.0.1:0``). ``serve(settings)`` runs until SIGTERM or SIGINT, then lets
in-flight calls finish for ``settings.grace`` seconds.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from budgeter.errors import BudgeterError, InvalidInput, StoreUnavailable
from budgeter.preload import preload
from budgeter.service.auth import Auth
from budgeter.service.servicer import BudgeterServicer, handlers
from budgeter.sessions.cpus import pin, span
from budgeter.sessions.metrics import Metrics
from budgeter.sessions.sessions import Sessions, from_settings
from budgeter.sessions.tokenizers import settle
from budgeter.sessions.workers import counting_pool, start_all
from budgeter.settings import Settings, redacted
from budgeter.store import SessionStore, open_store
from budgeter.tokenizers.twin import background
from budgeter.v1 import budgeter_pb2

SERVICE = budgeter_pb2.DESCRIPTOR.services_by_name["BudgeterService"].full_name
log = logging.getLogger("budgeter.service")


@dataclass
class Server:
    grpc_server: grpc.Server
    port: int
    sessions: Sessions
    metrics: Metrics
    health: health.HealthServicer
    metrics_port: int = 0
    pool: futures.Executor | None = None
    """The RPC workers (``start_workers``): ``workers`` threads at most."""
    workers: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _closers: list[Any] = field(default_factory=list)
    _ready: bool = True
    _store_ok: bool = True
    _health_lock: threading.Lock = field(default_factory=threading.Lock)

    def ready(self) -> None:
        """Report SERVING (while the store answers): ``budgeter serve`` calls this once its
        tokenizers are loaded and its RPC workers started, so that a balancer sends no call to a
        replica still warming up."""
        self._set_health(ready=True)

    def _set_health(self, *, ready: bool | None = None, store_ok: bool | None = None) -> None:
        with self._health_lock:
            if ready is not None:
                self._ready = ready
            if store_ok is not None:
                self._store_ok = store_ok
            if self._stop.is_set():
                return  # enter_graceful_shutdown holds NOT_SERVING
            status = (health_pb2.HealthCheckResponse.SERVING if self._ready and self._store_ok
                      else health_pb2.HealthCheckResponse.NOT_SERVING)
            for name in ("", SERVICE):
                self.health.set(name, status)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self, grace: float | None = 1.0) -> None:
        if self._stop.is_set():
            return
        with self._health_lock:
            self._stop.set()
            self.health.enter_graceful_shutdown()  # probes see NOT_SERVING while calls drain
        if grace:
            time.sleep(min(0.5, grace / 4))
        self.grpc_server.stop(grace).wait()
        if self.pool is not None:  # its idle workers end (a late call still finishes)
            self.pool.shutdown(wait=False)
        for close in self._closers:
            close()
        self.sessions.store.close()

    def start_workers(self) -> None:
        """Start every RPC worker now, each set up to count before it takes a call (why:
        ``sessions/workers.py``). ``budgeter serve`` does this once, after ``settle``."""
        if self.pool is not None:
            start_all(self.pool, self.workers)


LIVENESS = "liveness"
"""Health service name that is SERVING while the process answers, whatever the store does (for
liveness probes; the server-wide status "" and the service's own follow the store)."""


def create_server(settings: Settings, *, store: SessionStore | None = None, ready: bool = True) -> Server:
    """A started server. Refuses to start (``StoreUnavailable``; ``InvalidInput`` with reason
    ``PORT_IN_USE``) when the store does not answer or a port cannot be bound. ``ready=False``:
    health stays NOT_SERVING (``liveness`` SERVING) until ``Server.ready()``."""
    store = store or _open_store(settings)
    undo: list[Callable[[], Any]] = [store.close]
    try:
        _wait_for_store(store, settings)
        return _assemble(settings, store, undo, ready)
    except BaseException:
        for close in reversed(undo):
            close()
        raise


def _assemble(settings: Settings, store: SessionStore, undo: list[Callable[[], Any]], ready: bool) -> Server:
    sessions = from_settings(settings, store)
    metrics = Metrics()
    metrics.watch_store(store)
    options = [("grpc.max_receive_message_length", settings.max_request_bytes),
               ("grpc.max_send_message_length", settings.max_request_bytes),
               ("grpc.so_reuseport", 0)]
    pool = counting_pool(settings.max_workers, "budgeter-rpc")
    server = grpc.server(pool, options=options)
    undo.append(lambda: server.stop(None))
    auth = Auth(settings.tokens())
    server.add_generic_rpc_handlers((handlers(BudgeterServicer(sessions, metrics, auth)),))
    health_servicer = health.HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
         reflection.SERVICE_NAME), server)
    port = _bind(server, settings)
    metrics_port, closers = 0, []
    if settings.metrics_port:
        metrics_port, closer = _serve_metrics(metrics, settings)
        undo.append(closer)
        closers.append(closer)
    server.start()
    out = Server(server, port, sessions, metrics, health_servicer, metrics_port, pool, settings.max_workers,
                 _closers=closers, _ready=ready)
    health_servicer.set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)
    out._set_health()
    watcher = threading.Thread(target=_watch_store, args=(out, settings), daemon=True, name="store-health")
    watcher.start()
    return out


def _open_store(settings: Settings) -> SessionStore:
    try:
        return open_store(settings.store_url, **settings.store_options())
    except BudgeterError:
        raise
    except Exception as exc:  # e.g. a Redis Cluster that cannot be reached to learn its slots
        raise StoreUnavailable(f"store {settings.store_shown} is unreachable: {_cause(exc)}",
                               metadata={"store": settings.store_shown}) from exc


def _wait_for_store(store: SessionStore, settings: Settings) -> None:
    """Fail fast at start-up: a server whose store never answered must not report SERVING."""
    deadline = time.monotonic() + settings.store_wait
    while True:
        try:
            store.ping()
            return
        except StoreUnavailable as exc:
            if time.monotonic() >= deadline:
                raise StoreUnavailable(
                    f"store {settings.store_shown} is unreachable: {_cause(exc)} (waited "
                    f"{settings.store_wait:g} s; start it, or fix --store / BUDGETER_STORE)",
                    metadata={"store": settings.store_shown}) from exc
            time.sleep(0.2)


def _cause(exc: BaseException) -> str:
    """The innermost cause's message, on one line, without a password that may be in it."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = " ".join(str(exc).split()) or type(exc).__name__
    return redacted(text)


def _bind(server: grpc.Server, settings: Settings) -> int:
    address = f"{settings.host}:{settings.port}"
    credentials = _tls(settings)
    why = _bind_error(settings.host, settings.port) if settings.port else None  # before gRPC logs it
    port = 0
    if why is None:
        try:
            port = (server.add_secure_port(address, credentials) if credentials
                    else server.add_insecure_port(address))
        except RuntimeError:
            port = 0
    if port == 0 and why is not None and "in use" not in why:
        raise InvalidInput(f"cannot listen on {address}: {why}; choose an address of this machine "
                           "with --host (BUDGETER_HOST)", field="host", reason="CANNOT_LISTEN",
                           metadata={"host": settings.host})
    if port == 0:
        raise InvalidInput(f"cannot listen on {address}: {why or 'address in use'}; choose another port "
                           "with --port (BUDGETER_PORT) or stop what holds it", field="port",
                           reason="PORT_IN_USE", metadata={"port": settings.port})
    return port


def _bind_error(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be bound, as the OS says it; None when it can."""
    import socket

    try:
        family, _, _, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC does
            s.bind(addr)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _tls(settings: Settings) -> grpc.ServerCredentials | None:
    if settings.tls_cert is None and settings.tls_key is None:
        return None
    if settings.tls_cert is None or settings.tls_key is None:
        raise InvalidInput("TLS needs both tls_cert and tls_key", field="tls_cert")
    try:
        pair = (settings.tls_key.read_bytes(), settings.tls_cert.read_bytes())
        ca = settings.tls_client_ca.read_bytes() if settings.tls_client_ca else None
    except OSError as exc:
        raise InvalidInput(f"cannot read a TLS file: {exc}", field="tls_cert") from exc
    return grpc.ssl_server_credentials([pair], root_certificates=ca, require_client_auth=ca is not None)


def _serve_metrics(metrics: Metrics, settings: Settings) -> tuple[int, Any]:
    from prometheus_client import start_http_server

    try:
        httpd, thread = start_http_server(settings.metrics_port, addr=settings.host,
                                          registry=metrics.registry)
    except OSError as exc:
        raise InvalidInput(f"cannot serve metrics on {settings.host}:{settings.metrics_port}: "
                           f"{exc.strerror or exc}; choose another port with --metrics-port "
                           "(BUDGETER_METRICS_PORT; 0 turns metrics off)", field="metrics_port",
                           reason="PORT_IN_USE", metadata={"port": settings.metrics_port}) from exc
    def close() -> None:
        httpd.shutdown()
        httpd.server_close()

    return httpd.server_port, close


def _watch_store(server: Server, settings: Settings) -> None:
    """Health follows the store: NOT_SERVING while it is down, SERVING once it answers again.
    Each outage is logged once, with its cause; ``LIVENESS`` stays SERVING throughout."""
    serving = True
    while not server._stop.wait(settings.store_check_interval):
        try:
            server.sessions.store.ping()
            ok, cause = True, ""
        except Exception as exc:
            ok, cause = False, _cause(exc)
        if ok != serving and not server._stop.is_set():
            server._set_health(store_ok=ok)
            if ok:
                log.warning("store %s recovered; health SERVING", settings.store_shown)
            else:
                log.warning("store %s unavailable: %s; health NOT_SERVING until it answers",
                            settings.store_shown, cause)
            serving = ok


def serve(settings: Settings) -> None:
    """Run until SIGTERM/SIGINT; in-flight calls get ``settings.grace`` seconds."""
    pin(settings.cpus)  # before any thread of the server starts: they inherit it
    background()  # a profile's fastokens twin is made while the server answers (exact either way)
    done = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        done.set()

    server = create_server(settings, ready=False)  # NOT_SERVING until warmed up: no call waits on it
    # before the warm-up: a SIGTERM meanwhile stops the server gracefully once it is done
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    preload()  # all it may import: a pip install over the package cannot break the running server
    settle(server.sessions.tokenizers, {settings.default_tokenizer, *settings.preload})
    server.start_workers()
    log.info("budgeter listening on %s:%d (store %s, metrics port %s)", settings.host, server.port,
             server.sessions.store.name, server.metrics_port or "off")
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1: every thread's stack
    pinned = f", cpus {span(settings.cpus)}" if settings.cpus else ""
    experiments = os.environ.get("GRPC_EXPERIMENTS", "")
    grpc_env = f", grpc experiments {experiments}" if experiments else ""
    print(f"budgeter: serving on {settings.host}:{server.port} "
          f"(store {settings.store_shown}, metrics {server.metrics_port or 'off'}{grpc_env}{pinned})", flush=True)
    if not done.is_set():  # (a SIGTERM during the warm-up: never SERVING, straight to the stop)
        server.ready()
    while not done.wait(0.25):  # a signal delivered to another thread does not wake a plain wait()
        pass
    server.stop(settings.grace)
    print("budgeter: stopped", flush=True)
