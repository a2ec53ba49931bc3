"""Chat formats: the model's own Jinja template, or a named format of budgeter's own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from budgeter.errors import TemplateError

NAMED = {"chatml": "chatml.jinja"}
CHATML_SPECIALS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>",
                   "<tool_response>", "</tool_response>", "<think>", "</think>")


class JinjaFormat:
    """A chat template compiled exactly as transformers compiles it (same sandbox, same
    ``tojson``), rendered with the tokenizer's special-token strings as variables."""

    def __init__(self, template: str, *, name: str, variables: Mapping[str, Any] | None = None) -> None:
        from transformers.utils.chat_template_utils import _compile_jinja_template

        self.name = name
        self.source = template
        self._variables = dict(variables or {})
        try:
            self._template = _compile_jinja_template(template)
        except Exception as exc:
            raise TemplateError(f"chat template {name!r} does not compile: {exc}") from exc

    def render(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
               *, add_generation_prompt: bool = True) -> str:
        try:
            return self._template.render(messages=messages, tools=tools,
                                         add_generation_prompt=add_generation_prompt, **self._variables)
        except Exception as exc:
            raise TemplateError(f"chat template {self.name!r} cannot render these messages: {exc}") from exc


def named_format(name: str, *, variables: Mapping[str, Any] | None = None) -> JinjaFormat:
    if name not in NAMED:
        raise TemplateError(f"unknown chat format {name!r}; known: {', '.join(sorted(NAMED))}")
    text = resources.files(__package__).joinpath(NAMED[name]).read_text(encoding="utf-8")
    return JinjaFormat(text, name=name, variables=variables)
