"""Engine benchmark: stateful replay turn by turn at a 32K window, against LangChain trim_messages.

    python -m tests.bench.bench_engine [--tokenizer SPEC] [--chars 300000] [--sessions 3]

Prints per-turn append cost (new chars tokenized, ms), build p50/p99, prefix stability, window
utilization, failed-payload tokens left, and LangChain's cost and real overflow on the same turns.
"""

from __future__ import annotations

import argparse
import operator
import statistics
import time

from budgeter.core import Engine, Policy
from budgeter.core.messages import from_openai_list
from budgeter.tokenizers import resolve
from tests.bench.bench_service import pct
from tests.bench.sessions import make_session


def turns(msgs, role=operator.attrgetter("role")):
    """Each message with the tool results after it, as an agent appends them (``role``: how to
    read a message's role; ``operator.itemgetter("role")`` for OpenAI dicts)."""
    i = 0
    while i < len(msgs):
        j = i + 1
        while j < len(msgs) and role(msgs[j]) == "tool":
            j += 1
        yield msgs[i:j]
        i = j


def replay(counter, body, policy):
    session = Engine(counter, policy=policy, tools=body["tools"])
    append_ms, build_ms, chars, extends, util, failed_left = [], [], [], [], [], []
    for turn in turns(from_openai_list(body["messages"])):
        before = getattr(getattr(counter, "pieces", None), "chars_tokenized", 0)
        t = time.perf_counter()
        session.append(turn)
        append_ms.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        r = session.build()
        build_ms.append((time.perf_counter() - t) * 1000)
        chars.append(getattr(getattr(counter, "pieces", None), "chars_tokenized", 0) - before)
        extends.append(r.extends_previous)
        util.append(r.tokens / policy.budget)
        failed = [m for m in r.messages if m.role == "tool" and m.content.startswith(("rejected", "error"))]
        failed_left.append(sum(counter.message_cost(m) for m in failed) / max(r.tokens, 1))
    return append_ms, build_ms, chars, extends, util, failed_left


def langchain(counter, body, policy, last=30):
    from langchain_core.messages import convert_to_messages
    from langchain_core.messages.utils import count_tokens_approximately, trim_messages

    msgs = _without_cut_calls(body["messages"])  # LangChain cannot convert cut arguments at all
    ends = [i + 1 for i, m in enumerate(msgs) if m["role"] != "assistant"][-last:]
    exact_counter = lambda ms: counter.count_prompt(from_openai_list(_to_openai(ms)), body["tools"])  # noqa: E731
    res = {}
    for name, tc in (("approx", count_tokens_approximately), ("exact", exact_counter)):
        ms_, over = [], []
        for end in ends:
            try:
                lc = convert_to_messages([{k: v for k, v in m.items() if k != "finish_reason"} for m in msgs[:end]])
            except Exception:
                continue
            t = time.perf_counter()
            out = trim_messages(lc, max_tokens=policy.budget, token_counter=tc, strategy="last",
                                include_system=True, start_on="human", allow_partial=False)
            ms_.append((time.perf_counter() - t) * 1000)
            try:
                real = exact_counter(out)
            except Exception:
                real = 0
            over.append(real)
        res[name] = ms_, over
    return res


def _without_cut_calls(msgs):
    import json

    bad = set()
    for m in msgs:
        for c in m.get("tool_calls") or ():
            try:
                json.loads(c["function"]["arguments"])
            except ValueError:
                bad.add(c["id"])
    return [m for m in msgs if not ({c["id"] for c in m.get("tool_calls") or ()} & bad)
            and m.get("tool_call_id") not in bad]


def _to_openai(lc_messages):
    from langchain_core.messages import convert_to_openai_messages

    return [{**m, "content": m.get("content") or ""} for m in convert_to_openai_messages(lc_messages)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--chars", type=int, nargs="+", default=[60_000, 300_000, 900_000])
    ap.add_argument("--window", type=int, default=32768)
    ap.add_argument("--langchain", action="store_true")
    ap.add_argument("--low-water", type=float, default=Policy().low_water, help="compact to this share of the budget")
    a = ap.parse_args()
    counter = resolve(a.tokenizer)
    policy = Policy(window=a.window, reserve=2048, low_water=a.low_water)
    print(f"tokenizer {counter.name}; window {a.window}, budget {policy.budget}, low-water {policy.low_water}")
    for seed, chars in enumerate(a.chars):
        body = make_session(seed, chars=chars)
        app, build, new_chars, ext, util, failed = replay(counter, body, policy)
        print(f"\nsession {chars:,} chars, {len(body['messages'])} messages, {len(build)} turns")
        print(f"  append: p50 {statistics.median(app):.2f} ms, new chars tokenized per turn p50 "
              f"{statistics.median(new_chars):,.0f}")
        print(f"  build:  p50 {statistics.median(build):.2f} ms, p99 {pct(build, 0.99):.2f} ms, "
              f"max {max(build):.1f} ms")
        stable = sum(ext[1:]) / max(1, len(ext) - 1)
        print(f"  prefix stability: {stable:.0%} of turns extend the previous prompt")
        print(f"  window utilization (last 30 turns): mean {statistics.mean(util[-30:]):.0%}; "
              f"failed-payload share of window: {statistics.mean(failed[-30:]):.1%}")
        if a.langchain:
            for name, (ms_, real) in langchain(counter, body, policy).items():
                if not ms_:
                    print(f"  langchain {name}: could not convert the session")
                    continue
                over = sum(r > policy.budget for r in real)
                print(f"  langchain trim_messages ({name} counter, session without its cut calls): "
                      f"p50 {statistics.median(ms_):.1f} ms "
                      f"({statistics.median(ms_) / statistics.median(build):.0f}x budgeter build); "
                      f"over budget by the exact count on {over}/{len(real)} turns (max {max(real):,})")


if __name__ == "__main__":
    main()
