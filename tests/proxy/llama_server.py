"""Running a real ``llama-server`` for the proxy tests (until tests/llamacpp.py from issue-14
lands; then this wraps it). Skips with the reason where no built binary is cached."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

CACHE = Path.home() / ".cache" / "budgeter" / "llama.cpp"


def binary() -> tuple[Path | None, str]:
    given = os.environ.get("BUDGETER_LLAMA_SERVER")
    found = [Path(given)] if given else sorted(CACHE.glob("*/bin/llama-server"))
    for path in found:
        if path.is_file() and os.access(path, os.X_OK):
            return path, ""
    return None, f"no llama-server binary in {CACHE}/*/bin (build it once per machine; see ../shared/MEASURED.md)"


def need_binary() -> Path:
    path, why = binary()
    if path is None:
        pytest.skip(why)
    return path


@contextmanager
def llama_server(model: Path, *args: str, ctx: int = 4096) -> Iterator[str]:
    """``llama-server -m MODEL ARGS`` on a free loopback port; yields its /v1 base URL."""
    exe = need_binary()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [str(exe), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", str(ctx),
           "-t", "1", "--no-webui", "--jinja", *args]
    log = open(os.devnull, "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"llama-server did not start: {' '.join(cmd)}")
            time.sleep(0.25)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
