"""Windowed rendering: a prompt that extends the previous one renders only its tail, and the count
and text it reports are those of the full render on every build (hypothesis), or it renders in
full where a template makes the window unsafe."""

from __future__ import annotations

import json
import shutil
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budgeter.core.counting import shared_prefix
from budgeter.core.engine import Engine
from budgeter.core.messages import Message, ToolCall
from budgeter.core.policy import Policy
from budgeter.errors import PinnedOverBudget
from budgeter.tokenizers.registry import resolve

TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]


@st.composite
def units(draw, n: int) -> list[Message]:
    """One turn: an assistant call (maybe two, maybe with reasoning) and its results, a plain
    answer, a user message, or a system message after the first (which templates that take one
    only at the start get as a user message)."""
    kind = draw(st.sampled_from(["call", "call", "call", "two", "answer", "user", "think", "system"]))
    text = draw(st.text(alphabet="abc xyz\n{}\"上🙂", min_size=0, max_size=40))
    reasoning = draw(st.sampled_from(["", "", "let me think"]))
    if kind == "user":
        return [Message("user", f"follow up {text}")]
    if kind == "system":
        return [Message("system", f"new rule {text}")]
    if kind == "answer":
        return [Message("assistant", f"done {text}", reasoning=reasoning or None)]
    if kind == "think":
        return [Message("assistant", f"<think>\nplan {text}\n</think>\n\nok")]
    calls = [ToolCall(f"c{n}_{k}", "read_file", json.dumps({"path": f"a{k}.py"})) for k in range(1 + (kind == "two"))]
    return [Message("assistant", text, tool_calls=tuple(calls), reasoning=reasoning or None),
            *[Message("tool", f"result {k} {text}" * draw(st.integers(1, 30)), tool_call_id=c.id)
              for k, c in enumerate(calls)]]


@st.composite
def conversations(draw) -> list[list[Message]]:
    head = [Message("system", "You are careful."), Message("user", "Build it.")]
    return [head, *[draw(units(n)) for n in range(draw(st.integers(3, 14)))]]


def _replay(counter, turns: list[list[Message]], window: int) -> None:
    counter.windowed.audit_every = 10**9  # no audit: a wrong window must show here, not be repaired
    session = Engine(counter, policy=Policy(window=window, reserve=256), tools=TOOLS)
    previous = ""
    received = session._received_memo
    for turn in turns:
        session.append(turn)
        rendered = received.builds
        try:
            result = session.build()
        except PinnedOverBudget:  # the newest turns alone exceed a tiny window: nothing to compare
            return
        full, text = counter.count_rendered(list(result.messages), TOOLS)
        assert (result.tokens, session._memo.text) == (full, text)
        if received.builds > rendered:  # the history as received, rendered with a memo that keeps its tail
            whole, history_text = counter.count_rendered(list(session.history), TOOLS)
            assert result.tokens_before == whole
            assert received.base + len(received.text) == len(history_text)
            assert history_text.endswith(received.text)
        # what a server can reuse equals a plain comparison
        reusable = full - counter.tokens_after(text, shared_prefix(previous, text)) if previous else 0
        assert result.cache_break_tokens == reusable
        previous = text
    assert not counter.windowed.off


PROFILES = ["qwen3.6", "qwen2.5"]


@pytest.fixture(scope="module", params=PROFILES + ["chatml", "gemma3", "shared:qwen3", "shared:llama3_1"])
def counter(request, tiny_bpe_path, tmp_path_factory):
    if request.param in PROFILES:
        return resolve(request.param)
    if request.param.startswith("shared:"):
        from tests.conftest import shared_tokenizer

        return resolve(shared_tokenizer(request.param.removeprefix("shared:")))
    folder = tmp_path_factory.mktemp(request.param)
    shutil.copy(tiny_bpe_path, folder / "tokenizer.json")
    (folder / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<bos>", "eos_token": "<eos>"}))
    return resolve(str(folder), chat_format=request.param)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(conversations(), st.sampled_from([1200, 100_000]))
def test_windowed_count_and_text_equal_the_full_render(counter, turns, window):
    _replay(counter, turns, window)


def test_most_turns_of_an_agent_session_render_only_a_window(counter):
    """Most builds that only append tool traffic (no compaction, no user message, this turn or the
    last) once the conversation is long enough render a window; a fold of retries or a change
    further back than the anchors reach renders in full."""
    from budgeter.core.incremental import MIN_MESSAGES
    from budgeter.core.messages import from_openai
    from tests.bench.bench_service import turns as split
    from tests.bench.sessions import make_session

    body = make_session(2, chars=300_000)
    session = Engine(counter, policy=Policy(), tools=body["tools"])
    plain, windowed, previous_plain = 0, 0, False
    for turn in split(body["messages"]):
        before = counter.windowed.windowed
        session.append([from_openai(m) for m in turn])
        result = session.build()
        assert result.tokens == counter.count_prompt(list(result.messages), body["tools"])
        now_plain = not result.compacted and turn[0]["role"] != "user" and len(session.history) > MIN_MESSAGES
        if now_plain and previous_plain:
            plain += 1
            windowed += counter.windowed.windowed > before
        previous_plain = now_plain
    assert plain > 10 and windowed >= 0.8 * plain, (windowed, plain)
    # the history's render keeps only the text a window can reach, not the whole history's
    received = session._received_memo
    if received.builds and result.compacted is False and received.base:
        assert len(received.text) < len(counter.render(list(session.history), body["tools"])) / 2


def test_the_history_takes_the_prompts_window_when_it_is_the_same():
    """Once the prompt is compacted, the history as received is rendered too; where its window
    (head, messages, tools) is the prompt's of the same build it is not rendered again, and the
    history's count stays the full render's."""
    from budgeter.core.messages import from_openai
    from tests.bench.bench_service import turns as split
    from tests.bench.sessions import make_session

    counter = resolve("qwen3.6")
    body = make_session(3, chars=200_000)
    session = Engine(counter, policy=Policy(window=16_000, reserve=512), tools=body["tools"])
    received, rendered, taken = session._received_memo, 0, 0
    for turn in split(body["messages"]):
        session.append([from_openai(m) for m in turn])
        builds = received.builds
        windows = counter.windowed.windowed
        result = session.build()
        if received.builds == builds:  # the prompt was the history itself: nothing rendered
            continue
        rendered += 1
        shared = received.window is not None and received.window is session._memo.window
        if shared:
            taken += 1
            assert counter.windowed.windowed == windows + 2  # the prompt's window and the history's
            assert result.tokens_before == counter.count_prompt(list(session.history), body["tools"])
    assert rendered > 20 and taken >= rendered // 4, (taken, rendered)


def _audits(monkeypatch, audit_chars: int) -> tuple[int, int, int]:
    """(audits of the history as received, audits of the prompt, builds that rendered the history)
    over a session whose prompt is compacted, with audits every 4 builds and ``AUDIT_CHARS`` =
    ``audit_chars``."""
    from budgeter.core import incremental
    from budgeter.core.messages import from_openai
    from tests.bench.bench_service import turns as split
    from tests.bench.peers import session as held_out

    counter = resolve("qwen3.6")
    monkeypatch.setattr(counter.windowed, "audit_every", 4)
    monkeypatch.setattr(incremental, "AUDIT_CHARS", audit_chars, raising=False)
    body = held_out(201, 300_000)
    session = Engine(counter, policy=Policy(window=16_000, reserve=512), tools=body["tools"])
    render = counter.format.render
    audits, built = {True: 0, False: 0}, 0

    def counted(dicts, tools, *, add_generation_prompt=True):
        frame = sys._getframe(1)
        while frame is not None and frame.f_code is not incremental.render.__code__:
            frame = frame.f_back
        if frame is not None and frame.f_locals.get("got") is not None:  # a whole render after a window
            audits[frame.f_locals["memo"].tail] += 1
        return render(dicts, tools, add_generation_prompt=add_generation_prompt)

    monkeypatch.setattr(counter.format, "render", counted)
    received = session._received_memo
    for turn in split(body["messages"]):
        session.append([from_openai(m) for m in turn])
        builds = received.builds
        result = session.build()
        if received.builds > builds:
            built += 1
            if received.builds % 5 == 0:  # its count stays the full render's
                assert result.tokens_before == counter.count_prompt(list(session.history), body["tools"])
    monkeypatch.undo()
    return audits[True], audits[False], built


def test_a_long_history_as_received_is_audited_as_often_per_character_as_a_prompt(monkeypatch):
    """The prompt is audited every ``audit_every`` builds at any size; the history as received
    (up to 300K characters here) every ``audit_every`` builds per ``AUDIT_CHARS`` of its text."""
    every_build, prompt, built = _audits(monkeypatch, 1 << 40)  # as often as a prompt
    per_chars, prompt_then, _ = _audits(monkeypatch, 20_000)
    assert built > 30 and every_build >= built // 4 - 1, (every_build, built)
    assert 1 <= per_chars <= every_build // 2, (per_chars, every_build)
    assert prompt == prompt_then > 0  # the prompt's audits are as they were


def test_a_full_render_leaves_finding_its_anchors_to_the_next_build():
    """The build that renders in full (a compacting build, the slowest of a session) does not
    look for the next turn's anchors; the next build finds them, renders a window, and both
    counts are the full render's."""
    counter = resolve("qwen3.6")
    session = Engine(counter, policy=Policy(), tools=TOOLS)

    def turn(n: int) -> list[Message]:
        call = ToolCall(f"c{n}", "read_file", json.dumps({"path": f"a{n}.py"}))
        return [Message("assistant", f"reading {n}", tool_calls=(call,)),
                Message("tool", f"contents of a{n}.py\n" * 20, tool_call_id=call.id)]

    session.append([Message("system", "You are careful."), Message("user", "Build it."),
                    *[m for n in range(6) for m in turn(n)]])
    full, windowed = counter.windowed.full, counter.windowed.windowed
    result = session.build()  # the first build: rendered in full
    assert counter.windowed.full == full + 1
    assert session._memo.pending and not session._memo.anchors
    assert result.tokens == counter.count_prompt(list(result.messages), TOOLS)
    session.append(turn(6))
    result = session.build()
    assert counter.windowed.windowed == windowed + 1 and not session._memo.pending
    assert result.tokens == counter.count_prompt(list(result.messages), TOOLS)


def test_a_template_that_numbers_messages_stays_exact(tiny_bpe_path, tmp_path):
    """A window renders ``loop.index`` from its own start: the overlap check sees that the numbers
    differ from the previous text and renders in full (a window is kept only where its numbers
    happen to agree); every count and text equals the full render's."""
    shutil.copy(tiny_bpe_path, tmp_path / "tokenizer.json")
    template = "{% for m in messages %}#{{ loop.index }} {{ m.role }}: {{ m.content }}\n{% endfor %}" \
               "{% if add_generation_prompt %}#next assistant:{% endif %}"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    counter = resolve(str(tmp_path))
    turns = [[Message("system", "s"), Message("user", "u")]] + [
        [Message("assistant", f"a{i}", tool_calls=(ToolCall(f"c{i}", "read_file", "{}"),)),
         Message("tool", f"r{i}", tool_call_id=f"c{i}")] for i in range(6)]
    _replay(counter, turns, 100_000)
    assert counter.windowed.full > counter.windowed.windowed


def test_a_new_day_renders_whole_and_a_clock_template_never_windows(tiny_bpe_path):
    """The date a template reads sits before any window: when it changes, the build renders whole
    (the count follows the new date); a template that reads the clock renders whole every time."""
    from budgeter.core.counting import TemplateCounter
    from budgeter.tokenizers.backends import HFTokenizer
    from budgeter.tokenizers.formats import JinjaFormat

    day = ["1 Jan 2026"]
    template = ("{{ 'Today is ' + date_string + '\\n' }}{% for m in messages %}<|im_start|>{{ m.role }}\\n"
                "{{ m.content }}<|im_end|>\\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\\n"
                "{% endif %}")
    fmt = JinjaFormat(template, name="dated", dynamic={"date_string": lambda: day[0]})
    counter = TemplateCounter(fmt, HFTokenizer.from_file(tiny_bpe_path, name="tiny"), name="dated")
    session = Engine(counter, policy=Policy(), tools=())
    session.append([Message("system", "s"), Message("user", "u")])  # one user turn: the head stays

    def turn(i: int) -> list[Message]:
        return [Message("assistant", "", tool_calls=(ToolCall(f"c{i}", "read_file", "{}"),)),
                Message("tool", f"result {i}", tool_call_id=f"c{i}")]

    for i in range(12):
        session.append(turn(i))
        result = session.build()
    assert counter.windowed.windowed > 0
    day[0] = "22 November 2026"
    session.append(turn(12))
    result = session.build()
    full, text = counter.count_rendered(list(result.messages), ())
    assert result.tokens == full and session._memo.text == text and "22 November 2026" in text
    windowed = counter.windowed.windowed
    for i in range(13, 16):  # and the next turns of the new day use windows again
        session.append(turn(i))
        result = session.build()
        assert result.tokens == counter.count_prompt(list(result.messages), ())
    assert counter.windowed.windowed > windowed

    clock = JinjaFormat("{{ strftime_now('%H:%M:%S') }}" + template.split("}}", 1)[1], name="clock")
    assert TemplateCounter(clock, HFTokenizer.from_file(tiny_bpe_path, name="tiny"), name="clock").windowed.off


def test_the_report_says_when_windows_are_off(tiny_bpe_path):
    from budgeter.core.counting import TemplateCounter
    from budgeter.tokenizers.backends import HFTokenizer
    from budgeter.tokenizers.formats import JinjaFormat

    clock = JinjaFormat("{{ strftime_now('%H') }}{% for m in messages %}{{ m.content }}{% endfor %}", name="clock")
    counter = TemplateCounter(clock, HFTokenizer.from_file(tiny_bpe_path, name="tiny"), name="clock")
    session = Engine(counter, policy=Policy(), tools=())
    session.append([Message("user", "u")])
    assert any("every build whole" in n and "strftime_now" in n for n in session.build().notes)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=12), st.lists(st.integers(0, 3), max_size=12), st.data())
def test_common_length_counts_the_leading_items_equal_or_the_same(a, b, data):
    """Items are the same object, or equal but other objects (a message rebuilt alike), or not
    equal: the count is where they first differ, whichever the first non-identical item is."""
    from budgeter.core.incremental import common_length

    pool = {k: [k * 10] for k in range(4)}  # each value one object; an equal copy where drawn
    left = tuple(pool[k] if data.draw(st.booleans()) else [k * 10] for k in a)
    right = tuple(pool[k] if data.draw(st.booleans()) else [k * 10] for k in b)
    expect = next((i for i, (x, y) in enumerate(zip(left, right, strict=False)) if x != y), min(len(a), len(b)))
    assert common_length(left, right) == expect
