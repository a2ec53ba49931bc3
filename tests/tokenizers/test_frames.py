"""Lone renders made from frames (budgeter/core/frames.py) equal the template's own render."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgeter.core.frames import Frames
from budgeter.core.messages import Message, ToolCall, from_openai_list, to_template
from budgeter.tokenizers import resolve
from budgeter.tokenizers.formats import JinjaFormat
from tests.bench.sessions import make_session


def _plain(fmt, d):
    try:
        return fmt.render([d], None, add_generation_prompt=False)
    except Exception:
        return None


def _frames(fmt) -> Frames:
    traced = fmt.tracing()
    assert traced is not None
    return Frames(lambda dicts, tools, gen: traced.render(dicts, tools, add_generation_prompt=gen))


_TEXT = st.one_of(
    st.sampled_from(["", " ", "\n", "  lead", "trail \n", "plain", "<think>\nr\n</think>\n\nanswer", "a </think> b",
                     "<tool_response>\nx\n</tool_response>", "<tool_response>", "<|im_start|>user", "<|im_end|>",
                     "x", "zq7tr0q", "{\"a\": 1}", "  <think>x</think>  ", "你好 🙂", "\t\ttabs\t"]),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40),
)
_ARG = st.one_of(_TEXT, st.integers(-5, 5), st.booleans(), st.none(), st.floats(allow_nan=False, width=16),
                 st.lists(_TEXT, max_size=2), st.dictionaries(st.sampled_from(["k", "v"]), _TEXT, max_size=2))


@st.composite
def _messages(draw) -> Message:
    role = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
    content = draw(_TEXT)
    if role == "tool":
        return Message("tool", content, tool_call_id=draw(st.sampled_from(["call_1", "x", None])),
                       status=None)
    if role == "assistant":
        calls = tuple(ToolCall(draw(st.sampled_from(["call_1", "c2"])), draw(st.sampled_from(["read_file", "run", ""])),
                               json.dumps(draw(st.dictionaries(st.sampled_from(["path", "command", "n"]), _ARG,
                                                               max_size=3)), ensure_ascii=False)
                               if draw(st.booleans()) else draw(st.sampled_from(["{\"path\": \"a", "not json"])))
                      for _ in range(draw(st.integers(0, 2))))
        reasoning = draw(st.one_of(st.none(), _TEXT))
        return Message("assistant", content, tool_calls=calls, reasoning=reasoning)
    return Message(role, content, name=draw(st.sampled_from([None, "bob"])) if role == "user" else None)


@pytest.fixture(scope="module", params=["qwen3.6", "qwen2.5", "shared:qwen3"])
def fmt(request, qwen3_path):
    counter = resolve(qwen3_path if request.param == "shared:qwen3" else request.param)
    return counter.format


@settings(max_examples=300, deadline=None)
@given(st.lists(_messages(), min_size=1, max_size=12))
def test_frames_render_what_the_template_renders(fmt, messages):
    """Messages in any order, with the shapes and texts templates branch on (whitespace at the
    ends, empty text, reasoning markers, tool-response wrappers, special tokens, calls whose
    arguments are objects of every JSON type or not JSON at all): whatever a frame renders is the
    template's render of the message alone, byte for byte."""
    frames = _frames(fmt)
    for m in messages + messages:  # the second time, every shape has a frame (or none)
        d = to_template(m)
        framed = frames.text(d)
        if framed is not None:
            assert framed == _plain(fmt, d)


def test_frames_render_most_messages_of_a_session(qwen3_path):
    """A generated coding session's messages: most are made from a frame, and each is the
    template's render; the template ran about twice per shape, not once per message."""
    for spec in ("qwen3.6", qwen3_path):
        counter = resolve(spec)
        frames = _frames(counter.format)
        messages = from_openai_list(make_session(11, chars=120_000)["messages"])
        framed = 0
        for m in messages:
            d = to_template(m)
            text = frames.text(d)
            if text is not None:
                framed += 1
                assert text == _plain(counter.format, d)
        # (the Qwen3 folder's template serializes call arguments with tojson: calls render by it)
        assert framed >= len(messages) * 0.45 and len(frames._frames) < len(messages) / 3, (spec, framed)


def test_lone_costs_come_from_frames_and_equal_the_templates(qwen36):
    """The built-in Qwen3.6 profile prices appended messages from frames: each cost is the count
    of the template's own render of the message alone."""
    from budgeter.core.counting import TemplateCounter

    counter = resolve("qwen3.6")
    assert isinstance(counter, TemplateCounter) and counter.frames is not None
    messages = from_openai_list(make_session(12, chars=40_000)["messages"])
    before = counter.frames.framed
    for m in messages:
        assert counter.message_cost(m) == counter.pieces.count(_plain(counter.format, to_template(m)))
    assert counter.frames.framed - before >= len(messages) // 2


def test_lone_renders_of_a_rewritten_profile_come_from_frames(llama3_path):
    """A profile whose template takes the fallback rewrite (the Llama 3 folder's) frames each
    message as rewritten: every lone render is the template's own render of the rewritten message,
    and most come from a frame."""
    counter = resolve(llama3_path)
    assert counter.adapter is not None and counter.frames is not None
    messages = from_openai_list(make_session(13, chars=40_000)["messages"])
    before = counter.frames.framed
    for m in messages:
        dicts, _ = counter.adapter([to_template(m)], ())
        try:
            plain = counter.format.render(dicts, None, add_generation_prompt=False)
        except Exception:
            plain = None
        assert counter._isolated_text(m) == plain
    assert counter.frames.framed - before >= len(messages) // 2


_REFUSED = {
    "length": "{{ message.content|length }}",
    "wordcount": "{{ message.content|wordcount }}",
    "in a literal": "{% if message.content in 'abc x y' %}IN{% endif %}{{ message.content }}",
    "literal method": "{% if 'abcx'.startswith(message.content) %}S{% endif %}{{ message.content }}",
    "tilde": "{{ (message.content ~ '')|length }}",
    "tojson length": "{{ message.content|tojson|length }}",
    "slice": "{{ message.content[:2] }}",
    "upper": "{{ message.content|upper }}",
    "split": "{{ message.content.split()|length }}",
    "loop": "{% for c in message.content %}[{{ c }}]{% endfor %}",
    "repeat": "{{ message.content * 2 }}",
    "replace": "{{ message.content|replace('a', 'b') }}",
    "format": "{{ '%s!'|format(message.content) }}",
    "tilde out": "{{ message.content ~ '!' }}",
    "join": "{{ [message.content, 'z']|join(',') }}",
    "int": "{{ message.content|int }}",
    "escape": "{{ message.content|escape }}",
    "striptags": "{{ message.content|striptags }}",
    "indent": "{{ message.content|indent(2, true) }}",
    "dict key": "{% set d = {message.content: 1} %}{{ d|length }}",
    "equal": "{% if message.content == 'x' %}X{% else %}{{ message.content }}{% endif %}",
    "trim length": "{{ message.content|trim|length }}",
    "endswith": "{% if message.content.endswith('z') %}Z{% endif %}{{ message.content }}",
    "truth": "{% if message.content|trim %}T{% else %}F{% endif %}:{{ message.content }}",
    "contains": "{% if '</think>' in message.content %}R{% endif %}{{ message.content|trim }}",
    "tool call id": "{{ message.tool_call_id }}|{{ message.content }}",
}


@pytest.mark.parametrize("name", list(_REFUSED))
def test_what_a_frame_cannot_reproduce_is_rendered_by_the_template(name):
    """A template that reads a field in a way a frame does not model (its length, words, a
    slice, a method, a filter, a copy made in C) or that tests it (answered as guards): every
    message renders exactly as the template renders it, from a frame where one applies."""
    src = "{% for message in messages %}" + _REFUSED[name] + "{% endfor %}"
    fmt = JinjaFormat(src, name=name)
    traced = fmt.tracing()
    if traced is None:  # (x in "literal": refused on the template's syntax)
        assert name == "in a literal"
        return
    frames = Frames(lambda dicts, tools, gen: traced.render(dicts, tools, add_generation_prompt=gen))
    texts = ["abc", "x", "zz", "a b c", "  pad ", "", "\n", "7", "2.5", "<b>t</b>", "é", "abcz", "q </think> r"]
    framed = 0
    for _ in range(2):
        for t in texts:
            d = {"role": "tool", "content": t, "tool_call_id": "id" + t[:1]}
            got = frames.text(d)
            if got is not None:
                framed += bool(t)  # (an empty text is part of the shape: no stand-in, always framed)
                assert got == _plain(fmt, d), (name, t)
    # a length is a guard of the exact length (no text here has the stand-in's)
    modeled = name in ("equal", "endswith", "truth", "contains", "tool call id")
    assert (framed > 0) == modeled, (name, framed)


def test_a_framed_render_that_differs_turns_frames_off():
    """The audit: a frame that renders otherwise than the template (here, tampered with) is
    caught at the next audited render, which answers the template's text; frames stay off."""
    fmt = resolve("qwen2.5").format
    frames = Frames(_frames(fmt)._render, audit=lambda dicts, tools, gen: _plain(fmt, dicts[0]), audit_every=3)
    d = to_template(Message("user", "hello"))
    assert frames.text(d) is None  # a shape met once is rendered by the template; traced the second time
    assert frames.text(d) == _plain(fmt, d)
    (shape, (node, guards)), = frames._frames.items()
    frames._frames[shape] = ("tampered", guards)
    answers = [frames.text(to_template(Message("user", f"hi {i}"))) for i in range(3)]
    assert answers == ["tampered", _plain(fmt, to_template(Message("user", "hi 1"))), None]
    assert frames.off and frames.text(d) is None


def test_numbers_equal_in_python_but_rendered_apart_have_shapes_of_their_own():
    """1 and True, 0.0 and -0.0 are equal as Python values but a template renders them apart:
    each is part of its message's shape, so neither is rendered from the other's frame."""
    fmt = resolve("qwen3.6").format
    frames = _frames(fmt)
    for value in (0.0, -0.0, 1, True, 1.0, None, 0, False):
        m = Message("assistant", "", tool_calls=(ToolCall("c1", "run", json.dumps({"n": value})),))
        d = to_template(m)
        assert frames.text(d) is None and frames.text(d) == _plain(fmt, d), value
    assert len(frames._frames) == 8


_TOOLS = [None, [{"type": "function", "function": {"name": "read_file", "description": "Read a file.",
                                                    "parameters": {"type": "object", "properties": {
                                                        "path": {"type": "string"}}}}}]]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_messages(), min_size=1, max_size=6), min_size=1, max_size=4),
       st.sampled_from([0, 1]), st.booleans())
def test_framed_windows_render_what_the_template_renders(fmt, conversations, tools, gen):
    """Lists of messages with the tools or none, with the generation prompt or not, each list
    twice: a framed render equals the template's. (Builds render windows by the template: framed,
    they measured no faster, their shapes coming back too seldom for the traces to pay.)"""
    frames = _frames(fmt)
    for dicts in [[to_template(m) for m in c] for c in conversations] * 2:
        framed = frames.render(dicts, _TOOLS[tools], tools, gen)
        if framed is not None:
            try:
                plain = fmt.render(dicts, _TOOLS[tools], add_generation_prompt=gen)
            except Exception:
                plain = None
            assert framed == plain
