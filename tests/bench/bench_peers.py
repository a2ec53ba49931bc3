"""Peers as their users run them, on the same held-out sessions in the same run, as ratios.

    python -m tests.bench.bench_peers [--quick] [--chars 60000 300000 900000] [--turns 20]
                                      [--growth 100000 1000000 2000000] [--no-llamacpp] [--no-litellm]

Each session is worded by the held-out tool families (``tests.bench.worded``, ``corpus.HELD_OUT``);
they hold no tool call cut mid-arguments, so no peer errs on them. ``--synthetic`` takes
``tests.bench.sessions`` ones instead, which do (``finish_reason=length``): LangChain cannot convert
such a message and llama.cpp refuses to render it.
Its last ``--turns`` agent turns are measured; the turns before are replayed untimed so that every
stateful peer holds the history it would hold by then. Per turn, in the same process and
interleaved turn by turn (the machine's speed drifts; ratios are what compare):

- budgeter, engine: ``Engine.append`` + ``build`` in this process;
- budgeter, gRPC: a real ``budgeter serve`` process (memory store), one-call turns
  (``prompt(append=..., since=previous)``), the client's time per turn and the server process's
  whole CPU (``/proc/PID/stat`` utime + stime, every thread) over the measured turns;
- transformers: ``AutoTokenizer`` + ``apply_chat_template(..., tools=..., tokenize=True)`` counting
  the held list again after each append and dropping the oldest message after the system one until
  it fits (a count that raises counts as over);
- LangChain ``trim_messages(strategy="last")`` over the whole history as LangChain messages, with the
  settings of its how-to (``start_on="human"``, ``end_on=("human", "tool")``, ``include_system``), with
  the counter of its docs (role + content per message, HF tokenizer) and with
  ``count_tokens_approximately``; a message ``convert_to_messages`` refuses is left out of the history;
- LiteLLM ``trim_messages(messages, model=..., max_tokens=budget)`` (its own counter; no tools);
- llama.cpp: the transformers loop with ``/apply-template`` + ``/tokenize`` over HTTP as the counter,
  against ``llama-server`` on a tiny GGUF around the same tokenizer (``tests.llamacpp``).

Per peer: time per turn p50 / p99 and the p50's ratio to budgeter's engine; **fit**: prompts that fit
the budget counted exactly (the tokenizer folder's own template + tokenizer, tools included, tool-call
arguments parsed into objects as vLLM and llama.cpp do before rendering);
**pairs**: prompts where every tool result follows its call and every call has its result; **use**:
the median share of the budget the prompt fills (a peer that keeps almost nothing fits easily);
**errors**: for LangChain, the session's messages ``convert_to_messages`` refused (left out of its
history); for the drop-oldest loops, measured turns where a count raised; for LiteLLM, turns where it
raised (no prompt: not fitting).

Growth with history through the real server: whole-process CPU per turn over the last turns of
sessions of each ``--growth`` size, memory and SQLite stores, one server process per (store, size),
their turns interleaved; the ratio to the smallest size.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from budgeter.client import Client
from budgeter.core import Policy
from budgeter.tokenizers import resolve
from tests.bench.bench_load import cpu_seconds, gauge
from tests.bench.bench_service import SHARED, pct, turns
from tests.bench.peers import (
    Dicts,
    DropOldest,
    EnginePeer,
    LangChainPeer,
    Peer,
    as_served,
    docs_counter,
    hf_count,
    litellm_peer,
    llamacpp_peer,
    pairs_kept,
    session,
)
from tests.service.procs import ServerProcess


class GrpcSide:
    """budgeter through a real ``budgeter serve`` process, measured apart from the interleaved
    peers (the server would otherwise spend CPU idling while they run)."""

    def __init__(self, server: ServerProcess, window: int) -> None:
        self.client = Client(server.target, timeout=600)
        self.pid, self.window = server.proc.pid, window  # type: ignore[union-attr]
        self.ms: list[float] = []
        self.prompts: list[Dicts] = []
        self.cpu = 0.0

    def run(self, body: dict[str, Any], before: list[Dicts], measured: list[Dicts]) -> int:
        s = self.client.create_session(tools=body["tools"], window=self.window)
        prompt = None
        for t in before:
            prompt = s.prompt(append=t, since=prompt)
        cpu0 = cpu_seconds(self.pid)
        for t in measured:
            t0 = time.perf_counter()
            prompt = s.prompt(append=t, since=prompt)
            self.ms.append((time.perf_counter() - t0) * 1000)
            self.prompts.append(prompt.messages)
        self.cpu += cpu_seconds(self.pid) - cpu0
        return prompt.budget if prompt else 0


def serve_args(folder: Path, *store: str) -> list[str]:
    return [*store, "--tokenizer", f"peers={folder}", "--default-tokenizer", "peers", "--log-level", "warning"]


class Tally:
    def __init__(self) -> None:
        self.ms: list[float] = []
        self.fit = self.pairs = self.n = 0
        self.use: list[float] = []
        self.medians: list[float] = []
        """p50 ms of each session's measured turns."""
        self.fits: list[tuple[int, int]] = []
        """(prompts that fit, turns) of each session."""

    def close(self, ms: list[float]) -> None:
        done = sum(n for _, n in self.fits)
        self.medians.append(statistics.median(ms))
        self.fits.append((self.fit - sum(f for f, _ in self.fits), self.n - done))

    def judge(self, tok: Any, out: Dicts | None, tools: Dicts, budget: int) -> int | None:
        """Records a prompt's fit, pairs and use; its exact count (None when there is none)."""
        self.n += 1
        if not out:
            return None
        try:
            n = hf_count(tok, as_served(out), tools)
        except Exception:  # the template refuses the prompt: it cannot be sent
            return None
        self.fit += n <= budget
        self.pairs += pairs_kept(out)
        self.use.append(n / budget)
        return n


def measure(peers: list[Peer], grpc: GrpcSide | None, bodies: list[dict[str, Any]], k: int, tok: Any,
            budget: int) -> tuple[dict[str, Tally], Tally, tuple[int, int]]:
    """Every peer's tally, gRPC's, and (budgeter's reported counts equal to the exact one, checked)."""
    tallies = {p.name: Tally() for p in peers}
    remote, exact = Tally(), [0, 0]
    for body in bodies:
        ts = list(turns(body["messages"]))
        before, measured = ts[:-k], ts[-k:]
        if grpc is not None:
            start = len(grpc.prompts)
            if grpc.run(body, before, measured) != budget:
                raise SystemExit("the server's budget differs from this run's Policy: the peers would not compare")
            for out in grpc.prompts[start:]:
                remote.judge(tok, out, body["tools"], budget)
            remote.close(grpc.ms[start:])
        history = [m for t in before for m in t]
        for p in peers:
            p.catch_up(body, list(history))
        for t in measured:
            history = history + t
            for p in peers:  # interleaved turn by turn
                t0 = time.perf_counter()
                result = p.turn(history, t)
                tallies[p.name].ms.append((time.perf_counter() - t0) * 1000)
                n = tallies[p.name].judge(tok, p.prompt(result), body["tools"], budget)
                if isinstance(p, EnginePeer):
                    exact[0] += n == result.tokens
                    exact[1] += 1
        for p in peers:
            tallies[p.name].close(tallies[p.name].ms[-len(measured):])
    remote.ms = grpc.ms if grpc is not None else []
    return tallies, remote, (exact[0], exact[1])


def row(name: str, t: Tally, base: float, cpu: str = "-") -> str:
    p50 = statistics.median(t.ms)
    share = lambda x: f"{x}/{t.n} ({x / t.n:.0%})"  # noqa: E731
    use = f"{statistics.median(t.use):.0%}" if t.use else "-"
    errors = getattr(t, "errors", 0)
    return (f"| {name} | {t.n} | {p50:.2f} | {pct(t.ms, 0.99):.2f} | {p50 / base:.1f}x | {cpu} | {share(t.fit)} | "
            f"{share(t.pairs)} | {use} | {errors} |")


def peers_table(a: argparse.Namespace, folder: Path, tok: Any, policy: Policy) -> None:
    counter = resolve(str(folder))
    budget = policy.budget
    bodies = [session(seed, chars, synthetic=a.synthetic) for seed, chars in enumerate(a.chars)]
    sizes = ", ".join(f"{len(b['messages'])} messages" for b in bodies)
    kind = "synthetic" if a.synthetic else "held-out"
    print(f"Sessions: {len(bodies)} {kind} ({', '.join(f'{c:,}' for c in a.chars)} chars; {sizes}); the last "
          f"{a.turns} agent turns of each measured; window {a.window}, budget {budget}; tokenizer {folder.name}.\n")
    peers: list[Peer] = [EnginePeer(counter, policy),
                         DropOldest("transformers apply_chat_template + tokenizer, drop oldest",
                                    lambda m, t: hf_count(tok, m, t), budget),
                         LangChainPeer("LangChain trim_messages, docs' counter on the HF tokenizer",
                                       docs_counter(tok), budget)]
    from langchain_core.messages.utils import count_tokens_approximately

    peers.append(LangChainPeer("LangChain trim_messages, count_tokens_approximately",
                               count_tokens_approximately, budget))
    skipped = []
    lite = litellm_peer(budget) if not a.no_litellm else "LiteLLM: skipped (--no-litellm)"
    peers += [lite] if isinstance(lite, Peer) else []
    skipped += [lite] if isinstance(lite, str) else []
    with llamacpp_peer(folder, budget, a.no_llamacpp) as llama, contextlib.ExitStack() as stack:
        peers += [llama] if isinstance(llama, Peer) else []
        skipped += [llama] if isinstance(llama, str) else []
        server = ServerProcess(*serve_args(folder, "--store", "memory://")).start()
        stack.callback(server.stop)
        grpc = GrpcSide(server, a.window)
        stack.callback(grpc.client.close)
        measure(peers, grpc, [session(99, 8_000)], 1, tok, budget)  # imports and first calls, untimed
        for p in peers:
            p.errors = 0
        grpc.ms, grpc.prompts, grpc.cpu = [], [], 0.0
        tallies, remote, exact = measure(peers, grpc, bodies, a.turns, tok, budget)
    for p in peers:
        tallies[p.name].errors = p.errors  # type: ignore[attr-defined]
    base = statistics.median(tallies[peers[0].name].ms)
    print("| peer | turns | p50 ms | p99 ms | p50 vs budgeter engine | server CPU per turn (whole process) | "
          "fit (exact count) | pairs kept | window use p50 | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(row(peers[0].name, tallies[peers[0].name], base))
    print(row("budgeter gRPC (budgeter serve, memory store, one call)", remote, base,
              f"{grpc.cpu / max(1, len(remote.ms)) * 1000:.2f} ms"))
    for p in peers[1:]:
        print(row(p.name, tallies[p.name], base))
    print("\nPer session: p50 ms per turn, its ratio to budgeter's engine on the same session's turns, and the "
          "prompts that fit by the exact count.\n")
    print("| peer | " + " | ".join(f"{c:,} chars" for c in a.chars) + " |")
    print("|---|" + "---|" * len(a.chars))
    engine = tallies[peers[0].name].medians
    named = [(peers[0].name, tallies[peers[0].name]), ("budgeter gRPC", remote),
             *((p.name, tallies[p.name]) for p in peers[1:])]
    for name, t in named:
        cells = (f"{m:.2f} ms ({m / e:.1f}x), fit {f}/{n}"
                 for m, e, (f, n) in zip(t.medians, engine, t.fits, strict=True))
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"\nbudgeter's reported count equalled the exact count on {exact[0]} of {exact[1]} prompts.")
    for reason in skipped:
        print(reason)


def growth(a: argparse.Namespace, folder: Path) -> None:
    k = a.growth_turns
    bodies = {c: session(100 + i, c) for i, c in enumerate(a.growth)}
    print(f"\nGrowth with history through the real server: whole-process CPU per turn over the last {k} turns, "
          f"one `budgeter serve` per store and size, their turns interleaved.\n")
    print("| store | history chars | messages | server CPU per turn | client p50 ms | CPU vs smallest |")
    print("|---|---|---|---|---|---|")
    for store in ("memory", "sqlite"):
        with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
            sides = {}
            for c in a.growth:
                where = ("--store", "memory://") if store == "memory" else ("--data-dir", f"{tmp}/{c}")
                server = ServerProcess(*serve_args(folder, *where)).start()
                stack.callback(server.stop)
                sides[c] = GrpcSide(server, a.window)
                stack.callback(sides[c].client.close)
            _interleave(sides, bodies, k)
        first = sides[a.growth[0]].cpu
        for c, side in sides.items():
            print(f"| {store} | {c:,} | {len(bodies[c]['messages'])} | {side.cpu / k * 1000:.2f} ms | "
                  f"{statistics.median(side.ms):.2f} | {side.cpu / first:.2f}x |")


def _interleave(sides: dict[int, GrpcSide], bodies: dict[int, dict[str, Any]], k: int) -> None:
    """Each size's session replayed up to its last ``k`` turns, then those turns one size after the
    other, each server's CPU read around its own turns."""
    live = {}
    for c, side in sides.items():
        ts = list(turns(bodies[c]["messages"]))
        s = side.client.create_session(tools=bodies[c]["tools"], window=side.window)
        prompt = None
        for t in ts[:-k]:
            prompt = s.prompt(append=t, since=prompt)
        live[c] = (s, prompt, ts[-k:])
    for i in range(k):
        for c, side in sides.items():
            s, prompt, rest = live[c]
            cpu0, t0 = cpu_seconds(side.pid), time.perf_counter()
            prompt = s.prompt(append=rest[i], since=prompt)
            side.ms.append((time.perf_counter() - t0) * 1000)
            side.cpu += cpu_seconds(side.pid) - cpu0
            live[c] = (s, prompt, rest)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="one 300K session, 5 turns; growth 100K vs 300K")
    ap.add_argument("--chars", type=int, nargs="+", default=None)
    ap.add_argument("--turns", type=int, default=None, help="measured turns per session (the last ones)")
    ap.add_argument("--growth", type=int, nargs="*", default=None, help="history sizes; none: no growth table")
    ap.add_argument("--growth-turns", type=int, default=None)
    ap.add_argument("--window", type=int, default=32768)
    ap.add_argument("--tokenizer", type=Path, default=SHARED / "qwen3", help="a model folder (tokenizer.json)")
    ap.add_argument("--synthetic", action="store_true",
                    help="tests.bench.sessions sessions (with cut tool-call arguments) instead of the held-out ones")
    ap.add_argument("--no-llamacpp", action="store_true")
    ap.add_argument("--no-litellm", action="store_true")
    a = ap.parse_args(argv)
    a.chars = a.chars or ([300_000] if a.quick else [60_000, 300_000, 900_000])
    a.turns = a.turns or (5 if a.quick else 20)
    if a.growth is None:
        a.growth = [100_000, 300_000] if a.quick else [100_000, 1_000_000, 2_000_000]
    a.growth_turns = a.growth_turns or (30 if a.quick else 60)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(a.tokenizer))
    print(" ".join(["    python -m tests.bench.bench_peers", *argv]))
    print(f"\nMachine: {os.cpu_count()} cores, shared with other work; sum(range(10**7)) in {gauge():.3f} s before "
          "the run. Ratios come from the same run, turns interleaved; absolute times are this machine's.\n")
    peers_table(a, a.tokenizer, tok, Policy(window=a.window))
    if a.growth:
        growth(a, a.tokenizer)


if __name__ == "__main__":
    main()
