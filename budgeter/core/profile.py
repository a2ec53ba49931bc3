"""What a session costs under a tokenizer, part by part, and what compaction would do.

The parts add up to the exact count of the whole prompt by construction:
- each message's *content* (text, reasoning, tool-call arguments) is counted on its own;
- *tool schemas* are the difference the ``tools`` make to the full prompt;
- *template overhead* is the rest: role headers, separators, the generation prompt and the
  merges a BPE makes across a content boundary. Per message, it is the message's cost rendered
  alone minus its content.

A tool call whose result was an error is waste: its arguments count as ``failed_calls`` (not
``assistant``), its error output as ``tool_failed``; ``waste_ranked`` puts the biggest waste first.
"""

from __future__ import annotations

import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from budgeter.core.classify import FileOp, ResultStatus
from budgeter.core.counting import adaptations, sent
from budgeter.core.engine import trim
from budgeter.core.facts import History
from budgeter.core.jsonargs import ArgStatus, loads_object
from budgeter.core.messages import Message
from budgeter.core.policy import Policy
from budgeter.core.sniff import sniff
from budgeter.core.typing import JSONDict, PromptCounter

CATEGORIES = ("system", "tool_schemas", "user", "assistant", "failed_calls", "tool_ok", "tool_failed",
              "stale_snapshots", "template_overhead")
LABELS = {"system": "system prompt", "tool_schemas": "tool schemas", "user": "user",
          "assistant": "assistant (text, calls that ran)", "failed_calls": "failed calls' arguments",
          "tool_ok": "tool output", "tool_failed": "tool errors", "stale_snapshots": "stale file snapshots",
          "template_overhead": "template overhead"}
"""What each category is called where people read it (tables, chart legends)."""
WASTE_LABELS = {"failed_calls_and_results": "failed tool calls and their errors",
                "stale_snapshots": "stale file snapshots", "truncated_arguments": "truncated arguments"}
KIND_OF = {"html": "css/html", "css": "css/html", "js": "code", "ts": "code", "python": "code",
           "shell": "code", "json": "json", "yaml": "json", "markdown": "prose", "text": "prose"}
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_LOG_LINE = re.compile(r"^(\s*(\d{4}-\d\d-\d\d|\d\d:\d\d:\d\d|\[?(ERROR|WARN|WARNING|INFO|DEBUG)\b)|"
                       r"Traceback \(most recent call last\)|\s+at \S+\(|\s+File \".*\", line \d+)")


@dataclass(frozen=True, slots=True)
class MessageFigures:
    index: int
    role: str
    tool: str
    category: str
    kind: str
    chars: int
    content_tokens: int
    tokens: int
    """Cost rendered alone: content plus this message's template overhead."""
    failed_tokens: int = 0
    """Content tokens of this message's tool calls that failed (their arguments)."""


@dataclass(slots=True)
class Profile:
    tokenizer: str
    tokens: int
    window: int
    messages: list[MessageFigures]
    composition: dict[str, int]
    by_role: dict[str, int]
    by_tool: dict[str, int]
    by_kind: dict[str, dict[str, float]]
    waste: dict[str, int]
    waste_ranked: list[dict[str, Any]]
    compaction: dict[str, Any]
    load_seconds: float
    encode_mb_per_s: float
    notes: list[str] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    """Each failed call: its message, tool and the evidence it was taken as failed on."""
    adapted: list[str] = field(default_factory=list)
    """How this session is rewritten for the template when sent (``core.counting.sent``); [] when it
    is sent as given."""

    def top(self, n: int = 10) -> list[MessageFigures]:
        return sorted(self.messages, key=lambda m: (-m.tokens, m.index))[:n]

    def as_dict(self, *, top: int = 10) -> dict[str, Any]:
        return {
            "tokenizer": self.tokenizer, "tokens": self.tokens, "window": self.window,
            "utilization": round(self.tokens / self.window, 4) if self.window else None,
            "composition": self.composition, "by_role": self.by_role, "by_tool": self.by_tool,
            "by_kind": self.by_kind, "waste": self.waste, "waste_ranked": self.waste_ranked,
            "compaction": self.compaction,
            "template_overhead": {"total": self.composition["template_overhead"],
                                  "per_message": [m.tokens - m.content_tokens for m in self.messages]},
            "top": [_fig(m) for m in self.top(top)], "messages": [_fig(m) for m in self.messages],
            "load_seconds": round(self.load_seconds, 4),
            "encode_mb_per_s": round(self.encode_mb_per_s, 2), "notes": self.notes,
            "failures": self.failures, "adapted": self.adapted,
        }


def _fig(m: MessageFigures) -> dict[str, Any]:
    return {"index": m.index, "role": m.role, "tool": m.tool, "category": m.category, "kind": m.kind,
            "chars": m.chars, "content_tokens": m.content_tokens, "tokens": m.tokens,
            "failed_tokens": m.failed_tokens}


def content_texts(m: Message) -> list[str]:
    return [t for t in (m.content, m.reasoning or "", *(c.arguments for c in m.tool_calls)) if t]


def kind_texts(m: Message) -> list[str]:
    """What the content kind is judged on: for tool calls, the argument values (the HTML page
    inside a write_file call is HTML, not JSON)."""
    out = [t for t in (m.content, m.reasoning or "") if t]
    for c in m.tool_calls:
        value = loads_object(c.arguments)
        leaves = [v for v in value.values() if isinstance(v, str)] if value else []
        out.append(max(leaves, key=len) if leaves else c.arguments)
    return out


def content_kind(text: str) -> str:
    if not text.strip():
        return "prose"
    if len(_CJK.findall(text[:4000])) > 0.3 * min(len(text), 4000):
        return "cjk"
    lines = text[:20000].splitlines() or [""]
    if sum(1 for line in lines if _LOG_LINE.match(line)) >= max(2, len(lines) // 4):
        return "logs"
    return KIND_OF.get(sniff(text), "prose")


def stale_reads(log: History) -> set[int]:
    """Indices of tool results holding a file snapshot that a later call re-read or changed."""
    events: list[tuple[int, FileOp, str]] = []
    for f in log.facts:
        for cf in f.calls:
            at = log.result_of(cf.id)
            if cf.op is FileOp.NONE or not cf.path or at is None:
                continue
            if cf.op is not FileOp.READ or log.facts[at].result is ResultStatus.OK:
                events.append((at, FileOp(cf.op), cf.path))
    stale, seen = set(), set()
    for at, op, path in reversed(events):
        if op is FileOp.READ and path in seen:
            stale.add(at)
        seen.add(path)
    return stale


def profile(messages: Sequence[Message], *, counter: PromptCounter, tools: Sequence[JSONDict] = (),
            policy: Policy | None = None, load_seconds: float = 0.0,
            progress: Callable[[int], None] | None = None) -> Profile:
    policy = policy or Policy()
    log = History(policy, tools)
    log.extend(messages)
    total = counter.count_prompt(messages, tools)
    schemas = total - counter.count_prompt(messages, ()) if tools else 0
    names = {c.id: c.name for m in messages for c in m.tool_calls}
    stale = stale_reads(log)
    failed = failed_call_ids(log)
    figures = []
    for i, m in enumerate(messages):
        texts = content_texts(m)
        content = sum(counter.count_text(t) for t in texts)
        lost = sum(counter.count_text(c.arguments) for c in m.tool_calls if c.id in failed and c.arguments)
        figures.append(MessageFigures(
            i, m.role, names.get(m.tool_call_id or "", "") if m.role == "tool" else
            ",".join(c.name for c in m.tool_calls), _category(m, m.tool_call_id in failed, i in stale, lost),
            "error" if m.role == "tool" and m.tool_call_id in failed else content_kind("\n".join(kind_texts(m))),
            sum(map(len, texts)), content,
            counter.message_cost(m), lost))
        if progress:
            progress(1)
    waste = _waste(log, figures)
    out = Profile(counter.name, total, policy.window, figures,
                  _composition(figures, total, schemas), _sum_by(figures, "role"),
                  _by_tool(figures), _by_kind(figures), waste, rank_waste(waste, figures, total),
                  _compaction(messages, counter, tools, policy), load_seconds,
                  encode_throughput(counter, [t for m in messages for t in content_texts(m)]),
                  list(counter.notes), failed_calls(log),
                  [a.note for a in adaptations(counter)] if sent(counter, messages, tools) is not None else [])
    return out


def encode_throughput(counter: PromptCounter, texts: Sequence[str]) -> float:
    """MB/s of the raw tokenizer on these texts (no piece cache), measured once."""
    tokenizer = getattr(getattr(counter, "pieces", None), "tokenizer", None)
    size = sum(len(t.encode("utf-8", "surrogatepass")) for t in texts)
    started = time.perf_counter()
    if tokenizer is not None:
        tokenizer.count_batch(list(texts))
    else:
        raw = getattr(counter, "count_raw", counter.count_text)
        for t in texts:
            raw(t)
    seconds = time.perf_counter() - started
    return size / 1e6 / seconds if seconds else 0.0


def failed_call_ids(log: History) -> set[str]:
    """Ids of the tool calls taken as failed (on any evidence, ``History.failed_by``)."""
    return {log.call(ref).id for ref in log.failed_by}


def failed_calls(log: History) -> list[dict[str, Any]]:
    """The failed calls in history order, each with the evidence it was taken as failed on."""
    return [{"index": ref[0], "tool": log.call(ref).name, "id": log.call(ref).id, "why": why.value}
            for ref, why in sorted(log.failed_by.items())]


def _category(m: Message, failed: bool, stale: bool, failed_tokens: int) -> str:
    if m.role == "tool":
        return "stale_snapshots" if stale else ("tool_failed" if failed else "tool_ok")
    if m.role in ("system", "developer", "user"):
        return m.role
    return "failed_calls" if failed_tokens else "assistant"


def _composition(figures: Sequence[MessageFigures], total: int, schemas: int) -> dict[str, int]:
    out = dict.fromkeys(CATEGORIES, 0)
    for m in figures:
        rest = "assistant" if m.category == "failed_calls" else m.category
        out["failed_calls"] += m.failed_tokens  # a failed call's arguments, not its message's text
        out[rest] += m.content_tokens - m.failed_tokens
    out["tool_schemas"] = schemas
    out["template_overhead"] = total - sum(out.values())
    return out


def _sum_by(figures: Sequence[MessageFigures], attr: str) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for m in figures:
        out[getattr(m, attr)] += m.tokens
    return dict(out)


def _by_tool(figures: Sequence[MessageFigures]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for m in figures:
        for name in filter(None, m.tool.split(",")):
            out[name] += m.tokens
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _by_kind(figures: Sequence[MessageFigures]) -> dict[str, dict[str, float]]:
    chars: Counter[str] = Counter()
    tokens: Counter[str] = Counter()
    for m in figures:
        chars[m.kind] += m.chars
        tokens[m.kind] += m.content_tokens
    return {k: {"tokens": tokens[k], "chars": chars[k],
                "chars_per_token": round(chars[k] / tokens[k], 2) if tokens[k] else 0.0}
            for k in sorted(tokens, key=lambda k: -tokens[k])}


def rank_waste(waste: dict[str, int], figures: Sequence[MessageFigures], total: int) -> list[dict[str, Any]]:
    """The kinds of waste, biggest first, each with the messages that hold it."""
    holders = {"failed_calls_and_results": {"failed_calls", "tool_failed"},
               "stale_snapshots": {"stale_snapshots"}}
    out = []
    for key, cats in holders.items():
        where = [m for m in figures if m.category in cats]
        out.append({"kind": key, "label": WASTE_LABELS[key], "tokens": waste[key],
                    "share": round(waste[key] / total, 4) if total else 0.0,
                    "messages": [m.index for m in where],
                    "calls": sum(1 for m in where if m.category == "failed_calls"),
                    "tools": dict(Counter(t for m in where if m.category == "failed_calls"
                                          for t in filter(None, m.tool.split(","))))})
    return sorted(out, key=lambda w: -w["tokens"])


def _waste(log: History, figures: Sequence[MessageFigures]) -> dict[str, int]:
    failed_ids = failed_call_ids(log)
    failed_calls = truncated = 0
    for m, f, fig in zip(log.messages, log.facts, figures, strict=True):
        if m.tool_calls and any(c.id in failed_ids for c in m.tool_calls):
            failed_calls += fig.tokens if all(c.id in failed_ids for c in m.tool_calls) else fig.failed_tokens
        if any(c.verdict.status is ArgStatus.TRUNCATED for c in f.calls):
            truncated += fig.tokens
    failed_results = sum(m.tokens for m in figures if m.category == "tool_failed")
    stale = sum(m.tokens for m in figures if m.category == "stale_snapshots")
    return {"failed_calls_and_results": failed_calls + failed_results, "stale_snapshots": stale,
            "truncated_arguments": truncated,
            "total": failed_calls + failed_results + stale}


def _compaction(messages: Sequence[Message], counter: PromptCounter, tools: Sequence[JSONDict],
                policy: Policy) -> dict[str, Any]:
    try:
        result = trim(messages, counter=counter, tools=tools, policy=policy)
    except Exception as exc:  # a pinned prompt over budget is a finding, not a crash
        return {"fits": False, "error": getattr(exc, "message", str(exc))}
    steps = [{"step": s.step, "tokens_saved": s.tokens_before - s.tokens_after,
              "items": len(s.actions)} for s in result.steps if s.actions]
    return {"fits": result.tokens <= result.budget, "tokens_before": result.tokens_before,
            "tokens_after": result.tokens, "budget": result.budget, "steps": steps,
            "utilization": round(result.tokens / policy.window, 4)}
