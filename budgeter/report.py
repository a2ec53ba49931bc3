"""A self-contained HTML page for ``budgeter profile``: inline SVG charts, no network, no scripts.

Charts: the window composition as a stacked bar per tokenizer, a per-message token timeline with
the heaviest messages labelled, and the effect of each compaction step.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from budgeter.core.jsonargs import dumps_text
from budgeter.core.profile import CATEGORIES

COLORS = {"system": "#6c757d", "tool_schemas": "#adb5bd", "user": "#0d6efd", "assistant": "#6f42c1",
          "tool_ok": "#198754", "tool_failed": "#dc3545", "stale_snapshots": "#fd7e14",
          "template_overhead": "#ffc107"}
ROLE_COLORS = {"system": "#6c757d", "user": "#0d6efd", "assistant": "#6f42c1", "tool": "#198754"}


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def composition_svg(profiles: Sequence[dict[str, Any]], width: int = 900) -> str:
    row, label_w = 34, 170
    height = row * len(profiles) + 70
    scale = max((p["tokens"] for p in profiles), default=1) or 1
    bar_w = width - label_w - 90
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="window composition">']
    for r, p in enumerate(profiles):
        y, x = 10 + r * row, float(label_w)
        parts.append(f'<text x="4" y="{y + 18}" font-size="13">{esc(p["tokenizer"])[:24]}</text>')
        for cat in CATEGORIES:
            n = p["composition"][cat]
            w = max(n, 0) / scale * bar_w
            if w <= 0:
                continue
            parts.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="24" fill="{COLORS[cat]}">'
                         f'<title>{esc(cat)}: {n:,} tokens</title></rect>')
            x += w
        parts.append(f'<text x="{x + 6:.1f}" y="{y + 18}" font-size="12">{p["tokens"]:,}</text>')
    y = 20 + row * len(profiles)
    for i, cat in enumerate(CATEGORIES):
        lx = 4 + (i % 4) * 220
        ly = y + (i // 4) * 20
        parts.append(f'<rect x="{lx}" y="{ly}" width="12" height="12" fill="{COLORS[cat]}"/>'
                     f'<text x="{lx + 18}" y="{ly + 11}" font-size="12">{esc(cat)}</text>')
    return "".join(parts) + "</svg>"


def timeline_svg(p: dict[str, Any], width: int = 900, height: int = 260, label: int = 6) -> str:
    msgs = p["messages"]
    if not msgs:
        return "<p>No messages.</p>"
    top = max(m["tokens"] for m in msgs) or 1
    plot_h, left = height - 50, 40
    step = (width - left - 10) / len(msgs)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="token timeline">',
             f'<line x1="{left}" y1="{plot_h + 10}" x2="{width - 10}" y2="{plot_h + 10}" stroke="#333"/>',
             f'<text x="2" y="18" font-size="11">{top:,}</text>']
    heavy = {m["index"] for m in sorted(msgs, key=lambda m: -m["tokens"])[:label]}
    for i, m in enumerate(msgs):
        h = m["tokens"] / top * plot_h
        x = left + i * step
        color = COLORS.get(m["category"], ROLE_COLORS.get(m["role"], "#999"))
        parts.append(f'<rect x="{x:.1f}" y="{plot_h + 10 - h:.1f}" width="{max(step - 1, 1):.1f}" '
                     f'height="{h:.1f}" fill="{color}"><title>#{m["index"]} {esc(m["role"])} '
                     f'{esc(m["tool"])} {m["tokens"]:,} tokens</title></rect>')
        if m["index"] in heavy:
            parts.append(f'<text x="{x:.1f}" y="{max(plot_h + 4 - h, 12):.1f}" font-size="10">'
                         f'#{m["index"]} {esc(m["tool"] or m["role"])[:14]}</text>')
    parts.append(f'<text x="{left}" y="{height - 8}" font-size="11">message index →</text>')
    return "".join(parts) + "</svg>"


def steps_svg(p: dict[str, Any], width: int = 900) -> str:
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
    top = max(b[1] for b in bars) or 1
    row, label_w = 28, 170
    height = row * len(bars) + 20
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="compaction steps">']
    budget_x = label_w + c["budget"] / top * (width - label_w - 90)
    for i, (name, n) in enumerate(bars):
        y = 6 + i * row
        w = n / top * (width - label_w - 90)
        fill = "#198754" if n <= c["budget"] else "#0d6efd"
        parts.append(f'<text x="4" y="{y + 16}" font-size="12">{esc(name)}</text>'
                     f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="20" fill="{fill}">'
                     f'<title>{esc(name)}: {n:,}</title></rect>'
                     f'<text x="{label_w + w + 6:.1f}" y="{y + 15}" font-size="11">{n:,}</text>')
    parts.append(f'<line x1="{budget_x:.1f}" y1="0" x2="{budget_x:.1f}" y2="{height}" stroke="#dc3545" '
                 f'stroke-dasharray="4 3"><title>budget {c["budget"]:,}</title></line>')
    return "".join(parts) + "</svg>"


def table(rows: Sequence[Sequence[Any]], head: Sequence[str]) -> str:
    out = ["<table><thead><tr>", *(f"<th>{esc(h)}</th>" for h in head), "</tr></thead><tbody>"]
    for r in rows:
        out.append("<tr>" + "".join(f"<td>{esc(f'{c:,}' if isinstance(c, int) else c)}</td>" for c in r)
                   + "</tr>")
    return "".join(out) + "</tbody></table>"


CSS = """body{font-family:system-ui,sans-serif;margin:24px;color:#212529;max-width:960px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px}table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #dee2e6;padding:3px 8px;text-align:right}th{background:#f8f9fa}
td:first-child,th:first-child{text-align:left}.note{color:#6c757d;font-size:12px}"""


def render(profiles: Sequence[dict[str, Any]], *, source: str) -> str:
    first = profiles[0]
    summary = table([(p["tokenizer"], p["tokens"], f"{p['utilization']:.0%}" if p["utilization"] else "",
                      p["composition"]["template_overhead"], p["waste"]["total"],
                      f"{p['load_seconds']:.2f} s", f"{p['encode_mb_per_s']:.1f}") for p in profiles],
                    ["tokenizer", "tokens", "of window", "template overhead", "waste", "load", "MB/s"])
    kinds = sorted({k for p in profiles for k in p["by_kind"]})
    kind_rows = [(k, *(p["by_kind"].get(k, {}).get("chars_per_token", "") for p in profiles)) for k in kinds]
    top = table([(m["index"], m["role"], m["tool"], m["kind"], m["tokens"]) for m in first["top"]],
                ["#", "role", "tool", "kind", "tokens"])
    sections = [
        f"<h1>budgeter profile</h1><p class='note'>{esc(source)} · {len(first['messages'])} messages · "
        f"window {first['window']:,}</p>", "<h2>Summary</h2>", summary,
        "<h2>Window composition</h2>", composition_svg(profiles),
        f"<h2>Tokens per message ({esc(first['tokenizer'])})</h2>", timeline_svg(first),
        "<h2>Heaviest messages</h2>", top,
        "<h2>Characters per token by content kind</h2>",
        table(kind_rows, ["kind", *(p["tokenizer"] for p in profiles)]),
        f"<h2>Compaction at a {first['window']:,}-token window ({esc(first['tokenizer'])})</h2>",
        steps_svg(first),
        "<h2>Notes</h2>" + "".join(f"<p class='note'>{esc(p['tokenizer'])}: {esc('; '.join(p['notes']))}</p>"
                                   for p in profiles),
    ]
    data = dumps_text(profiles).replace("</", "<\\/")
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>budgeter profile</title>"
            f"<style>{CSS}</style></head><body>{''.join(sections)}"
            f"<script type='application/json' id='profile-data'>{data}</script></body></html>")
