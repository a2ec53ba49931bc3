"""budgeter/tokenizers/jinja.py (vendored) renders every chat template we hold exactly as
transformers' own compiled template does (transformers comes with the test extra)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from budgeter.tokenizers.jinja import compile_template

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "tokenizers"

CALL = {"id": "call_1", "type": "function",
        "function": {"name": "read_file", "arguments": {"path": "a.py", "note": "<é & ü>"}}}
TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]
CHATS = [
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "  hi <b>&</b>  "},
     {"role": "assistant", "content": "hello", "reasoning_content": "they said hi"},
     {"role": "user", "content": "read a.py"}],
    [{"role": "system", "content": "You code."}, {"role": "user", "content": "read a.py"},
     {"role": "assistant", "content": "", "tool_calls": [CALL]},
     {"role": "tool", "tool_call_id": "call_1", "name": "read_file", "content": "print('ü')\n"},
     {"role": "assistant", "content": "It prints ü."}, {"role": "user", "content": "thanks"}],
]
VARIABLES = {"bos_token": "<s>", "eos_token": "</s>"}


def _templates() -> list[tuple[str, str]]:
    found = [(p.name, p.read_text(encoding="utf-8")) for p in sorted(
        [*ROOT.glob("budgeter/tokenizers/templates/*.jinja"), *ROOT.glob("budgeter/tokenizers/formats/*.jinja"),
         *ROOT.glob("tests/**/*.jinja")])]
    for config in sorted(SHARED.glob("*/tokenizer_config.json")):
        template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
        if isinstance(template, str):
            found.append((config.parent.name, template))
    return found


def _render(template, chat, tools, generation):  # type: ignore[no-untyped-def]
    try:
        return template.render(messages=chat, tools=tools, add_generation_prompt=generation, **VARIABLES)
    except Exception as exc:  # the same refusal on both sides counts as the same output
        return f"{type(exc).__name__}: {exc}"


@pytest.mark.parametrize(("name", "source"), _templates(), ids=[n for n, _ in _templates()])
def test_renders_as_transformers_does(name, source):
    chat_template_utils = pytest.importorskip("transformers.utils.chat_template_utils")
    theirs_compile = chat_template_utils._cached_compile_jinja_template
    ours, theirs = compile_template(source), theirs_compile(source)
    for chat in CHATS:
        for tools in (None, TOOLS):
            for generation in (False, True):
                assert _render(ours, chat, tools, generation) == _render(theirs, chat, tools, generation)


@pytest.mark.parametrize("source", [
    "{{ {'a': '<é>'} | tojson }}|{{ [1, 2] | tojson(indent=2) }}|{{ {'b': 1, 'a': 2} | tojson(sort_keys=True) }}",
    "{% for x in [1, 2, 3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% if x == 3 %}{% break %}"
    "{% endif %}{% endfor %}",
    "{% generation %}mask me{% endgeneration %}",
    "{% set ns = namespace(n=1) %}{% set ns.n = ns.n + 1 %}{{ ns.n }}{{ dict(a=1) }}{{ dict.fromkeys('ab') }}",
    "{{ raise_exception('no system role') }}",
    "{% set ns = namespace(_x=1) %}",
    "{{ strftime_now('%Y') }}",
    "  {% if true %}\n  kept\n  {% endif %}\n",
])
def test_features_match(source):
    chat_template_utils = pytest.importorskip("transformers.utils.chat_template_utils")
    ours = compile_template(source)
    theirs = chat_template_utils._cached_compile_jinja_template(source)
    assert _render(ours, [], None, False) == _render(theirs, [], None, False)
