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
