"""Chat formats: the model's own Jinja template, or a named format of budgeter's own."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from budgeter.errors import InvalidTokenizerSpec, TemplateError
from budgeter.tokenizers.formats import native

log = logging.getLogger("budgeter.counting")

NAMED = {"chatml": "chatml.jinja"}
CHATML_SPECIALS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>",
                   "<tool_response>", "</tool_response>", "<think>", "</think>")


class JinjaFormat:
    """A chat template compiled exactly as transformers compiles it (same sandbox, same
    ``tojson``), rendered with the tokenizer's special-token strings as variables."""

    def __init__(self, template: str, *, name: str, variables: Mapping[str, Any] | None = None,
                 dynamic: Mapping[str, Callable[[], Any]] | None = None) -> None:
        from budgeter.tokenizers.jinja import compile_template as _compile_jinja_template

        self.name = name
        self.source = template
        self._variables = dict(variables or {})
        self.dynamic = dict(dynamic or {})
        """Variables computed at each render (the date a server passes)."""
        self.dynamic_read = {k: f for k, f in self.dynamic.items() if k in template}
        """Those the template can read: it names them (a template reads a variable by its name
        only). The others cost each render their calls and a merge, and no template of the default
        profile reads the date (``bench_instructions``)."""
        compile_ = getattr(_compile_jinja_template, "__wrapped__", _compile_jinja_template)
        try:  # our own compiled copy (not transformers' cached one): its environment gets patched
            self._template = compile_(template)
        except Exception as exc:
            raise TemplateError(f"chat template {name!r} does not compile: {exc}") from exc
        _skip_fixed_sandbox_checks(self._template.environment)
        self._template.globals = dict(self._template.globals)
        """Flattened once: every render copies the template's globals from the ``ChainMap`` jinja
        keeps them in, in Python, a third of a short render (``bench_service``)."""
        self.object_arguments = self._needs_object_arguments()
        """The template iterates arguments as a mapping (``|items``): arguments that are not a JSON
        object, which inference servers refuse, are rendered as one raw ``arguments`` parameter."""
        self.native = native.for_template(template)
        """The template's renderer in plain Python, where its source is a published one we wrote one
        for (``formats/native.py``); None otherwise, or once it differed from the template."""
        self.native_off = ""
        """Why ``native`` was turned off ('' while it is on or there is none)."""
        self._natives = 0
        self._tojson = self._template.environment.filters["tojson"]

    def _needs_object_arguments(self) -> bool:
        def call(arguments: Any) -> list[dict[str, Any]]:
            return [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [
                {"id": "zq", "type": "function", "function": {"name": "zqcall", "arguments": arguments}}]}]

        def renders(arguments: Any) -> bool:
            try:
                _render(self._template, {"messages": call(arguments), "tools": None,
                                         "add_generation_prompt": False, **self._variables})
                return True
            except Exception:
                return False

        return renders({"zqarg": "v"}) and not renders('{"zqarg": "v')

    def render(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
               *, add_generation_prompt: bool = True) -> str:
        if self.object_arguments:
            messages = [_object_arguments(m) if m.get("tool_calls") else m for m in messages]
        variables = {**self._variables, **{k: f() for k, f in self.dynamic_read.items()}} if self.dynamic_read \
            else self._variables
        if self.native is not None:
            text = self.native(messages, tools, add_generation_prompt, variables, self._tojson)
            if text is not None:
                self._natives += 1
                if self._natives > native.SHADOW_FIRST and self._natives % native.SHADOW_EVERY:
                    return text
                return self._shadowed(text, messages, tools, add_generation_prompt, variables)
        return self._jinja(messages, tools, add_generation_prompt, variables)

    def _jinja(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
               add_generation_prompt: bool, variables: Mapping[str, Any]) -> str:
        try:
            return _render(self._template, {"messages": messages, "tools": tools,
                                            "add_generation_prompt": add_generation_prompt, **variables})
        except Exception as exc:
            raise TemplateError(f"chat template {self.name!r} cannot render these messages: {exc}") from exc

    def _shadowed(self, text: str, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                  add_generation_prompt: bool, variables: Mapping[str, Any]) -> str:
        """``text``, checked against the template's own render; a difference turns ``native`` off."""
        try:
            checked = self._jinja(messages, tools, add_generation_prompt, variables)
        except TemplateError:
            checked = None
        if checked != text:
            self.native, self.native_off = None, "its Python renderer differed from the template: the template renders"
            log.warning("budgeter: chat template %r: %s", self.name, self.native_off)
            if checked is None:
                return self._jinja(messages, tools, add_generation_prompt, variables)  # (raises as it did)
        return checked  # type: ignore[return-value]


def _render(template: Any, variables: dict[str, Any]) -> str:
    """``template.render(**variables)``, leaving no reference cycle behind: a template's macros
    are closures over the render's context, which holds them, and emptying the context's
    variables after the render lets reference counting free it, so that the garbage collector,
    whose full walks were a turn's p99, has less to walk (``bench_service``)."""
    ctx = template.new_context(variables)
    try:
        return template.environment.concat(template.root_render_func(ctx))  # type: ignore[no-any-return]
    finally:
        ctx.vars.clear()
        ctx.exported_vars.clear()


def _object_arguments(m: Mapping[str, Any]) -> Mapping[str, Any]:
    calls = m["tool_calls"]
    if all(not isinstance(c.get("function", c).get("arguments"), str) for c in calls):
        return m
    fixed = []
    for c in calls:
        fn = c.get("function", c)
        if isinstance(fn.get("arguments"), str):
            fn = {**fn, "arguments": {"arguments": fn["arguments"]}}
            c = {**c, "function": fn} if "function" in c else fn
        fixed.append(c)
    return {**m, "tool_calls": fixed}


_DICT_ATTRIBUTES = frozenset(dir(dict))
_STR_FORMAT = frozenset({"format", "format_map"})
_BUILTIN = type("".strip)


def _skip_fixed_sandbox_checks(env: Any) -> None:
    """Templates read ``message.role`` on plain dicts and ``loop.first`` thousands of times per
    render, and call ``content.strip()`` and macros as often. For a dict and a name that is not a
    dict attribute, the sandbox's answer is always ``obj[name]`` or undefined; for a public
    attribute of a loop or a namespace, or a public str method (not format/format_map), it is
    always the attribute; calling a str method or a macro is always allowed. Go there directly:
    same semantics as ``ImmutableSandboxedEnvironment``, far fewer checks on long histories,
    without which a loaded replica spends about a fifth more CPU a turn (``bench_load``)."""
    if getattr(env, "_budgeter_fast", False):
        return
    sandboxed = env.getattr

    from jinja2.runtime import LoopContext, Macro, missing
    from jinja2.utils import Namespace

    def getattr_(obj: Any, attribute: str) -> Any:
        kind = type(obj)
        if kind is dict and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except KeyError:
                return env.undefined(obj=obj, name=attribute)
        if kind is str and not attribute.startswith("_") and attribute not in _STR_FORMAT:
            # content.strip, .split, .startswith...: a str is immutable and its public methods
            # are never internal (format and format_map the sandbox wraps: not here)
            try:
                return getattr(obj, attribute)
            except AttributeError:
                return env.undefined(obj=obj, name=attribute)
        if (kind is LoopContext or isinstance(obj, Namespace)) and not attribute.startswith("_"):
            # loop.first/index0/last..., ns.last_query_index...: public, never internal, never a
            # known mutable; a callable value goes the sandbox's way (it may wrap str.format)
            try:
                value = getattr(obj, attribute)
            except AttributeError:
                pass
            else:
                if not callable(value):
                    return value
        return sandboxed(obj, attribute)

    sandboxed_call = env.call
    namespace = env.globals.get("namespace", object())  # (when absent: a stand-in no template calls)

    def call(context: Any, obj: Any, *args: Any, **kwargs: Any) -> Any:
        """``content.strip()``, macro calls and ``namespace(...)``: the sandbox's answer for a
        public method of a str (not format/format_map), a template macro or the environment's own
        namespace class (no ``unsafe_callable``, no pass-argument marker) is always "safe", and
        ``Context.call`` then only drops the loop/block variables it was handed. A macro called
        with positional arguments only (``render_content(message.content, true)``), that takes no
        ``caller``, ``varargs`` or ``kwargs`` and does not escape, runs its function directly with
        the arguments left out as ``missing``: what ``Macro.__call__`` hands it then, without
        binding the arguments in Python (Qwen3.6 calls one 9 times a window render)."""
        kind = type(obj)
        if (kind is Macro or obj is namespace
                or (kind is _BUILTIN and type(obj.__self__) is str and obj.__name__ not in _STR_FORMAT)):
            kwargs.pop("_loop_vars", None)
            kwargs.pop("_block_vars", None)
            if (kind is Macro and not kwargs and len(args) <= obj._argument_count and not (
                    obj.caller or obj.catch_kwargs or obj.catch_varargs or obj._default_autoescape
                    or obj._environment.is_async)):
                return obj._func(*args, *(missing,) * (obj._argument_count - len(args)))
            return obj(*args, **kwargs)
        return sandboxed_call(context, obj, *args, **kwargs)

    env.getattr = getattr_
    env.call = call
    env._budgeter_fast = True


TEMPLATES = {"qwen3.6": "Qwen3.6 published chat template",
             "qwen2.5": "Qwen2.5 Instruct published chat template",
             "gemma3": "Gemma 3 published chat template"}


@functools.cache  # read once: budgeter serve reads them all at start-up (budgeter/preload.py)
def template_text(name: str) -> str:
    """A published chat template carried with budgeter (``budgeter/tokenizers/templates``,
    attribution in its NOTICE.md)."""
    if name not in TEMPLATES:
        raise TemplateError(f"unknown built-in template {name!r}; known: {', '.join(sorted(TEMPLATES))}")
    return resources.files("budgeter.tokenizers").joinpath("templates", f"{name}.jinja").read_text("utf-8")


def builtin_template(name: str, *, variables: Mapping[str, Any] | None = None,
                     dynamic: Mapping[str, Callable[[], Any]] | None = None) -> JinjaFormat:
    return JinjaFormat(template_text(name), name=f"{TEMPLATES[name]} (templates/{name}.jinja)",
                       variables=variables, dynamic=dynamic)


def named_format(name: str, *, variables: Mapping[str, Any] | None = None,
                 dynamic: Mapping[str, Callable[[], Any]] | None = None) -> JinjaFormat:
    if name not in NAMED:
        raise TemplateError(f"unknown chat format {name!r}; known: {', '.join(sorted(NAMED))}")
    text = resources.files(__package__).joinpath(NAMED[name]).read_text(encoding="utf-8")
    return JinjaFormat(text, name=name, variables=variables, dynamic=dynamic)


def known_formats() -> list[str]:
    """Every name ``chat_format`` takes besides a ``.jinja`` file: budgeter's named formats and
    the carried templates."""
    return [*NAMED, *TEMPLATES]


def check_format(chat_format: str | None) -> None:
    """Refuse an unknown ``chat_format`` (or a missing ``.jinja`` file) before anything loads."""
    if not chat_format or chat_format in NAMED or chat_format in TEMPLATES:
        return
    if chat_format.endswith(".jinja"):
        if not Path(chat_format).expanduser().is_file():
            raise InvalidTokenizerSpec(f"chat format file {chat_format} does not exist", field="chat_format")
        return
    raise InvalidTokenizerSpec(f"unknown chat format {chat_format!r}; known: {', '.join(known_formats())}, "
                               "or a .jinja file", field="chat_format",
                               metadata={"available": ",".join(known_formats())})
