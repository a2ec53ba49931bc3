"""Templates that are not additive or not pure, detected when a profile loads.

budgeter counts the full render of the whole prompt every time, so a total is exact whatever the
template does. What a template can still break is the assumption that a message costs the same on
every later turn, or that every request can be rendered. ``detect`` probes a template and finds:

- **drops earlier reasoning**: a reasoning block (``reasoning_content``, or ``thinking`` for
  harmony-style templates) disappears once a later user turn follows (Qwen3's ``<think>``, Qwen3.6
  without ``preserve_thinking``, gpt-oss's analysis channel). Not additive: appending a message
  changes the text before it, so the server re-processes from there. Per-message costs keep the
  reasoning (an upper bound); totals follow the render.
- **one tool call per message** (Llama 3.1/3.2): the template raises on parallel calls. Extra calls
  are counted as ``<tool_call>`` JSON text in the message content, never dropped (the server would
  refuse the request as is).
- **reads the date** (``strftime_now``, or the ``date_string`` llama.cpp passes): the prompt
  changes with the day; counted with today's date, as the server renders it today.
- **needs a user turn** (Qwen3.5/3.6: "No user query found"): a partial prompt budgeter prices
  (pinned system text, one message costed alone) gets an empty user turn, a few tokens over.
- **reads ``thinking``**, not ``reasoning_content`` (gpt-oss, LFM2): llama.cpp copies the reasoning
  there before rendering; so does budgeter.
- **nine-character call ids** (Mistral Nemo's published template): other ids make it raise, so
  the server refuses every request that holds a call. Ids are mapped to 9 alphanumeric characters
  (as mistral-common's profile maps them), counted and sent so.
- **an answer before the user speaks again** (the same template raises on a user turn right after
  tool results): an empty assistant message is put there, counted and sent.

``apply`` wraps a format so the rewrites happen before rendering; ``Rules.notes`` is what the report
says about them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from budgeter.core.counting import Adaptation
from budgeter.core.typing import ChatFormat
from budgeter.tokenizers.mistral import mistral_id

_USER = {"role": "user", "content": "zqquestion"}


def _call(name: str, *, nine: bool = False) -> dict[str, Any]:
    call_id = mistral_id(f"id{name}") if nine else f"id{name}"
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": {"zqarg": 1}}}


@dataclass(frozen=True, slots=True)
class Rules:
    drops_reasoning: bool = False
    single_call: bool = False
    reads_date: bool = False
    thinking_field: bool = False
    needs_user: bool = False
    nine_char_ids: bool = False
    answer_before_user: bool = False

    def notes(self) -> list[str]:
        out = []
        if self.drops_reasoning:
            out.append("template drops earlier reasoning once a later user turn follows (not additive): totals "
                       "follow the full render; an earlier turn's text changes when the user speaks")
        if self.single_call:
            out.append("template allows one tool call per message: further calls are counted as <tool_call> "
                       "JSON text in the content (the server refuses such a request as is)")
        if self.reads_date:
            out.append("template reads the date (strftime_now, or the date_string llama.cpp passes): counted "
                       "with today's date, as the server renders it today; another day may differ by a token or two")
        if self.needs_user:
            out.append("template refuses a prompt without a user turn (so would the server): partial prompts "
                       "(pinned system text, a message costed alone) are counted with an empty user turn")
        if self.thinking_field:
            out.append("template reads message.thinking: reasoning_content is copied there, as llama.cpp does "
                       "(beside tool calls, content is counted inside it: the template refuses both)")
        out += [a.note for a in self.adaptations() if a.kind in ("call_ids_nine_chars", "answer_before_user")]
        return out

    def adaptations(self) -> list[Adaptation]:
        """The rewrites the server is sent too (``RuledFormat.for_server``): extra parallel calls,
        call ids made nine characters."""
        out = []
        if self.single_call:
            out.append(Adaptation("parallel_calls_as_text", "template allows one tool call per message: further "
                                  "calls are counted (and sent) as <tool_call> JSON text in the content"))
        if self.nine_char_ids:
            out.append(Adaptation("call_ids_nine_chars", "template refuses tool-call ids that are not 9 alphanumeric "
                                  "characters: each id is counted (and sent) mapped to one, the same id always to "
                                  "the same one"))
        if self.answer_before_user:
            out.append(Adaptation("answer_before_user", "template refuses a user turn right after tool results: an "
                                  "empty assistant message is counted (and sent) between them"))
        return out

    @property
    def rewrites(self) -> bool:
        return self.thinking_field or self.needs_user or self.sent_rewrites

    @property
    def sent_rewrites(self) -> bool:
        """Whether the server must be sent the rewritten messages too."""
        return self.single_call or self.nine_char_ids or self.answer_before_user


def _render(fmt: ChatFormat, messages: list[dict[str, Any]], *, gen: bool) -> str | None:
    try:
        return fmt.render(messages, None, add_generation_prompt=gen)
    except Exception:
        return None


def detect(fmt: ChatFormat) -> Rules:
    source = getattr(fmt, "source", "") or ""
    thinking = bool(re.search(r"message\s*(\.thinking|\[\s*['\"]thinking['\"]\s*\])", source)) \
        and "reasoning_content" not in source
    key = "thinking" if thinking else "reasoning_content"
    answer = {"role": "assistant", "content": "zqanswer", key: "zqreason"}
    alone = _render(fmt, [_USER, answer], gen=False)
    later = _render(fmt, [_USER, answer, {"role": "user", "content": "zqagain"}], gen=True)
    drops = alone is not None and later is not None and "zqreason" in alone and "zqreason" not in later
    one = _render(fmt, [_USER, {"role": "assistant", "content": "", "tool_calls": [_call("zqone")]}], gen=False)
    nine = False
    if one is None:  # refused: with a nine-character id?
        one = _render(fmt, [_USER, {"role": "assistant", "content": "", "tool_calls": [_call("zqone", nine=True)]}],
                      gen=False)
        nine = one is not None and "zqone" in one
    two = _render(fmt, [_USER, {"role": "assistant", "content": "",
                                "tool_calls": [_call("zqone", nine=nine), _call("zqtwo", nine=nine)]}], gen=False)
    single = one is not None and "zqone" in one and (two is None or "zqtwo" not in two)
    answer_first = _answer_first(fmt, nine)
    lone = _render(fmt, [{"role": "assistant", "content": "zqanswer"}], gen=False)
    needs_user = lone is None and _render(fmt, [_USER, {"role": "assistant", "content": "zqanswer"}], gen=False) \
        is not None
    dated = "strftime_now" in source or any(name in source for name in getattr(fmt, "dynamic", ()))
    return Rules(drops_reasoning=drops, single_call=single, reads_date=dated, thinking_field=thinking,
                 needs_user=needs_user, nine_char_ids=nine, answer_before_user=answer_first)


def _answer_first(fmt: ChatFormat, nine: bool) -> bool:
    """Whether the template refuses a user turn right after tool results, and takes it after an
    assistant answer."""
    call = _call("zqone", nine=nine)
    traffic: list[dict[str, Any]] = [_USER, {"role": "assistant", "content": "", "tool_calls": [call]},
               {"role": "tool", "tool_call_id": call["id"], "content": "zqout"}]
    again = {"role": "user", "content": "zqagain"}
    answered = _render(fmt, [*traffic, {"role": "assistant", "content": "zqanswer"}, again], gen=True)
    return _render(fmt, [*traffic, again], gen=True) is None and answered is not None and "zqagain" in answered


class Wrapped:
    """A format over another that changes what its render is given: what it does not define is
    the inner format's (source, object_arguments, dynamic...)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.inner, attribute)


class RuledFormat(Wrapped):
    """A format with the rewrites its rules need applied before rendering."""

    def __init__(self, inner: ChatFormat, rules: Rules) -> None:
        super().__init__(inner)
        self.rules = rules

    def render(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
               *, add_generation_prompt: bool = True) -> str:
        rules = self.rules
        rewritten = [self._rewrite(m) for m in messages] \
            if rules.single_call or rules.thinking_field or rules.nine_char_ids else list(messages)
        if rules.answer_before_user:
            rewritten = _answered(rewritten)
        if self.rules.needs_user and not any(m.get("role") == "user" for m in rewritten):
            at = next((i for i, m in enumerate(rewritten) if m.get("role") != "system"), len(rewritten))
            rewritten.insert(at, {"role": "user", "content": ""})
        return self.inner.render(rewritten, tools, add_generation_prompt=add_generation_prompt)

    def _rewrite(self, m: Mapping[str, Any]) -> Mapping[str, Any]:
        if self.rules.nine_char_ids:
            m = _nine_char_ids(m)
        if self.rules.thinking_field and m.get("reasoning_content") and "thinking" not in m:
            m = {**m, "thinking": m["reasoning_content"]}
            if m.get("tool_calls") and m.get("content"):  # harmony templates refuse both beside tool calls
                m = {**m, "thinking": f"{m['thinking']}\n\n{m['content']}", "content": ""}
        return self._single(m) if self.rules.single_call else m

    @staticmethod
    def _single(m: Mapping[str, Any]) -> Mapping[str, Any]:
        calls: Sequence[Any] = m.get("tool_calls") or ()
        if len(calls) < 2:
            return m
        extra = "\n".join("<tool_call>\n" + json.dumps({"name": c["function"]["name"],
                                                        "arguments": c["function"]["arguments"]},
                                                       ensure_ascii=False) + "\n</tool_call>"
                          for c in calls[1:])
        field = "thinking" if m.get("thinking") else "content"
        text = m.get(field) or ""
        return {**m, "tool_calls": [calls[0]], field: f"{text}\n{extra}" if text else extra}

    def for_server(self, messages: list[Mapping[str, Any]]) -> list[Mapping[str, Any]] | None:
        """The rewrites the server needs too (it refuses parallel calls on a one-call template, and
        ids that are not nine characters where the template asks for them); None when there are
        none. (The server copies reasoning into ``thinking`` itself.)"""
        single = self.rules.single_call and any(len(m.get("tool_calls") or ()) > 1 for m in messages)
        nine = self.rules.nine_char_ids and any(_nine_char_ids(m) is not m for m in messages)
        answered = _answered(messages) if self.rules.answer_before_user else messages
        if not (single or nine or answered is not messages):
            return None
        out = [_nine_char_ids(m) for m in answered] if nine else answered
        return [self._single(m) for m in out] if single else out


def _answered(messages: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """``messages`` with an empty assistant message between a tool result and a user message
    that follows it; the list itself where there is no such place."""
    at = [i for i in range(1, len(messages))
          if messages[i].get("role") == "user" and messages[i - 1].get("role") == "tool"]
    if not at:
        return messages
    out = list(messages)
    for i in reversed(at):
        out.insert(i, {"role": "assistant", "content": ""})
    return out


def _nine_char_ids(m: Mapping[str, Any]) -> Mapping[str, Any]:
    """``m`` with its call ids (or the id its result answers) mapped to 9 alphanumeric characters;
    ``m`` itself where they are such already."""
    calls: Sequence[Any] = m.get("tool_calls") or ()
    call_id = m.get("tool_call_id")
    if any(mistral_id(c.get("id") or "") != c.get("id") for c in calls):
        m = {**m, "tool_calls": [{**c, "id": mistral_id(c.get("id") or "")} for c in calls]}
    if isinstance(call_id, str) and mistral_id(call_id) != call_id:
        m = {**m, "tool_call_id": mistral_id(call_id)}
    return m


def apply(fmt: ChatFormat) -> tuple[ChatFormat, Rules]:
    rules = detect(fmt)
    return (RuledFormat(fmt, rules) if rules.rewrites else fmt), rules
