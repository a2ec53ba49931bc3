"""Run ``python -m budgeter serve`` as a real process and wait until it is healthy."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.redis_server import free_port


class ServerProcess:
    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.args = ["--port", str(self.port), "--metrics-port", "0", *args]
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 90.0) -> ServerProcess:
        self.proc = subprocess.Popen([sys.executable, "-m", "budgeter", "serve", *self.args],
                                     env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        with grpc.insecure_channel(self.target) as channel:
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
