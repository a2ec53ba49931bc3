"""Published templates rendered in Python (``formats/native.py``) equal the template's own render,
or leave the conversation to the template: on generated conversations of every shape the template
reads, and on held-out agent sessions whole and in windows."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budgeter.core.messages import from_openai, to_template
from budgeter.tokenizers.formats import JinjaFormat, builtin_template, native, template_text
from budgeter.tokenizers.jinja import tojson
from tests.bench.peers import session

QWEN = template_text("qwen3.6")
FMT = builtin_template("qwen3.6")
TEMPLATE = FMT._template  # the compiled template alone, never the Python renderer


def jinja(messages: list[Any], tools: Any, generation: bool, variables: dict[str, Any]) -> str | None:
    try:
        return TEMPLATE.render(messages=messages, tools=tools, add_generation_prompt=generation, **variables)
    except Exception:
        return None


words = st.sampled_from(["", " ", "\n", "hi", "  x  ", "<think>", "</think>", "\n\n", "<tool_response>",
                         "</tool_response>", "ü 上", "{}", "a\tb", "\u2003", "None"])
texts = st.lists(words, max_size=5).map("".join)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False, width=32), texts)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(texts, inner, max_size=3)), max_leaves=6)
arguments = st.one_of(st.dictionaries(texts, values, max_size=4), texts, values)


@st.composite
def calls(draw: st.DrawFn) -> Any:
    fn: dict[str, Any] = {"name": draw(st.one_of(texts, st.none()))}
    if draw(st.booleans()):
        fn["arguments"] = draw(arguments)
    return {"id": "c", "type": "function", "function": fn} if draw(st.booleans()) else fn


@st.composite
def messages(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(st.sampled_from(["system", "user", "assistant", "tool", "user", "assistant", "tool", "developer"]))
    m: dict[str, Any] = {"role": role}
    content = draw(st.one_of(texts, texts, texts, st.none(), st.just([{"type": "text", "text": "part"}])))
    if draw(st.integers(0, 9)):
        m["content"] = content
    if role == "assistant":
        if draw(st.booleans()):
            m["reasoning_content"] = draw(st.one_of(texts, st.none()))
        if draw(st.booleans()):
            m["tool_calls"] = draw(st.lists(calls(), max_size=3))
    if role == "tool":
        m["tool_call_id"] = "c"
    return m


openings = st.sampled_from([[], [{"role": "user", "content": "q"}],
                             [{"role": "system", "content": " s "}, {"role": "user", "content": "q"}]])
chats = st.tuples(openings, st.lists(messages(), max_size=7)).map(lambda parts: [*parts[0], *parts[1]])
tools = st.one_of(st.none(), st.just([]), st.lists(st.fixed_dictionaries(
    {"type": st.just("function"), "function": st.fixed_dictionaries({"name": texts, "parameters": values})}),
    min_size=1, max_size=2))
variables = st.fixed_dictionaries({}, optional={"enable_thinking": st.one_of(st.booleans(), st.none()),
                                                "preserve_thinking": st.one_of(st.booleans(), st.none())})


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chats, tools, st.booleans(), variables)
def test_equals_the_template_or_leaves_it_to_the_template(chat: list[Any], schemas: Any, generation: bool,
                                                          extra: dict[str, Any]) -> None:
    got = native.qwen36(chat, schemas, generation, extra, tojson)
    if got is not None:
        assert got == jinja(chat, schemas, generation, extra)


def test_renders_the_plain_conversations_itself() -> None:
    """Not a renderer that declines everything: agent conversations of every role are its own."""
    chat = [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "read a.py"},
            {"role": "assistant", "content": "<think>\nwhy\n</think>\n\nsure", "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "read", "arguments": {
                    "path": "a.py", "n": 2, "deep": {"k": [1, None, True]}, "ok": False, "f": 1.5}}}]},
            {"role": "tool", "tool_call_id": "1", "content": "print(1)\n"},
            {"role": "tool", "tool_call_id": "1", "content": "again"},
            {"role": "assistant", "content": "done", "reasoning_content": " r "}]
    schemas = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]
    for generation in (True, False):
        for extra in ({}, {"enable_thinking": False}, {"preserve_thinking": True}):
            for tools_given in (schemas, None):
                got = native.qwen36(chat, tools_given, generation, extra, tojson)
                assert got is not None and got == jinja(chat, tools_given, generation, extra)


def held_out_windows() -> Any:
    """Held-out agent sessions as a template gets them, whole up to each third message and in
    windows of the last six behind the first: (messages, tools) each."""
    for seed in (200, 201, 202):
        body = session(seed, 60_000)
        dicts = [to_template(from_openai(m, index=i)) for i, m in enumerate(body["messages"])]
        for end in range(2, len(dicts) + 1, 3):
            for part in (dicts[:end], [dicts[0], *dicts[max(1, end - 6):end]]):
                yield part, body["tools"]


def renders_as_the_template(pairs: Any) -> int:
    """Each (Python render, template render) equal, or both None; how many rendered."""
    rendered = 0
    for got, want in pairs:
        assert got == want
        rendered += want is not None
    return rendered


def test_held_out_sessions_whole_and_in_windows() -> None:
    assert renders_as_the_template(
        (native.qwen36(part, tools, True, {}, tojson), jinja(part, tools, True, {}))
        for part, tools in held_out_windows()) > 50


def test_only_the_published_source_gets_a_renderer() -> None:
    assert FMT.native is native.qwen36
    assert native.for_template(QWEN + "\n") is None
    assert JinjaFormat(QWEN.replace("<tools>", "<tool-list>"), name="edited").native is None


def test_a_renderer_that_differs_is_turned_off_and_the_template_renders() -> None:
    fmt = builtin_template("qwen3.6")
    chat = [{"role": "user", "content": "hi"}]
    fmt.native = lambda *args: "not what the template says"  # a renderer gone wrong
    assert fmt.render(chat, None) == jinja(chat, None, True, {})
    assert fmt.native is None and "differed" in fmt.native_off
    assert fmt.render(chat, None) == jinja(chat, None, True, {})


def test_a_conversation_the_template_refuses_is_still_refused() -> None:
    import pytest

    from budgeter.errors import TemplateError

    with pytest.raises(TemplateError, match="No user query"):
        FMT.render([{"role": "assistant", "content": "x"}], None)
    with pytest.raises(TemplateError, match="System message must be at the beginning"):
        FMT.render([{"role": "user", "content": "x"}, {"role": "system", "content": "late"}], None)


def test_the_tools_block_follows_the_list_it_is_given() -> None:
    """The block is kept per list of schemas, and made again when the list holds other ones."""
    chat = [{"role": "user", "content": "q"}]
    schemas = [{"type": "function", "function": {"name": "a", "parameters": {}}}]
    first = native.qwen36(chat, schemas, True, {}, tojson)
    assert first == jinja(chat, schemas, True, {})
    schemas.append({"type": "function", "function": {"name": "b", "parameters": {}}})
    schemas[0] = {"type": "function", "function": {"name": "c", "parameters": {}}}
    again = native.qwen36(chat, schemas, True, {}, tojson)
    assert again == jinja(chat, schemas, True, {}) and again != first


def test_a_profile_whose_renderer_was_turned_off_says_so(tmp_path: Any) -> None:
    from budgeter.tokenizers.registry import resolve

    template = tmp_path / "qwen3.6.jinja"  # the published text from a file: a profile of its own
    template.write_text(QWEN, encoding="utf-8")
    counter = resolve("qwen3.6", chat_format=str(template))
    fmt = counter.format  # type: ignore[attr-defined]
    while getattr(fmt, "inner", None) is not None:
        fmt = fmt.inner
    assert fmt.native is native.qwen36 and not any("template itself" in n for n in counter.notes)
    fmt.native = lambda *args: "not what the template says"
    counter.count_prompt([from_openai({"role": "user", "content": "hi"}, index=0)], [])
    assert any("renders: the template itself" in n and "differed" in n for n in counter.notes)


# -- Gemma 3 (``native.gemma3``) ----------------------------------------------------------------

GEMMA = builtin_template("gemma3", variables={"bos_token": "<bos>"})
GEMMA_TEMPLATE = GEMMA._template


def gemma_jinja(messages: list[Any], generation: bool, variables: dict[str, Any]) -> str | None:
    try:
        return GEMMA_TEMPLATE.render(messages=messages, tools=None, add_generation_prompt=generation, **variables)
    except Exception:
        return None


@st.composite
def gemma_chats(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Mostly conversations that alternate (the template raises on the rest), of every content type
    and role it may meet."""
    out: list[dict[str, Any]] = []
    if draw(st.booleans()):
        out.append({"role": "system", "content": draw(st.one_of(texts, st.none(), st.just([{"type": "text",
                                                                                              "text": " s "}])))})
    for i in range(draw(st.integers(0, 6))):
        role = draw(st.sampled_from(["user" if i % 2 == 0 else "assistant"] * 6 + ["model", "tool", "system", "user"]))
        m: dict[str, Any] = {"role": role}
        if draw(st.integers(0, 9)):
            m["content"] = draw(st.one_of(texts, texts, texts, st.none(), st.integers(0, 3),
                                          st.just([{"type": "text", "text": " part "}, {"type": "image"}])))
        if role == "assistant" and draw(st.booleans()):
            m["tool_calls"] = draw(st.lists(calls(), max_size=2))
        out.append(m)
    return out


gemma_variables = st.one_of(*[st.just({"bos_token": "<bos>"})] * 4, st.fixed_dictionaries(
    {}, optional={"bos_token": st.one_of(texts, st.none())}))


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gemma_chats(), tools, st.booleans(), gemma_variables)
def test_gemma3_equals_the_template_or_leaves_it_to_the_template(chat: list[Any], schemas: Any, generation: bool,
                                                                 extra: dict[str, Any]) -> None:
    got = native.gemma3(chat, schemas, generation, extra, tojson)
    if got is not None:
        assert got == gemma_jinja(chat, generation, extra)


def test_gemma3_renders_the_plain_conversations_itself() -> None:
    chat = [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": " read a.py\n"},
            {"role": "assistant", "content": "<tool_call>\n{}\n</tool_call>", "tool_calls": [{"name": "read"}]},
            {"role": "user", "content": "<tool_response>\nprint(1)\n</tool_response>"},
            {"role": "assistant"}]
    for generation in (True, False):
        for chosen in (chat, chat[1:], chat[:1]):
            got = native.gemma3(chosen, None, generation, {"bos_token": "<bos>"}, tojson)
            assert got is not None and got == gemma_jinja(chosen, generation, {"bos_token": "<bos>"})


def test_gemma3_held_out_sessions_rewritten_for_its_template_whole_and_in_windows() -> None:
    """The conversations a Gemma 3 profile renders: held-out agent sessions after the rewrite its
    template needs (tools and calls as text, results as user turns, runs merged)."""
    from budgeter.core.fallback import adapter, probe

    adapt = adapter(probe(GEMMA))
    assert adapt is not None
    bos = {"bos_token": "<bos>"}
    adapted = (adapt(part, tools) for part, tools in held_out_windows())
    assert renders_as_the_template(
        (native.gemma3(messages, rest or None, True, bos, tojson), gemma_jinja(messages, True, bos))
        for messages, rest in adapted) > 50


def test_gemma3_only_the_published_source_gets_its_renderer() -> None:
    assert GEMMA.native is native.gemma3
    source = template_text("gemma3")
    assert native.for_template(source.replace("<start_of_turn>", "<start_of_turn> ")) is None
    assert JinjaFormat(source + "\n", name="edited").native is None
