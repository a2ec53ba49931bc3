"""A self-contained HTML page for ``budgeter profile``: inline SVG charts, no network, no scripts.

The page opens with the biggest waste (what to fix first), then: the summary, the window
composition as a stacked bar per tokenizer against the window and the budget, a per-message token
chart with a scale, and the effect of each compaction step. Every colour has a legend; charts
scale to the page width.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from budgeter.core.jsonargs import dumps_text
from budgeter.core.profile import CATEGORIES, LABELS

COLORS = {"system": "#6c757d", "tool_schemas": "#adb5bd", "user": "#0d6efd", "assistant": "#6f42c1",
          "failed_calls": "#a4161a", "tool_ok": "#198754", "tool_failed": "#f08080",
          "stale_snapshots": "#fd7e14", "template_overhead": "#ffc107"}
WASTE_COLORS = {"failed_calls_and_results": COLORS["failed_calls"], "stale_snapshots": COLORS["stale_snapshots"]}
FIT, OVER, BUDGET = "#198754", "#0d6efd", "#dc3545"
WIDTH = 1200
"""Drawing width of every chart; the page scales it to the window (``width: 100%``)."""


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def svg(height: int, label: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="100%" '
            f'role="img" aria-label="{esc(label)}" font-family="system-ui,sans-serif">')


def legend(items: Sequence[tuple[str, str]], y: int, *, columns: int = 4) -> str:
    out = []
    for i, (color, text) in enumerate(items):
        x, ly = 4 + (i % columns) * (WIDTH // columns), y + (i // columns) * 22
        out.append(f'<rect x="{x}" y="{ly}" width="14" height="14" fill="{color}"/>'
                   f'<text x="{x + 20}" y="{ly + 12}" font-size="14">{esc(text)}</text>')
    return "".join(out)


def nice_step(top: float, ticks: int = 4) -> int:
    """A round tick step (1, 2 or 5 times a power of ten) giving about ``ticks`` ticks up to ``top``."""
    raw = max(top / ticks, 1)
    power = 10 ** (len(str(int(raw))) - 1)
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def waste_headline(p: dict[str, Any]) -> str:
    """The first thing on the page: the biggest waste, how big, where; then the others as bars."""
    ranked = [w for w in p["waste_ranked"] if w["tokens"]]
    if not ranked:
        return "<div class='headline'><b>No waste found</b>: no failed tool calls, no stale file snapshots.</div>"
    top = ranked[0]
    where = ", ".join(f"#{i}" for i in top["messages"][:12]) + (", …" if len(top["messages"]) > 12 else "")
    tools = ", ".join(f"{n} × {t}" for t, n in sorted(top["tools"].items(), key=lambda kv: -kv[1]))
    detail = (f"{top['calls']} failed calls ({tools}): their arguments and error outputs"
              if top["kind"] == "failed_calls_and_results" else f"{len(top['messages'])} file snapshots "
              "read again or changed later")
    rows, row, label_w = len(ranked), 30, 330
    scale = max(w["tokens"] for w in ranked)
    bars = [svg(row * rows + 6, "waste by kind")]
    for i, w in enumerate(ranked):
        y, bw = 3 + i * row, w["tokens"] / scale * (WIDTH - label_w - 330)
        bars.append(f'<text x="4" y="{y + 18}" font-size="15">{esc(w["label"])}</text>'
                    f'<rect x="{label_w}" y="{y}" width="{bw:.1f}" height="22" '
                    f'fill="{WASTE_COLORS.get(w["kind"], "#999")}"/>'
                    f'<text x="{label_w + bw + 8:.1f}" y="{y + 17}" font-size="15">{w["tokens"]:,} tokens '
                    f'({w["share"]:.0%} of the prompt)</text>')
    return (f"<div class='headline'><div class='big'>Biggest waste: {esc(top['label'])}: "
            f"<b>{top['tokens']:,} tokens</b>, {top['share']:.0%} of the prompt ({esc(p['tokenizer'])})</div>"
            f"<p>{esc(detail)}; messages {esc(where)}</p>{''.join(bars)}</svg></div>")


def composition_svg(profiles: Sequence[dict[str, Any]]) -> str:
    row, label_w, n = 40, 170, len(profiles)
    window = max((p["window"] for p in profiles), default=0)
    budget = profiles[0]["compaction"].get("budget") if profiles else None
    scale = max([p["tokens"] for p in profiles] + [window, 1])
    bar_w = WIDTH - label_w - 120
    items = [c for c in CATEGORIES if any(p["composition"][c] for p in profiles)]
    height = 30 + row * n + 24 * ((len(items) + 3) // 4) + 10
    parts = [svg(height, "window composition")]
    for r, p in enumerate(profiles):
        y, x = 24 + r * row, float(label_w)
        parts.append(f'<text x="4" y="{y + 19}" font-size="14">{esc(p["tokenizer"])[:22]}</text>')
        for cat in CATEGORIES:
            w = max(p["composition"][cat], 0) / scale * bar_w
            if w > 0:
                parts.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="26" fill="{COLORS[cat]}">'
                             f'<title>{esc(LABELS[cat])}: {p["composition"][cat]:,} tokens</title></rect>')
                x += w
        parts.append(f'<text x="{x + 6:.1f}" y="{y + 19}" font-size="13">{p["tokens"]:,}</text>')
    for value, name, dash in ((window, "window", ""), (budget, "budget", "6 4")):
        if value:
            bx = label_w + value / scale * bar_w
            parts.append(f'<line x1="{bx:.1f}" y1="16" x2="{bx:.1f}" y2="{24 + row * n}" stroke="{BUDGET}" '
                         f'stroke-width="2" stroke-dasharray="{dash}"/><text x="{bx - 4:.1f}" '
                         f'y="{12 if name == "window" else 24 + row * n + 14}" font-size="13" '
                         f'text-anchor="end" fill="{BUDGET}">{name} {value:,}</text>')
    y = 30 + row * n + 14
    parts.append(legend([(COLORS[c], f"{LABELS[c]} ({profiles[0]['composition'][c]:,})") for c in items], y))
    return "".join(parts) + "</svg>"


def timeline_svg(p: dict[str, Any], height: int = 330, label: int = 6) -> str:
    msgs = p["messages"]
    if not msgs:
        return "<p>No messages.</p>"
    step_y = nice_step(max(m["tokens"] for m in msgs))
    top = step_y * -(-max(m["tokens"] for m in msgs) // step_y)
    left, plot_top, plot_h = 70, 20, height - 110
    base = plot_top + plot_h
    step = (WIDTH - left - 10) / len(msgs)
    parts = [svg(height, "tokens per message"),
             '<text x="4" y="12" font-size="13">tokens</text>']
    for v in range(0, top + 1, step_y):  # the scale: gridlines with their values
        y = base - v / top * plot_h
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{WIDTH - 10}" y2="{y:.1f}" stroke="#dee2e6"/>'
                     f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="12" text-anchor="end">{v:,}</text>')
    heavy = labelled(msgs, label, min_gap=130 / step)
    used = set()
    for i, m in enumerate(msgs):
        h, x = m["tokens"] / top * plot_h, left + i * step
        color = COLORS.get(m["category"], "#999")
        used.add(m["category"])
        parts.append(f'<rect x="{x:.1f}" y="{base - h:.1f}" width="{max(step - 1, 1):.1f}" height="{h:.1f}" '
                     f'fill="{color}"><title>#{m["index"]} {esc(LABELS.get(m["category"], m["role"]))} '
                     f'{esc(m["tool"])} {m["tokens"]:,} tokens</title></rect>')
        if m["index"] in heavy:
            anchor = "end" if x > WIDTH - 140 else "start"
            parts.append(f'<text x="{x + (step if anchor == "end" else 0):.1f}" '
                         f'y="{max(base - h - 4, plot_top + 10):.1f}" font-size="12" text-anchor="{anchor}">'
                         f'#{m["index"]} {esc(m["tool"] or m["role"])[:14]}</text>')
    every = nice_step(len(msgs), 10)
    for i in range(0, len(msgs), every):
        x = left + i * step + step / 2
        parts.append(f'<line x1="{x:.1f}" y1="{base}" x2="{x:.1f}" y2="{base + 5}" stroke="#333"/>'
                     f'<text x="{x:.1f}" y="{base + 19}" font-size="12" text-anchor="middle">{i}</text>')
    parts.append(f'<line x1="{left}" y1="{base}" x2="{WIDTH - 10}" y2="{base}" stroke="#333"/>'
                 f'<text x="{WIDTH - 10}" y="{base + 38}" font-size="13" text-anchor="end">message index</text>')
    parts.append(legend([(COLORS[c], LABELS[c]) for c in CATEGORIES if c in used], base + 50, columns=5))
    return "".join(parts) + "</svg>"


def labelled(msgs: Sequence[dict[str, Any]], n: int, *, min_gap: float) -> set[int]:
    """The heaviest ``n`` messages whose labels do not overlap (at least ``min_gap`` bars apart)."""
    out: list[int] = []
    for m in sorted(msgs, key=lambda m: (-m["tokens"], m["index"])):
        if len(out) == n:
            break
        if all(abs(m["index"] - i) >= min_gap for i in out):
            out.append(m["index"])
    return set(out)


def steps_svg(p: dict[str, Any]) -> str:
    c = p["compaction"]
    if "error" in c:
        return f"<p>Compaction cannot fit this window: {esc(c['error'])}</p>"
    bars = [("uncompacted", c["tokens_before"])]
    level = c["tokens_before"]
    for s in c["steps"]:
        if s["tokens_saved"]:
            level -= s["tokens_saved"]
            bars.append((s["step"], level))
    bars.append(("final prompt", c["tokens_after"]))
    top = max([b[1] for b in bars] + [c["budget"], 1])
    row, label_w = 30, 210
    span = WIDTH - label_w - 120
    height = row * len(bars) + 60
    parts = [svg(height, "compaction steps")]
    for i, (name, n) in enumerate(bars):
        y, w = 22 + i * row, n / top * span
        parts.append(f'<text x="4" y="{y + 16}" font-size="14">{esc(name)}</text>'
                     f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="22" '
                     f'fill="{FIT if n <= c["budget"] else OVER}"><title>{esc(name)}: {n:,}</title></rect>'
                     f'<text x="{label_w + w + 6:.1f}" y="{y + 16}" font-size="13">{n:,}</text>')
    bx = label_w + c["budget"] / top * span
    parts.append(f'<line x1="{bx:.1f}" y1="16" x2="{bx:.1f}" y2="{22 + row * len(bars)}" stroke="{BUDGET}" '
                 f'stroke-width="2" stroke-dasharray="6 4"/><text x="{bx - 4:.1f}" y="13" font-size="13" '
                 f'text-anchor="end" fill="{BUDGET}">budget {c["budget"]:,} (window − reserve)</text>')
    parts.append(legend([(FIT, "within the budget"), (OVER, "over the budget"),
                         (BUDGET, "budget line")], 30 + row * len(bars), columns=3))
    return "".join(parts) + "</svg>"


def table(rows: Sequence[Sequence[Any]], head: Sequence[str]) -> str:
    out = ["<table><thead><tr>", *(f"<th>{esc(h)}</th>" for h in head), "</tr></thead><tbody>"]
    for r in rows:
        out.append("<tr>" + "".join(f"<td>{esc(f'{c:,}' if isinstance(c, int) else c)}</td>" for c in r)
                   + "</tr>")
    return "".join(out) + "</tbody></table>"


CSS = """body{font-family:system-ui,sans-serif;margin:20px 28px;color:#212529}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin-top:28px}table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #dee2e6;padding:3px 8px;text-align:right}th{background:#f8f9fa}
td:first-child,th:first-child{text-align:left}.note{color:#6c757d;font-size:12px}
.headline{border-left:6px solid #a4161a;background:#fff5f5;padding:10px 16px;margin:12px 0}
.headline .big{font-size:20px}.headline p{margin:6px 0}.adapted{background:#fff3cd;padding:6px 10px}"""


def failures_table(p: dict[str, Any]) -> str:
    """Which calls were taken as failed, and why: declared by the caller, budgeter's verdict, the
    model retried it, the same error again, or the result's text."""
    rows = [(f["index"], f["tool"], f["why"]) for f in p.get("failures", [])]
    if not rows:
        return "<p class='note'>No failed calls.</p>"
    return table(rows, ["#", "tool", "evidence"])


def render(profiles: Sequence[dict[str, Any]], *, source: str) -> str:
    first = profiles[0]
    summary = table([(p["tokenizer"], p["tokens"], f"{p['utilization']:.0%}" if p["utilization"] else "",
                      p["composition"]["template_overhead"], p["waste"]["total"],
                      f"{p['load_seconds']:.2f} s", f"{p['encode_mb_per_s']:.1f}") for p in profiles],
                    ["tokenizer", "tokens", "of window", "template overhead", "waste", "load", "MB/s"])
    kinds = sorted({k for p in profiles for k in p["by_kind"]})
    kind_rows = [(k, *(p["by_kind"].get(k, {}).get("chars_per_token", "") for p in profiles)) for k in kinds]
    top = table([(m["index"], m["role"], m["tool"], LABELS.get(m["category"], m["category"]), m["kind"],
                  m["tokens"]) for m in first["top"]], ["#", "role", "tool", "category", "kind", "tokens"])
    sections = [
        f"<h1>budgeter profile</h1><p class='note'>{esc(source)} · {len(first['messages'])} messages · "
        f"window {first['window']:,}</p>", waste_headline(first),
        *(f"<p class='adapted'><b>Sent rewritten for {esc(p['tokenizer'])}'s template:</b> "
          f"{esc('; '.join(p['adapted']))}</p>" for p in profiles if p.get("adapted")),
        "<h2>Summary</h2>", summary,
        "<h2>Window composition (tokens)</h2>", composition_svg(profiles),
        f"<h2>Tokens per message ({esc(first['tokenizer'])})</h2>", timeline_svg(first),
        "<h2>Heaviest messages</h2>", top,
        "<h2>Failed calls and the evidence for each</h2>", failures_table(first),
        "<h2>Characters per token by content kind</h2>",
        table(kind_rows, ["kind", *(p["tokenizer"] for p in profiles)]),
        f"<h2>Compaction at a {first['window']:,}-token window ({esc(first['tokenizer'])})</h2>",
        steps_svg(first),
        "<h2>Notes</h2>" + "".join(f"<p class='note'>{esc(p['tokenizer'])}: {esc('; '.join(p['notes']))}</p>"
                                   for p in profiles),
    ]
    data = dumps_text(profiles).replace("</", "<\\/")
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>budgeter profile</title>"
            "<meta name='viewport' content='width=device-width'>"
            f"<style>{CSS}</style></head><body>{''.join(sections)}"
            f"<script type='application/json' id='profile-data'>{data}</script></body></html>")
