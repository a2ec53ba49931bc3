"""Proxy overhead at a 32K window on loopback, not counting the upstream's own time.

    python -m tests.bench.bench_proxy [--chars 150000] [--sessions 2] [--store sqlite]

`budgeter proxy` runs as its own process (built-in qwen3.6 tokenizer, window 32768, reserve
2048, SQLite store in a temporary folder) in front of a scripted upstream, also its own process,
that replays each session's next assistant message. Each turn sends the agent's whole history, as an OpenAI client
does. Overhead = latency through the proxy minus the latency of the same request sent straight to
the upstream (so loopback, JSON and the upstream's own time cancel out); turns alternate between
non-streamed (overhead) and streamed (delay of the first chunk, through the proxy and direct).

    python -m tests.bench.bench_proxy --growth [--sizes 10000,30000,100000,300000,1000000] [--sessions 2]

Growth with the history: held-out sessions (``peers.session``) of the largest size are replayed
and each turn is put in the bucket of its history's size (the request body's bytes); per bucket,
overhead p50/p99 (non-streamed turns), the first chunk's added delay (streamed turns), and the
proxy process's whole CPU per turn (every thread, ``bench_load.cpu_seconds``), with its start-up
time to /health; and apart, the count of turns that compacted the prompt, the overhead p99 of the
turns that did not, and the slowest that did. ``--synthetic``: ``tests.bench.sessions`` sessions
instead; ``--edit-at 0.5``: the client edits its latest reply once the history is half the
largest size, so the turns after go on in a fork.
"""

from __future__ import annotations

import argparse
import gc
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any

import httpx
import orjson

from tests.bench.bench_load import cpu_seconds
from tests.bench.bench_service import pct, turns
from tests.bench.peers import session as held_out
from tests.bench.sessions import make_session


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


STARTUP: dict[int, float] = {}
"""Seconds from each started process's launch (by pid) until ``ready`` answered 200."""


def start(cmd: list[str], ready: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = time.monotonic()
    while time.monotonic() < started + 120:
        try:
            if httpx.get(ready).status_code == 200:
                STARTUP[proc.pid] = time.monotonic() - started
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.02)
    proc.kill()
    raise RuntimeError(f"{' '.join(cmd)} did not start")


def warm(upstream: str) -> None:
    """One streamed and one whole reply straight from the upstream: its own first requests are
    slow (tens of ms), and the first turn's overhead would charge that to the proxy."""
    for stream in (False, True):
        body = {"model": "bench", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
        httpx.post(upstream + "/chat/completions", json=body, timeout=60).raise_for_status()


def start_proxy(upstream: str, store: str, port: int) -> subprocess.Popen[bytes]:
    return start([sys.executable, "-m", "budgeter", "proxy", "--upstream", upstream, "--port", str(port),
                  "--store", store, "--window", "32768", "--reserve", "2048", "--log-level", "warning"],
                 f"http://127.0.0.1:{port}/health")


def timed(client: httpx.Client, url: str, body: dict[str, Any] | bytes, headers: dict[str, str]
          ) -> tuple[float, float, int, bool]:
    """(seconds to the first body byte, seconds to the end, status, compacted). The client's own
    garbage collector is off (``quiet``): a full collection of a client holding a 2M-char
    history took 18-21 ms, and inside a timed request it would read as the proxy's."""
    sent: dict[str, Any] = ({"content": body, "headers": {**headers, "content-type": "application/json"}}
                            if isinstance(body, bytes) else {"json": body, "headers": headers})
    started = time.perf_counter()
    first = 0.0
    with client.stream("POST", url, **sent) as r:
        for _ in r.iter_raw():
            first = first or time.perf_counter() - started
        status = r.status_code
    return first, time.perf_counter() - started, status, r.headers.get("x-budgeter-compacted") == "true"


def quiet(turn: int) -> None:
    """Collect this process's garbage between turns, never during a timed request."""
    gc.disable()
    if turn % 64 == 0:
        gc.collect()


def answered(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``history``, checked to end as an agent's request does: after a user message, or after an
    assistant message's calls and each of their results (a result sent before its call is an
    orphan the proxy repairs, and a turn unlike any agent's)."""
    last = next((i for i in range(len(history) - 1, -1, -1) if history[i]["role"] == "assistant"), None)
    if last is not None:
        ids = {c["id"] for c in history[last].get("tool_calls") or ()}
        assert {m.get("tool_call_id") for m in history[last + 1:] if m["role"] == "tool"} <= ids, \
            "a tool result before its call"
    return history


def replay(client: httpx.Client, proxy: str, upstream: str, body: dict[str, Any], sid: str,
           out: dict[str, list[float]]) -> None:
    history: list[dict[str, Any]] = []
    steps = turns(body["messages"])
    for k, step in enumerate(steps):
        if step[0]["role"] == "assistant":  # the model's turn: the scripted upstream replies with it
            quiet(k)
            reply = step[0]  # its calls' results (step[1:]) come in the next request, after it
            request = {"model": "bench", "messages": answered(history), "tools": body["tools"],
                       "scripted_reply": reply, "stream": k % 2 == 0}
            via = timed(client, proxy + "/chat/completions", request, {"X-Budgeter-Session": sid})
            direct = timed(client, upstream + "/chat/completions", request, {})
            assert via[2] == direct[2] == 200, (via, direct)
            if request["stream"]:
                out["first chunk via proxy"].append(via[0])
                out["first chunk direct"].append(direct[0])
                out["first chunk added, compacting turns" if via[3] else "first chunk added, other turns"].append(
                    via[0] - direct[0])
            else:
                out["overhead"].append(via[1] - direct[1])
                out["direct"].append(direct[1])
                out["overhead, compacting turns" if via[3] else "overhead, other turns"].append(via[1] - direct[1])
        history = history + step


def size_label(chars: int) -> str:
    return f"{chars // 1_000_000}M" if chars >= 1_000_000 and chars % 1_000_000 == 0 else f"{chars // 1000}K"


def edited(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``history`` with its latest assistant message changed, as a client editing it would send."""
    i = max(j for j, m in enumerate(history) if m["role"] == "assistant")
    return [*history[:i], {**history[i], "content": (history[i].get("content") or "") + " (edited)"}, *history[i + 1:]]


def grow(client: httpx.Client, proxy: str, upstream: str, pid: int, body: dict[str, Any], sid: str,
         sizes: list[int], out: dict[int, dict[str, list[float]]], *, edit_at: int = 0) -> None:
    """Each turn of ``body`` through the proxy and direct, into the bucket of its body's size.
    ``edit_at``: once the history is that long, the client edits its latest reply, so the turns
    after go on in a fork."""
    history: list[dict[str, Any]] = []
    for k, step in enumerate(turns(body["messages"])):
        if step[0]["role"] != "assistant":
            history = history + step
            continue
        reply = step[0]  # its calls' results (step[1:]) come in the next request, after it
        if edit_at and sum(len(m.get("content") or "") for m in history) >= edit_at:
            history, edit_at = edited(history), 0
        stream = k % 2 == 0
        quiet(k)
        data = orjson.dumps({"model": "bench", "messages": answered(history), "tools": body["tools"],
                             "scripted_reply": reply, "stream": stream})
        bucket = next((s for s in sizes if len(data) <= s), None)
        if bucket is None:
            return
        cpu = cpu_seconds(pid)
        via = timed(client, proxy + "/chat/completions", data, {"X-Budgeter-Session": sid})
        cpu = cpu_seconds(pid) - cpu
        direct = timed(client, upstream + "/chat/completions", data, {})
        assert via[2] == direct[2] == 200, (via, direct)
        row = out[bucket]
        row["cpu"].append(cpu)
        if via[3]:
            row["compacting"].append(1)  # a tally: only its length is printed
        if stream:
            row["first chunk"].append(via[0] - direct[0])
        else:
            row["overhead"].append(via[1] - direct[1])
            row["overhead, compacting" if via[3] else "overhead, other"].append(via[1] - direct[1])
        history = history + step


def growth(args: argparse.Namespace) -> None:
    sizes = sorted(int(x) for x in args.sizes.split(","))
    up_port, port = free_port(), free_port()
    upstream = f"http://127.0.0.1:{up_port}/v1"
    bodies = [make_session(seed, chars=sizes[-1]) if args.synthetic else held_out(seed, sizes[-1])
              for seed in range(args.sessions)]
    up = start([sys.executable, "-m", "tests.proxy.upstream", str(up_port)], upstream + "/models")
    warm(upstream)
    out: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    with tempfile.TemporaryDirectory() as tmp:
        store = f"sqlite://{os.path.join(tmp, 'b.db')}" if args.store == "sqlite" else args.store
        proc = start_proxy(upstream, store, port)
        try:
            with httpx.Client(timeout=60) as client:
                for seed, body in enumerate(bodies):
                    grow(client, f"http://127.0.0.1:{port}/v1", upstream, proc.pid, body, f"grow-{seed}", sizes, out,
                         edit_at=int(args.edit_at * sizes[-1]))
        finally:
            for p in (proc, up):
                p.terminate()
                p.wait(30)
    kind = "synthetic" if args.synthetic else "held-out"
    edit = f", each edited at {args.edit_at:.0%} (the turns after in a fork)" if args.edit_at else ""
    print(f"budgeter proxy, window 32768, {args.sessions} {kind} sessions of {sizes[-1]:,} chars{edit}, store "
          f"{args.store}; start-up to /health {STARTUP[proc.pid]:.2f} s")
    print(f"  {'history':>9}  {'turns':>5}  {'overhead p50':>12} {'p99':>7}  {'1st chunk p50':>13} {'p99':>7}"
          f"  {'proxy CPU/turn p50':>18} {'mean':>7}  {'compacting':>10} {'p99 other':>9} {'max compacting':>14}")
    low = 0
    for size in sizes:
        row = {k: [x * 1000 for x in v] for k, v in out[size].items()}
        if row.get("cpu"):
            print(f"  {size_label(low) + '-' + size_label(size):>9}  {len(row['cpu']):5}  "
                  f"{pct(row['overhead'], .5):9.2f} ms {pct(row['overhead'], .99):7.2f}  "
                  f"{pct(row['first chunk'], .5):10.2f} ms {pct(row['first chunk'], .99):7.2f}  "
                  f"{pct(row['cpu'], .5):15.2f} ms {statistics.mean(row['cpu']):7.2f}  "
                  f"{len(out[size]['compacting']):10}  {pct(row.get('overhead, other') or [0.0], .99):7.2f}  "
                  + (f"{max(row['overhead, compacting']):11.2f} ms" if row.get("overhead, compacting")
                     else f"{'-':>14}"))  # (its compacting turns, if any, were streamed)
        low = size


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chars", type=int, default=150_000)
    ap.add_argument("--sessions", type=int, default=2)
    ap.add_argument("--store", default="sqlite")
    ap.add_argument("--growth", action="store_true", help="overhead and CPU per turn by history size")
    ap.add_argument("--sizes", default="10000,30000,100000,300000,1000000")
    ap.add_argument("--synthetic", action="store_true", help="with --growth: synthetic sessions")
    ap.add_argument("--edit-at", type=float, default=0.0,
                    help="with --growth: the client edits its latest reply at this fraction of the largest size")
    args = ap.parse_args()
    if args.growth:
        growth(args)
        return
    up_port, port = free_port(), free_port()
    upstream = f"http://127.0.0.1:{up_port}/v1"
    up = start([sys.executable, "-m", "tests.proxy.upstream", str(up_port)], upstream + "/models")
    warm(upstream)
    with tempfile.TemporaryDirectory() as tmp:
        store = f"sqlite://{os.path.join(tmp, 'b.db')}" if args.store == "sqlite" else args.store
        proc = start_proxy(upstream, store, port)
        out: dict[str, list[float]] = defaultdict(list)
        try:
            with httpx.Client(timeout=60) as client:
                for seed in range(args.sessions):
                    replay(client, f"http://127.0.0.1:{port}/v1", upstream,
                           make_session(seed, chars=args.chars), f"bench-{seed}", out)
                metrics = client.get(f"http://127.0.0.1:{port}/metrics").text
        finally:
            for p in (proc, up):
                p.terminate()
                p.wait(30)
    print(f"budgeter proxy, window 32768, {args.sessions} sessions of {args.chars:,} chars, store {args.store}, "
          f"{len(out['overhead'])} non-streamed + {len(out['first chunk via proxy'])} streamed turns")
    for name, xs in sorted(out.items()):
        ms = [x * 1000 for x in xs]
        print(f"  {name:<36} n {len(ms):3}  p50 {pct(ms, .5):6.2f} ms   p99 {pct(ms, .99):6.2f} ms   "
              f"mean {statistics.mean(ms):6.2f} ms")
    delays = [(a - b) * 1000 for a, b in zip(out["first chunk via proxy"], out["first chunk direct"], strict=True)]
    print(f"  {'first chunk added':<36} n {len(delays):3}  p50 {pct(delays, .5):6.2f} ms   "
          f"p99 {pct(delays, .99):6.2f} ms")
    buckets = [line.split("{", 1)[1] for line in metrics.splitlines()
               if line.startswith("budgeter_proxy_overhead_seconds_bucket")]
    print("  in-proxy time (reconcile, append, build; histogram):", ", ".join(
        f"{b.split('}')[0].removeprefix('le=')} {float(b.split('} ')[1]):.0f}" for b in buckets[:8]))
    compacted = [line for line in metrics.splitlines() if line.startswith("budgeter_tokens_elided_total")]
    print("  compaction:", "; ".join(compacted) or "none")


if __name__ == "__main__":
    main()
