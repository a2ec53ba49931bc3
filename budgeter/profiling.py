"""``budgeter profile``: figures per tokenizer (``core.profile``), shown as rich tables."""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from budgeter.core.messages import Message
from budgeter.core.policy import Policy
from budgeter.core.profile import CATEGORIES, LABELS, profile
from budgeter.tokenizers import DEFAULT, resolve


def profile_body(messages: list[Message], tools: list[Any], *, tokenizers: Sequence[str], window: int,
                 reserve: int = 2048, progress: bool = False) -> list[dict[str, Any]]:
    policy = Policy(window=window, reserve=min(reserve, window // 2))
    specs = list(tokenizers) or [DEFAULT]
    size = sum(m.size for m in messages)
    out = []
    from rich.progress import Progress

    with Progress(transient=True, disable=not progress or size * len(specs) <= 400_000) as bar:
        task = bar.add_task("profiling", total=len(messages) * len(specs))
        for spec in specs:
            started = time.perf_counter()
            counter = resolve(spec)
            result = profile(messages, counter=counter, tools=tools, policy=policy,
                             load_seconds=time.perf_counter() - started, progress=functools.partial(bar.advance, task))
            out.append(result.as_dict())
    return out


def show(profiles: Sequence[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(waste_headline(profiles[0]))
    for p in profiles:
        if p.get("adapted"):
            console.print(adapted_line(p))
    names = [p["tokenizer"] for p in profiles]
    summary = Table(title="Session under each tokenizer")
    for col in ("tokenizer", "tokens", "of window", "template overhead", "waste", "load s", "MB/s"):
        summary.add_column(col, justify="right" if col != "tokenizer" else "left")
    for p in profiles:
        summary.add_row(p["tokenizer"], f"{p['tokens']:,}", f"{p['utilization']:.0%}",
                        f"{p['composition']['template_overhead']:,}", f"{p['waste']['total']:,}",
                        f"{p['load_seconds']:.2f}", f"{p['encode_mb_per_s']:.1f}")
    console.print(summary)
    comp = Table(title="Window composition (tokens)")
    comp.add_column("part")
    for n in names:
        comp.add_column(n, justify="right")
    for cat in CATEGORIES:
        comp.add_row(LABELS[cat], *(f"{p['composition'][cat]:,}" for p in profiles))
    comp.add_row("total", *(f"{p['tokens']:,}" for p in profiles), style="bold")
    console.print(comp)
    kinds = Table(title="Content kinds: tokens (chars/token)")
    kinds.add_column("kind")
    for n in names:
        kinds.add_column(n, justify="right")
    for k in sorted({k for p in profiles for k in p["by_kind"]}):
        kinds.add_row(k, *(f"{p['by_kind'][k]['tokens']:,} ({p['by_kind'][k]['chars_per_token']})"
                           if k in p["by_kind"] else "" for p in profiles))
    console.print(kinds)
    first = profiles[0]
    heavy = Table(title=f"Heaviest {len(first['top'])} messages ({first['tokenizer']})")
    for col in ("#", "role", "tool", "category", "kind", "tokens"):
        heavy.add_column(col, justify="right" if col in ("#", "tokens") else "left")
    for m in first["top"]:
        heavy.add_row(str(m["index"]), m["role"], m["tool"], LABELS.get(m["category"], m["category"]),
                      m["kind"], f"{m['tokens']:,}")
    console.print(heavy)
    c = first["compaction"]
    if "error" in c:
        console.print(f"Compaction at {first['window']:,}: cannot fit: {c['error']}")
    else:
        steps = ", ".join(f"{s['step']} -{s['tokens_saved']:,}" for s in c["steps"] if s["tokens_saved"])
        console.print(f"Compaction at {first['window']:,}: {c['tokens_before']:,} -> {c['tokens_after']:,} "
                      f"tokens (budget {c['budget']:,}; {c['utilization']:.0%} of the window)"
                      + (f": {steps}" if steps else ""))


def adapted_line(p: dict[str, Any]) -> str:
    """The warning that the model behind this profile does not see the session as written (rich
    markup)."""
    from rich.markup import escape

    return (f"[bold yellow]Sent rewritten for {escape(p['tokenizer'])}'s template:[/] "
            + escape("; ".join(p["adapted"])))


def waste_headline(p: dict[str, Any]) -> str:
    """The first lines of the terminal report: each kind of waste, biggest first (rich markup)."""
    from rich.markup import escape

    ranked = [w for w in p["waste_ranked"] if w["tokens"]]
    if not ranked:
        return f"No waste found ({escape(p['tokenizer'])}): no failed tool calls, no stale file snapshots."
    lines = [f"[bold red]Biggest waste: {escape(ranked[0]['label'])}: {ranked[0]['tokens']:,} tokens, "
             f"{ranked[0]['share']:.0%} of the prompt[/] ({escape(p['tokenizer'])})"]
    for w in ranked:
        tools = ", ".join(f"{n} x {t}" for t, n in sorted(w["tools"].items(), key=lambda kv: -kv[1]))
        where = ", ".join(f"#{i}" for i in w["messages"][:10]) + (", ..." if len(w["messages"]) > 10 else "")
        lines.append(f"  {escape(w['label'])}: {w['tokens']:,} tokens"
                     + (f"; {w['calls']} calls ({escape(tools)})" if w["calls"] else "")
                     + (f"; messages {where}" if where else ""))
    if p["waste"].get("truncated_arguments"):
        lines.append(f"  of which arguments cut mid-string: {p['waste']['truncated_arguments']:,} tokens")
    why = Counter(f["why"] for f in p.get("failures", ()))
    if why:
        lines.append("  failed calls by evidence: " + ", ".join(f"{k} {n}" for k, n in why.most_common()))
    return "\n".join(lines)
