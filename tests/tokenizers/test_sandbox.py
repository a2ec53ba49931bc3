"""The chat-template sandbox keeps its refusals where budgeter skips its fixed checks (str
methods, macros, the namespace class, dict keys, loop attributes)."""

from __future__ import annotations

import pytest

from budgeter.errors import TemplateError
from budgeter.tokenizers.formats import JinjaFormat

MESSAGES = [{"role": "user", "content": "  hi  "}]


def render(source: str) -> str:
    return JinjaFormat(source, name="probe").render(MESSAGES, None, add_generation_prompt=False)


def test_fast_paths_render_as_the_sandbox_does():
    source = ("{%- macro m(x) %}[{{ x }}]{% endmacro %}{%- set ns = namespace(n=0, last='') %}"
              "{%- for message in messages %}{%- set ns.n = ns.n + 1 %}{%- set ns.last = message.role %}"
              "{{ m(message.content.strip()) }}{{ loop.first }}{%- endfor %}{{ ns.n }}{{ ns.last }}")
    assert render(source) == transformers_render(source) == "[hi]True1user"


def transformers_render(source: str) -> str:
    from transformers.utils.chat_template_utils import _compile_jinja_template

    compile_ = getattr(_compile_jinja_template, "__wrapped__", _compile_jinja_template)
    return compile_(source).render(messages=MESSAGES, tools=None, add_generation_prompt=False)


@pytest.mark.parametrize("source", [
    "{{ '{0.__class__}'.format(messages) }}",           # str.format stays with the sandbox
    "{{ messages[0].__class__.__mro__ }}",              # underscore attributes
    "{% set ns = namespace(_private=1) %}{{ ns._private }}",  # transformers' namespace refuses these
    "{{ messages.append(1) }}",                         # a mutating method of a list
])
def test_what_the_sandbox_refuses_is_still_refused(source):
    """Refused as transformers' own compiled template refuses it: an error, or nothing shown."""
    try:
        expected = transformers_render(source)
    except Exception:
        with pytest.raises(TemplateError):
            render(source)
    else:
        assert render(source) == expected == ""
    assert MESSAGES == [{"role": "user", "content": "  hi  "}]


CONVERSATION = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": " hi "},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "read", "arguments": {"path": "a.py", "n": 2}}}]},
    {"role": "tool", "content": "ok", "tool_call_id": "c1"},
]


@pytest.mark.parametrize("source", [
    # macros called directly: defaults for arguments left out, and the ones that go through Macro
    "{%- macro m(x, y=7, z=none) %}[{{ x }}|{{ y }}|{{ z is none }}]{% endmacro %}"
    "{%- for message in messages %}{{ m(message.role) }}{{ m(message.role, loop.index) }}{% endfor %}",
    "{%- macro m(x, y=7) %}[{{ x }}{{ y }}]{% endmacro %}{{ m('a', y=3) }}{{ m(x='b') }}",
    "{%- macro m(x) %}({{ x }}{{ varargs|length }}{{ kwargs|length }}){% endmacro %}{{ m(1, 2, 3, k=4) }}",
    "{%- macro m(x) %}<{{ caller() }}{{ x }}>{% endmacro %}{% call m(messages[1].role) %}in{% endcall %}",
    # fields of dicts: present, missing, nested, beside dict methods and loop attributes
    "{%- for message in messages %}{{ message.role }}:{{ message.name is defined }}:"
    "{{ message.content|trim }}{% if message.tool_calls %}{% for c in message.tool_calls %}"
    "{{ c.function.name }}{% for k, v in c.function.arguments|items %}{{ k }}={{ v }}{% endfor %}"
    "{{ c.function.arguments.keys()|list }}{% endfor %}{% endif %}{{ loop.last }}{% endfor %}",
    "{%- for message in messages if message.role != 'system' %}{{ message.role }}{% endfor %}"
    "{{ messages[0].missing is defined }}{{ messages[0].missing|default('d') }}{{ (messages|last).tool_call_id }}",
    "{%- set ns = namespace(found=none) %}{%- for m in messages %}{%- if m.role == 'tool' %}"
    "{%- set ns.found = m.tool_call_id %}{% endif %}{% endfor %}{{ ns.found }}{{ messages[1].get('role') }}",
    # loop and namespace attributes: plain values, undefined ones at a loop's ends, a
    # callable held in a namespace, a missing name, a namespace field named like a loop attribute
    "{%- set ns = namespace(n=0, last=none, first=messages[0], get=messages[0].get) %}"
    "{%- for m in messages %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length }}"
    "{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.depth }}{{ loop.previtem.role if loop.previtem is defined }}"
    "{{ loop.nextitem is defined }}{{ loop.cycle('a', 'b') }}{%- set ns.n = ns.n + loop.index %}"
    "{%- set ns.last = m.role %}{% endfor %}{{ ns.n }}{{ ns.last }}{{ ns.first.role }}{{ ns.get('role') }}"
    "{{ ns.missing is defined }}",
])
def test_direct_macro_calls_and_fields_render_as_transformers_does(source):
    ours = JinjaFormat(source, name="probe")
    got = ours.render(CONVERSATION, None, add_generation_prompt=False)
    from transformers.utils.chat_template_utils import _compile_jinja_template

    compile_ = getattr(_compile_jinja_template, "__wrapped__", _compile_jinja_template)
    assert got == compile_(source).render(messages=CONVERSATION, tools=None, add_generation_prompt=False)


def test_a_render_leaves_no_reference_cycle():
    """A macro that reads a template variable (Qwen3.6's ``render_content`` reads ``add_vision_id``)
    is a closure over the render's context, which holds it: without the render breaking that cycle,
    each render left objects that only the garbage collector frees. Refused renders too (the
    error's traceback holds the context)."""
    import gc

    source = ("{%- macro m(x) %}[{{ x }}{{ flag }}]{% endmacro %}{%- set ns = namespace(n=0) %}"
              "{%- for message in messages %}{%- set ns.n = ns.n + 1 %}{{ m(message.content) }}"
              "{%- endfor %}{% if ns.n > 1 %}{{ raise_exception('one message only') }}{% endif %}")
    fmt = JinjaFormat(source, name="probe")
    assert fmt.render(MESSAGES, None) == "[  hi  ]"
    gc.collect()
    gc.disable()
    try:
        for _ in range(20):
            fmt.render(MESSAGES, None)
            with pytest.raises(TemplateError):
                fmt.render(MESSAGES * 2, None)
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_a_server_variable_is_computed_for_each_render_of_a_template_that_names_it_only():
    """The date a server passes changes between renders, so a template that reads it gets it
    anew each time; a template that never names it never has it computed."""
    asked: list[str] = []

    def date() -> str:
        asked.append("date")
        return f"day {len(asked)}"

    dated = JinjaFormat("{{ date_string }}|{{ messages[0].content }}", name="dated", dynamic={"date_string": date})
    assert [dated.render(MESSAGES, None) for _ in range(2)] == ["day 1|" + MESSAGES[0]["content"],
                                                                "day 2|" + MESSAGES[0]["content"]]
    plain = JinjaFormat("{{ messages[0].content }}", name="plain", dynamic={"date_string": date})
    assert plain.render(MESSAGES, None) == MESSAGES[0]["content"] and len(asked) == 2
