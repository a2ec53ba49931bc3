"""Server assembly: store, profiles, servicer, health, reflection, metrics, graceful stop.

``create_server(settings)`` returns a started ``Server`` bound to ``settings.port`` (0 picks a free
one; tests bind ``127.0.0.1:0``). ``serve(settings)`` runs until SIGTERM or SIGINT, then lets
in-flight calls finish for ``settings.grace`` seconds.
"""

from __future__ import annotations

import faulthandler
import logging
import signal
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from budgeter.errors import BudgeterError, InvalidInput
from budgeter.service.auth import Auth
from budgeter.service.metrics import Metrics
from budgeter.service.profiles import Profiles
from budgeter.service.servicer import BudgeterServicer, handlers
from budgeter.service.sessions import Limits, Sessions
from budgeter.settings import Settings
from budgeter.store import SessionStore, open_store
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
    _stop: threading.Event = field(default_factory=threading.Event)
    _closers: list[Any] = field(default_factory=list)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self, grace: float | None = 1.0) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self.health.enter_graceful_shutdown()  # probes see NOT_SERVING while calls drain
        if grace:
            time.sleep(min(0.5, grace / 4))
        self.grpc_server.stop(grace).wait()
        for close in self._closers:
            close()
        self.sessions.store.close()

    def wait(self) -> None:
        self.grpc_server.wait_for_termination()


def create_server(settings: Settings, *, store: SessionStore | None = None) -> Server:
    store = store or open_store(settings.store_url, **_store_options(settings))
    profiles = Profiles(settings.tokenizers, default=settings.default_tokenizer)
    for name in {settings.default_tokenizer, *settings.preload}:
        profiles.counter(name)  # load now, so the first request is not the slow one
    limits = Limits(settings.max_message_bytes, settings.max_messages_per_append,
                    settings.max_sessions, settings.live_sessions)
    sessions = Sessions(store, profiles, limits=limits)
    metrics = Metrics()
    metrics.watch_store(store)
    options = [("grpc.max_receive_message_length", settings.max_request_bytes),
               ("grpc.max_send_message_length", settings.max_request_bytes),
               ("grpc.so_reuseport", 0)]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=settings.max_workers),
                         options=options)
    auth = Auth(settings.tokens())
    server.add_generic_rpc_handlers((handlers(BudgeterServicer(sessions, metrics, auth)),))
    health_servicer = health.HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
         reflection.SERVICE_NAME), server)
    try:
        address = f"{settings.host}:{settings.port}"
        credentials = _tls(settings)
        port = (server.add_secure_port(address, credentials) if credentials
                else server.add_insecure_port(address))
    except RuntimeError:
        port = 0
    if port == 0:
        store.close()
        raise BudgeterError(f"cannot listen on {settings.host}:{settings.port} (in use?)",
                            metadata={"port": settings.port})
    server.start()
    out = Server(server, port, sessions, metrics, health_servicer)
    for name in ("", SERVICE):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    if settings.metrics_port:
        out.metrics_port, closer = _serve_metrics(metrics, settings)
        out._closers.append(closer)
    watcher = threading.Thread(target=_watch_store, args=(out,), daemon=True, name="store-health")
    watcher.start()
    return out


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


def _store_options(settings: Settings) -> dict[str, Any]:
    opts: dict[str, Any] = {"idempotency_ttl": settings.idempotency_ttl}
    if settings.store_url.startswith(("redis", "unix://")):
        opts["prefix"] = settings.redis_prefix
    return opts


def _serve_metrics(metrics: Metrics, settings: Settings) -> tuple[int, Any]:
    from prometheus_client import start_http_server

    httpd, thread = start_http_server(settings.metrics_port, addr=settings.host,
                                      registry=metrics.registry)
    def close() -> None:
        httpd.shutdown()
        httpd.server_close()

    return httpd.server_port, close


def _watch_store(server: Server, every: float = 5.0) -> None:
    """Health follows the store: NOT_SERVING while it is down, SERVING once it answers again."""
    serving = True
    while not server._stop.wait(every):
        try:
            server.sessions.store.ping()
            ok = True
        except Exception:
            ok = False
        if ok != serving and not server._stop.is_set():
            status = (health_pb2.HealthCheckResponse.SERVING if ok
                      else health_pb2.HealthCheckResponse.NOT_SERVING)
            for name in ("", SERVICE):
                server.health.set(name, status)
            log.warning("store %s", "recovered" if ok else "unavailable")
            serving = ok


def serve(settings: Settings) -> None:
    """Run until SIGTERM/SIGINT; in-flight calls get ``settings.grace`` seconds."""
    server = create_server(settings)
    log.info("budgeter listening on %s:%d (store %s, metrics port %s)", settings.host, server.port,
             server.sessions.store.name, server.metrics_port or "off")
    done = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1: every thread's stack
    print(f"budgeter: serving on {settings.host}:{server.port} "
          f"(store {settings.store_url}, metrics {server.metrics_port or 'off'})", flush=True)
    while not done.wait(0.25):  # a signal delivered to another thread does not wake a plain wait()
        pass
    server.stop(settings.grace)
    print("budgeter: stopped", flush=True)
