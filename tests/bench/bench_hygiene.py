"""Window hygiene, turn by turn: append what happened, build before each assistant turn.

    python -m tests.bench.bench_hygiene [--tokenizer SPEC ...] [--check-exact FOLDER] [--front-doors]

Sessions: the generated coding sessions (tests/bench/sessions.py: failed writes of 5.7-8.3K chars
with an empty path retried 2-3 times, cut arguments, failing test runs, big reads and greps) at
60K chars (fits a 32K window from start to end), 300K and 900K chars, and the five-failure session
of the issue (two failed writes of 8,216 chars and three of 7,790, each answered "path is
required", then the write that works; fits from start to end). Per tokenizer it prints:

- failed-call argument characters in each prompt, the newest not-yet-answered failure excluded,
  as a share of the failed-call argument characters in the history at that turn, summed over the
  replay (target <= 2%), and the largest share of a single turn (a short failed command line, which
  no stub can shorten, is 100% of a history that holds only it);
- the share of turns whose prompt extends the previous one (target >= 90%), and how many of the
  others had to change: a failure the model answered since the previous prompt collapses (the
  issue's own rule: a failed payload stays verbatim only until the model has answered it), or the
  prompt was over budget and compacted. "extends, where free" is the share among the remaining
  turns, where nothing forced a change (100% means no needless rewrite);
- tokens the server must read again (after ``cache_break_at``) against tokens appended since the
  previous prompt, summed over the replay (target <= 1.5x);
- user messages kept, and the share of elided payloads whose handle is in the prompt;
- with --check-exact, the count of every 10th prompt against transformers' apply_chat_template
  with that model folder (must be equal).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from dataclasses import replace
from typing import Any

from budgeter.core import Engine, Policy
from budgeter.core.markers import find_markers
from budgeter.core.messages import from_openai_list
from budgeter.core.steps.failures import STUB_LEAF_CHARS
from budgeter.tokenizers import resolve
from tests.bench.bench_engine import turns
from tests.bench.corpus import HELD_OUT
from tests.bench.sessions import TOOLS, make_session
from tests.bench.worded import worded_session

PATH_REQUIRED = "Error: path is required"


def five_failures() -> dict[str, Any]:
    """The issue's session: ~18K tokens, five failed writes, then the one that works."""
    def page(chars: int) -> str:
        body = "".join(f"<section><h2>Offer {i}</h2><p>Fresh bread every morning.</p></section>\n"
                       for i in range(chars // 60))
        return ("<!DOCTYPE html><html><head><title>Bakery</title></head><body>" + body)[: chars - 14] + "</body></html>"

    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful coding agent."},
                                  {"role": "user", "content": "Build the bakery's landing page."}]
    for k, chars in enumerate((8216, 8216, 7790, 7790, 7790)):
        msgs.append({"role": "assistant", "content": f"Writing the page (attempt {k + 1}).", "tool_calls": [
            {"id": f"w{k}", "type": "function", "function": {
                "name": "write_file", "arguments": json.dumps({"path": "", "content": page(chars)})}}]})
        msgs.append({"role": "tool", "tool_call_id": f"w{k}", "content": PATH_REQUIRED})
    msgs.append({"role": "assistant", "content": "", "tool_calls": [{"id": "ok", "type": "function", "function": {
        "name": "write_file", "arguments": json.dumps({"path": "index.html", "content": page(7790)})}}]})
    msgs += [{"role": "tool", "tool_call_id": "ok", "content": "wrote index.html"},
             {"role": "assistant", "content": "The page is written to index.html."}]
    return {"messages": msgs, "tools": TOOLS}


def payload_chars(text: str) -> int:
    return len(text) - sum(len(m) for m in find_markers(text))


def replay(counter: Any, body: dict[str, Any], policy: Policy, check: Any = None) -> dict[str, float]:
    session = Engine(counter, policy=policy, tools=body["tools"])
    log = session.log
    present_sum = history_sum = 0
    shares, extends, reread, appended, kept, shown, checked = [], [], 0, 0, [], [], [0, 0]
    forced, free = [0, 0], []
    answered_before: set[str] = set()
    previous: tuple[Any, ...] = ()
    for n, turn in enumerate(turns(from_openai_list(body["messages"]))):
        session.append(turn)
        appended += sum(counter.message_cost(m) for m in turn)
        r = session.build()
        answered = {log.call(ref).id for refs in log.failures.values() for ref in refs if log.answered(ref)}
        if n:
            extends.append(r.extends_previous)
            reread += r.reread_tokens
            collapsed = any(c.id in answered - answered_before and m not in r.messages
                            for m in previous for c in m.tool_calls)
            if r.compacted:
                forced[1] += 1
            elif collapsed:
                forced[0] += 1
            else:
                free.append(r.extends_previous)
        answered_before, previous = answered, r.messages
        failed = {log.call(ref).id: ref for refs in log.failures.values() for ref in refs
                  if log.result_of(log.call(ref).id) is not None}
        history = sum(len(log.messages[a].tool_calls[b].arguments) for a, b in failed.values())
        present = sum(payload_chars(c.arguments) for m in r.messages for c in m.tool_calls
                      if c.id in failed and log.answered(failed[c.id]))
        if history:
            shares.append(present / history)
            present_sum += present
            history_sum += history
        users = [m for m in log.messages if m.role == "user"]
        if users:
            kept.append(sum(m in r.messages for m in users) / len(users))
        if r.payloads:
            shown.append(len(set(r.payloads) & set(r.handles)) / len(r.payloads))
        if check is not None and n % 10 == 0:
            checked[0] += 1
            checked[1] += check(r) == r.tokens
    return {"failed_share": present_sum / max(1, history_sum), "failed_max": max(shares, default=0.0),
            "extends": sum(extends) / max(1, len(extends)), "reread": reread / max(1, appended),
            "collapse_turns": forced[0], "compact_turns": forced[1], "free": sum(free) / max(1, len(free)),
            "users": min(kept, default=1.0), "shown": statistics.mean(shown) if shown else 1.0,
            "checked": checked[0], "exact": checked[1], "turns": len(extends) + 1}


def long_leaves(arguments: str) -> int:
    """Payload characters in the string leaves a marker can stand in for (longer than
    ``STUB_LEAF_CHARS``): what a stub can take out of a call's arguments. Shorter leaves (a command
    line, a path) cost less than any marker and are the least a stub can show of the call."""
    try:
        stack = [json.loads(arguments)]
    except ValueError:
        return payload_chars(arguments)
    total = 0
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, str) and len(v) > STUB_LEAF_CHARS:
            total += payload_chars(v)
    return total


def replay_truth(counter: Any, body: dict[str, Any], policy: Policy) -> dict[str, Any]:
    """A session with ``truth`` (``tests.bench.worded``), turn by turn: what really failed and
    succeeded, against what each prompt shows.

    - failed args left: argument characters of the truly failed calls the model has answered
      still in each prompt, over their characters in history, summed over the replay; the same for
      the characters of leaves a marker can stand in for (``long_leaves``), of all those calls and
      of those some evidence identified;
    - successes shown as failed: truly successful calls whose result a prompt shows under a
      ``failed`` marker (and, apart, those whose arguments were elided as failed on text alone);
    - retries folded: of the failures tried again as they were, the earlier attempts whose
      arguments and result no longer stand verbatim in the final prompt;
    - re-read / appended: over the replay, and over the builds that did not compact (what the
      hygiene itself costs a prefix cache);
    - evidence: the failed calls by the evidence budgeter took them on, and how many of each
      really succeeded."""
    truth = body["truth"]
    session = Engine(counter, policy=policy, tools=body["tools"])
    log = session.log
    present_sum = history_sum = reread = appended = 0
    shown_failed: set[str] = set()
    elided_ok: set[str] = set()
    r = None
    originals: dict[str, str] = {}
    quiet = [0, 0]  # re-read and appended tokens of the builds that did not compact
    big_sums = [0, 0, 0, 0]  # long leaves left and in history: of every answered failed call, of the known ones
    for n, turn in enumerate(turns(from_openai_list(body["messages"]))):
        session.append(turn)
        originals.update((c.id, c.arguments) for m in turn for c in m.tool_calls)
        cost = sum(counter.message_cost(m) for m in turn)
        appended += cost
        r = session.build()
        if n:
            reread += r.reread_tokens
            if not r.compacted:
                quiet[0] += r.reread_tokens
                quiet[1] += cost
        answered = {cid for cid in truth.failed if cid in log.call_at and log.answered(log.call_at[cid])}
        history_sum += sum(len(originals[c]) for c in answered)
        present_sum += sum(payload_chars(c.arguments) for m in r.messages for c in m.tool_calls if c.id in answered)
        known = {c for c in answered if log.call_at[c] in log.failed_by}
        for k, ids in ((0, answered), (2, known)):
            big_sums[k] += sum(long_leaves(c.arguments) for m in r.messages for c in m.tool_calls if c.id in ids)
            big_sums[k + 1] += sum(long_leaves(originals[c]) for c in ids)
        for m in r.messages:
            if m.role == "tool" and m.tool_call_id in truth.ok and "budgeter:failed" in m.content:
                shown_failed.add(m.tool_call_id)
        elided_ok |= {c.id for m in r.messages for c in m.tool_calls if c.id in truth.ok and "budgeter:" in c.arguments
                      and log.failed(log.call_at[c.id])}
    assert r is not None
    final = {m.tool_call_id: m for m in r.messages if m.role == "tool"}
    calls = {c.id: c for m in r.messages for c in m.tool_calls}
    def stands(cid: str) -> bool:  # the call and its result verbatim
        verbatim = log.messages[log.result_at[cid]].content
        return cid in calls and calls[cid].arguments == originals[cid] and final.get(cid) is not None \
            and final[cid].content == verbatim

    folded = sum(1 for earlier, _ in truth.retries if not stands(earlier))
    evidence = Counter(log.failed_by.values())
    wrong = Counter(e for ref, e in log.failed_by.items() if log.call(ref).id in truth.ok)
    return {"failed_share": present_sum / max(1, history_sum), "shown_failed": len(shown_failed),
            "failed_share_big": big_sums[0] / max(1, big_sums[1]),
            "failed_share_known": big_sums[2] / max(1, big_sums[3]), "elided_ok": len(elided_ok),
            "sums": (present_sum, history_sum, *big_sums),
            "ok": len(truth.ok), "decoys": len(truth.decoys),
            "folded": folded, "retries": len(truth.retries), "failed": len(truth.failed),
            "reread": reread / max(1, appended), "reread_quiet": quiet[0] / max(1, quiet[1]),
            "evidence": evidence, "wrong": wrong,
            "turns": n + 1, "tokens": r.tokens}


def replay_proxy_truth(body: dict[str, Any], *, window: int = 32768, reserve: int = 2048) -> dict[str, Any]:
    """The session through ``budgeter proxy`` (in this process, before a scripted upstream that
    replays each next assistant message), with the official ``openai`` client sending the whole
    history every turn, as agents do; measured on what reaches the upstream."""
    import openai

    from budgeter.proxy.server import open_sessions, start
    from budgeter.settings import Settings
    from tests.proxy.upstream import Running, Upstream

    up = Upstream()
    running = Running(up.app)
    settings = Settings(upstream=running.base_url, store="memory://", proxy_port=0, metrics_port=0,
                        window=window, reserve=reserve, upstream_read_timeout=60.0)
    server = start(settings, sessions=open_sessions(settings))
    client = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0, timeout=120)
    messages = body["messages"]

    def prompts() -> Any:
        for i, m in enumerate(messages):
            if m["role"] == "assistant" and i >= 2:
                client.chat.completions.create(model="m", messages=messages[:i], tools=body["tools"],
                                               extra_body={"scripted_reply": m},
                                               extra_headers={"X-Budgeter-Session": "bench-hygiene"})
                yield i, up.received[-1]["messages"]

    try:
        return front_door_figures(body, prompts())
    finally:
        server.stop()
        running.stop()


def replay_grpc_truth(body: dict[str, Any], *, window: int = 32768, reserve: int = 2048) -> dict[str, Any]:
    """The session through a real ``budgeter serve`` (in this process, memory store) and the
    client library: each turn appended and its prompt built in one call."""
    from budgeter.client import Client
    from budgeter.service.server import create_server
    from budgeter.settings import Settings
    from budgeter.store.memory import MemoryStore

    server = create_server(Settings(host="127.0.0.1", port=0, metrics_port=0, store="memory://"),
                           store=MemoryStore())
    messages = body["messages"]

    def prompts() -> Any:
        with Client(server.target, timeout=120) as client:
            session = client.create_session(tools=body["tools"], window=window, reserve=reserve)
            done = 0
            for i in range(1, len(messages) + 1):  # a turn: a message and the tool results after it
                if i < len(messages) and messages[i]["role"] == "tool":
                    continue
                p = session.prompt(append=messages[done:i])
                done = i
                yield i, p.messages

    try:
        return front_door_figures(body, prompts())
    finally:
        server.stop(0)


def front_door_figures(body: dict[str, Any], prompts: Any) -> dict[str, Any]:
    """``replay_truth``'s hygiene figures from the prompts a front door gave: ``prompts`` yields
    (how many history messages the prompt was built from, its messages as dicts)."""
    truth, messages = body["truth"], body["messages"]
    args = {c["id"]: c["function"]["arguments"] for m in messages for c in m.get("tool_calls") or ()}
    results = {m["tool_call_id"]: i for i, m in enumerate(messages) if m["role"] == "tool"}
    assistants = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    present_sum = history_sum = count = 0
    leaves = [0, 0]  # long_leaves left and in history
    shown_failed: set[str] = set()
    sent: list[dict[str, Any]] = []
    for n, sent in prompts:
        count += 1
        last = max((i for i in assistants if i < n), default=-1)
        answered = {c for c in truth.failed if c in results and results[c] < last}
        history_sum += sum(len(args[c]) for c in answered)
        present_sum += sum(payload_chars(c["function"]["arguments"]) for x in sent
                           for c in x.get("tool_calls") or () if c["id"] in answered)
        leaves[0] += sum(long_leaves(c["function"]["arguments"]) for x in sent
                         for c in x.get("tool_calls") or () if c["id"] in answered)
        leaves[1] += sum(long_leaves(args[c]) for c in answered)
        shown_failed |= {x["tool_call_id"] for x in sent if x["role"] == "tool"
                         and x["tool_call_id"] in truth.ok and "budgeter:failed" in (x["content"] or "")}
    final = {x["tool_call_id"]: x["content"] for x in sent if x["role"] == "tool"}
    calls = {c["id"]: c["function"]["arguments"] for x in sent for c in x.get("tool_calls") or ()}
    folded = sum(1 for earlier, _ in truth.retries
                 if calls.get(earlier) != args[earlier] or final.get(earlier) != messages[results[earlier]]["content"])
    return {"failed_share": present_sum / max(1, history_sum), "shown_failed": len(shown_failed),
            "failed_share_big": leaves[0] / max(1, leaves[1]), "ok": len(truth.ok), "decoys": len(truth.decoys),
            "folded": folded, "retries": len(truth.retries),
            "turns": count}


def transformers_check(folder: str):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(folder)

    def count(r: Any) -> int:
        dicts = []
        for m in r.openai_messages():
            if m.get("tool_calls"):
                m["tool_calls"] = [{**c, "function": {**c["function"], "arguments": json.loads(
                    c["function"]["arguments"])}} for c in m["tool_calls"]]
            dicts.append(m)
        ids = hf.apply_chat_template(dicts, tools=TOOLS, add_generation_prompt=True, tokenize=True)
        return len(ids["input_ids"] if hasattr(ids, "keys") else ids)

    return count


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", action="append", default=None)
    ap.add_argument("--chars", type=int, nargs="+", default=[60_000, 300_000, 900_000])
    ap.add_argument("--window", type=int, default=32768)
    ap.add_argument("--check-exact", default=None, help="model folder whose template and tokenizer check counts")
    ap.add_argument("--seeds", type=int, default=4, help="held-out sessions of each size")
    ap.add_argument("--front-doors", action="store_true",
                    help="replay the held-out sessions through budgeter serve and budgeter proxy too")
    ap.add_argument("--front-door-max-chars", type=int, default=300_000, help="the longest session sent through them")
    a = ap.parse_args()
    policy = Policy(window=a.window, reserve=2048)
    sessions = [("five failed writes (fits)", five_failures())]
    sessions += [(f"coding {c:,} chars", make_session(seed, chars=c)) for seed, c in enumerate(a.chars)]
    print(f"window {a.window}, budget {policy.budget}")
    print("| tokenizer | session | turns | failed args left | extends previous | changes forced (answered "
          "failure / over budget) | extends, where free | re-read / appended | user msgs kept | handles shown "
          "| exact |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for spec in a.tokenizer or ["qwen3.6"]:
        counter = resolve(spec)
        check = transformers_check(a.check_exact) if a.check_exact and spec == a.check_exact else None
        for (name, body), keep in [(s, True) for s in sessions] + [(s, False) for s in sessions[:1]]:
            label = name if keep else f"{name}, keep_latest_failure off"
            f = replay(counter, body, replace(policy, keep_latest_failure=keep), check)
            exact = f"{f['exact']:.0f}/{f['checked']:.0f}" if f["checked"] else "-"
            print(f"| {counter.name} | {label} | {f['turns']:.0f} "
                  f"| {f['failed_share']:.2%} (max {f['failed_max']:.1%}) "
                  f"| {f['extends']:.0%} | {f['collapse_turns']:.0f} / {f['compact_turns']:.0f} | {f['free']:.0%} "
                  f"| {f['reread']:.2f}x | {f['users']:.0%} | {f['shown']:.0%} | {exact} |")
    print()
    print(f"Held-out wording: sessions whose results are worded by {', '.join(HELD_OUT)} "
          "(tests/data/results/, not tuned on)")
    print(f"{a.seeds} sessions of each size; failed args left is over all of them, with the range of single "
          "sessions; re-read is the range")
    print("| tokenizer | sessions | turns | failed args left [range] | in leaves a marker can replace [range] "
          "| the same, of the calls some evidence identified [range] "
          "| successes shown as failed | successes' args elided on text | retries folded "
          "| re-read / appended [builds that did not compact] | evidence (of which wrongly) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for spec in (a.tokenizer or ["qwen3.6"])[:1]:  # the first tokenizer: the wording, not the vocabulary, varies
        counter = resolve(spec)
        for k, chars in enumerate(a.chars):
            runs = [replay_truth(counter, worded_session(HELD_OUT, 100 * k + seed, chars=chars), policy)
                    for seed in range(a.seeds)]
            sums = [sum(f["sums"][i] for f in runs) for i in range(6)]
            evidence: Counter[Any] = sum((f["evidence"] for f in runs), Counter())
            wrong: Counter[Any] = sum((f["wrong"] for f in runs), Counter())
            kinds = ", ".join(f"{e.value} {n}" + (f" ({wrong[e]})" if wrong[e] else "")
                              for e, n in evidence.most_common())

            def spread(key: str, fmt: str, runs: list[dict[str, Any]] = runs) -> str:
                return "-".join(format(v, fmt) for v in (min(f[key] for f in runs), max(f[key] for f in runs)))

            def total(key: str, runs: list[dict[str, Any]] = runs) -> int:
                return sum(f[key] for f in runs)
            print(f"| {counter.name} | {a.seeds} x {chars:,} chars | {total('turns')} "
                  f"| {sums[0] / max(1, sums[1]):.2%} [{spread('failed_share', '.1%')}] "
                  f"| {sums[2] / max(1, sums[3]):.2%} [{spread('failed_share_big', '.1%')}] "
                  f"| {sums[4] / max(1, sums[5]):.2%} [{spread('failed_share_known', '.1%')}] "
                  f"| {total('shown_failed')} of {total('ok')} ({total('decoys')} decoys) | {total('elided_ok')} "
                  f"| {total('folded')} of {total('retries')} | {spread('reread', '.2f')}x "
                  f"[{spread('reread_quiet', '.2f')}x] | {kinds} |")
    if a.front_doors:
        print()
        print("The same held-out sessions through the front doors (default tokenizer): `budgeter serve` with the "
              "client library, one call a turn; `budgeter proxy` with the official openai client sending the "
              "whole history each model turn, measured on what reaches the upstream")
        print("| front door | session | prompts | failed args left | in leaves a marker can replace "
              "| successes shown as failed | retries folded |")
        print("|---|---|---|---|---|---|---|")
        for seed, chars in enumerate(a.chars):
            if chars > a.front_door_max_chars:
                continue
            body = worded_session(HELD_OUT, seed, chars=chars)
            for door, replay_door in (("gRPC", replay_grpc_truth), ("proxy", replay_proxy_truth)):
                f = replay_door(body, window=a.window)
                print(f"| {door} | held-out {chars:,} chars | {f['turns']} | {f['failed_share']:.2%} "
                      f"| {f['failed_share_big']:.2%} | {f['shown_failed']} of {f['ok']} ({f['decoys']} decoys) "
                      f"| {f['folded']} of {f['retries']} |")


if __name__ == "__main__":
    main()
