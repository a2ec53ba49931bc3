"""Chat templates compiled as transformers compiles them, without transformers.

Vendored from transformers 5.x, ``transformers/utils/chat_template_utils.py``
(``_cached_compile_jinja_template``), Copyright The HuggingFace Team, Apache License 2.0
(http://www.apache.org/licenses/LICENSE-2.0). Changed: the ``generation`` tag renders its body
without the assistant-mask tracker (budgeter never asks for the mask), and no template object is
cached (each ``JinjaFormat`` patches its own environment; only the compiled code is, on disk).
``tests/tokenizers/test_jinja_parity.py`` renders every template we hold with this and with
transformers and compares the text.

The environment: ``ImmutableSandboxedEnvironment`` (chat templates from the Hub are untrusted code)
with ``trim_blocks``, ``lstrip_blocks`` and loop controls; ``tojson`` without HTML escaping and
with ``indent``/``separators``/``sort_keys``; ``raise_exception``, ``strftime_now``, a ``dict``
and a ``namespace`` that refuses underscore-prefixed names.
"""

from __future__ import annotations

import contextlib
import json
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.exceptions import SecurityError, TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from budgeter.core.memo import IdentityMemo
from budgeter.tokenizers import cache


class _Generation(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` (templates that mark assistant tokens): the body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return str(caller())


def raise_exception(message: str) -> None:
    raise TemplateError(message)


_encoded = IdentityMemo(size=len)


def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
           sort_keys: bool = False) -> str:
    """Jinja's own ``tojson`` escapes HTML characters; transformers' (and inference servers') does not.
    A dict or list is encoded once per object: builds render the same tool schemas and parsed
    arguments again and again (the templates' environment is immutable, and budgeter never changes
    a message's template form once made: ``bench_flat``)."""
    if isinstance(x, dict | list):
        if not (ensure_ascii or sort_keys) and indent is None and separators is None:  # (as templates write it)
            return _encoded.one(x, _dumps, x, False, None, None, False)
        with contextlib.suppress(TypeError):  # (unhashable options: encoded each time)
            return _encoded.get((x,), _dumps, x, ensure_ascii, indent, separators, sort_keys,
                                key=(ensure_ascii, indent, separators, sort_keys))
    return _dumps(x, ensure_ascii, indent, separators, sort_keys)


def _dumps(x: Any, ensure_ascii: bool, indent: Any, separators: Any, sort_keys: bool) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class TemplateDict:
    """``dict(...)`` and ``dict.fromkeys(...)`` without reaching the type itself."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


class TemplateNamespace(jinja2.utils.Namespace):
    """A namespace that refuses dunder and other underscore-prefixed names (no CPython internals)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 -- Namespace's trick: namespace(self=...)
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise SecurityError(f"Chat templates cannot store underscore-prefixed attributes on a namespace, "
                                f"but got {name!r}. Please rename the attribute.")


def compile_template(source: str) -> jinja2.Template:
    """A new environment and the template compiled in it (jinja2 errors propagate), as
    ``env.from_string`` compiles it, with the compiled code kept in the tokenizer cache (what
    Jinja's own bytecode cache keeps; compiling Qwen3.6's template was an eighth of
    ``budgeter trim``'s start, ``bench_flat``, ready). Keyed by the template's hash, jinja2's
    version and this module's code (the environment it compiles in)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    code = cache.fetch("jinja", cache.text_digest(source),
                       [jinja2.__version__, cache.source_digest(__file__)], lambda: env.compile(source))
    return env.template_class.from_code(env, code, env.make_globals(None), None)
