"""Run ``python -m budgeter serve`` as a real process and wait until it is healthy."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.redis_server import free_port

GRPC_VARIABLES = ("GRPC_EXPERIMENTS", "BUDGETER_GRPC_EXPERIMENTS")
"""What decides the grpc experiments of a ``budgeter serve`` (and of a client process)."""


def environ(env: dict[str, str] | None = None, *, unset: Sequence[str] = ()) -> dict[str, str]:
    """This process's environment without ``unset``, with ``env`` over it."""
    return {**{k: v for k, v in os.environ.items() if k not in unset}, **(env or {})}


RETRY_SOON = [("grpc.initial_reconnect_backoff_ms", 20), ("grpc.min_reconnect_backoff_ms", 20),
              ("grpc.max_reconnect_backoff_ms", 100)]


class ServerProcess:
    def __init__(self, *args: str, env: dict[str, str] | None = None, unset: Sequence[str] = (),
                 port: int | None = None) -> None:
        self.port = port or free_port()
        self.args = ["--port", str(self.port), "--metrics-port", "0", *args]
        self.env = environ(env, unset=unset)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 90.0) -> ServerProcess:
        self.proc = subprocess.Popen([sys.executable, "-m", "budgeter", "serve", *self.args],
                                     env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        # a channel whose connection was refused waits out a reconnect backoff (1 s, then longer)
        # before it tries again: polled with grpc's defaults, readiness read up to ~1.5 s late
        # (bench_flat ready, "budgeter serve to SERVING")
        with grpc.insecure_channel(self.target, options=RETRY_SOON) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited: {self.proc.stdout.read().decode()}")
                try:
                    if stub.Check(health_pb2.HealthCheckRequest(), timeout=0.5).status == 1:
                        return self
                except grpc.RpcError:
                    time.sleep(0.1)
        self.stop()
        raise RuntimeError("server did not become healthy")

    def stop(self) -> str:
        """SIGTERM (graceful), then the process output."""
        if self.proc is None:
            return ""
        self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        self.proc = None
        return out.decode()
