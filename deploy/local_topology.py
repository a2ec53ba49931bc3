"""The compose topology with real local processes: redis-server (AOF) + N ``budgeter serve``
replicas + nginx as the L7 gRPC balancer (deploy/nginx/grpc.conf with local upstreams).

    python deploy/local_topology.py --replicas 2 [--keep]

Starts everything on free ports, runs a smoke test through nginx (concurrent agents appending
and building on shared sessions, each call carrying its session id in ``x-session-id``), checks
in nginx's log that every session stayed on one replica (session affinity) while calls without a
session were spread over all of them, prints the figures and stops everything (--keep waits for
Ctrl-C instead). Needs redis-server and nginx on PATH (Debian: redis-server, nginx-light).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports: each socket stays bound until all are chosen (one closed before
    the next was asked for could be handed out again)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]


def wait_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 60.0) -> None:
    """Until ``proc`` listens on ``port``; a process that exits first is reported with the end of
    its output (``log``) at once."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{log.stem} exited ({proc.returncode}) before listening on {port}: "
                               f"{log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def nginx_config(upstreams: list[int], port: int, workdir: Path) -> str:
    text = (HERE / "nginx" / "grpc.conf").read_text()
    servers = "".join(f"    server 127.0.0.1:{p};\n" for p in upstreams)
    text = text.replace("    server budgeter-1:50051;\n    server budgeter-2:50051;\n", servers)
    text = text.replace("listen 50051", f"listen 127.0.0.1:{port}")
    text = text.replace("  access_log off;\n", "  log_format affinity '$http_x_session_id $upstream_addr';\n"
                        f"  access_log {workdir / 'access.log'} affinity;\n")
    return text.replace("/tmp/budgeter-nginx", str(workdir / "nginx"))


def placement(log: Path) -> dict[str, set[str]]:
    """Session id ("-" for calls without one) -> the replicas nginx sent its calls to."""
    out: dict[str, set[str]] = {}
    for line in log.read_text().splitlines():
        sid, _, upstream = line.partition(" ")
        out.setdefault(sid, set()).add(upstream)
    return out


@contextlib.contextmanager
def topology(replicas: int = 2) -> Iterator[dict]:
    redis_bin, nginx_bin = shutil.which("redis-server"), shutil.which("nginx") or "/usr/sbin/nginx"
    if not redis_bin or not Path(nginx_bin).exists():
        raise SystemExit("needs redis-server and nginx on PATH")
    work = Path(tempfile.mkdtemp(prefix="budgeter-topology-"))
    procs: list[subprocess.Popen] = []
    try:
        redis_port, lb_port, *rest = free_ports(2 + 2 * replicas)
        ports, metrics = rest[:replicas], rest[replicas:]

        def start(name: str, args: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen, Path]:
            log = work / f"{name}.out"
            with log.open("wb") as out:
                procs.append(subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env))
            return procs[-1], log

        redis = start("redis", [redis_bin, "--port", str(redis_port), "--bind", "127.0.0.1",
                                "--appendonly", "yes", "--save", "", "--dir", str(work)])
        wait_port(redis_port, *redis)
        env = {**os.environ, "BUDGETER_STORE": f"redis://127.0.0.1:{redis_port}/0"}
        servers = [start(f"replica-{i}", [sys.executable, "-m", "budgeter", "serve", "--port", str(port),
                                          "--metrics-port", str(mport)], env=env)
                   for i, (port, mport) in enumerate(zip(ports, metrics, strict=True))]
        conf = work / "grpc.conf"
        conf.write_text(nginx_config(ports, lb_port, work))
        subprocess.run([nginx_bin, "-t", "-c", str(conf)], check=True, capture_output=True)
        lb = start("nginx", [nginx_bin, "-c", str(conf), "-g", "daemon off;"])
        for port, (proc, log) in zip([*ports, lb_port], [*servers, lb], strict=True):
            wait_port(port, proc, log)
        yield {"target": f"127.0.0.1:{lb_port}", "replicas": ports, "metrics": metrics,
               "redis": f"redis://127.0.0.1:{redis_port}/0", "log": work / "access.log"}
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


def smoke(target: str, agents: int = 16, turns: int = 5) -> dict:
    """``agents`` sessions of ``turns`` turns each, at once. 16 sessions: with 8, nginx's hash put
    every one of them on the same replica of two about once in 128 runs (2 x 2^-8)."""
    sys.path.insert(0, str(HERE.parent))
    from budgeter.affinity import affinity_channel
    from budgeter.client import Client

    deadline = time.monotonic() + 90
    with Client(target, timeout=5) as c:
        while True:  # replicas may still be loading their tokenizer
            try:
                c.tokenizers()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    errors: list[BaseException] = []
    latencies: list[float] = []

    def agent(a: int) -> None:
        try:
            with Client(channel=affinity_channel(target), timeout=30) as c:
                s = c.create_session(window=8192)
                for t in range(turns):
                    t0 = time.perf_counter()
                    s.append([{"role": "user", "content": f"agent {a} turn {t} " + "words " * 50}])
                    p = s.prompt()
                    latencies.append((time.perf_counter() - t0) * 1000)
                    assert p.tokens <= p.budget and len(p.messages) == t + 1
                    assert t == 0 or p.extends_previous  # same replica: the prefix it sent before
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=agent, args=(a,)) for a in range(agents)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    latencies.sort()
    return {"turns": len(latencies), "seconds": time.perf_counter() - started,
            "p50_ms": latencies[len(latencies) // 2], "max_ms": latencies[-1]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    with topology(args.replicas) as topo:
        result = smoke(topo["target"])
        print(f"nginx {topo['target']} -> {len(topo['replicas'])} replicas on {topo['redis']}: "
              f"{result['turns']} turns (append + build) in {result['seconds']:.2f} s, "
              f"p50 {result['p50_ms']:.1f} ms, max {result['max_ms']:.1f} ms")
        time.sleep(0.5)  # nginx writes its log line after the response
        placed = placement(topo["log"])
        unpinned = placed.pop("-", set())
        pinned = sum(1 for replicas in placed.values() if len(replicas) == 1)
        print(f"session affinity: {pinned} of {len(placed)} sessions on one replica each, "
              f"{len({r for rs in placed.values() for r in rs})} replicas used; calls without a "
              f"session went to {len(unpinned)} replicas")
        if args.keep:
            print("running; Ctrl-C stops everything")
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()


if __name__ == "__main__":
    main()
