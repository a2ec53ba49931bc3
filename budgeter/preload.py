"""Everything ``budgeter serve`` may import while serving, imported once at start-up.

A ``pip install`` over a running server replaces the package's files under it: a module first
imported afterwards (many are imported inside functions, on a call's first need) is gone or from
another version, and the call answered INTERNAL. ``preload()`` imports every module of the package
but the proxy (the other front door, its own process) and every module they import inside
functions, and reads the built-in chat templates. It leaves out the extras' packages imported
there (transformers, gguf, mistral-common: heavy, and imported at start-up anyway by a server whose
profiles use them); the Redis store's modules import redis at their top, where it is installed.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import pkgutil
from collections.abc import Iterable, Iterator

import budgeter
from budgeter.errors import MissingExtra

SKIPPED = ("budgeter.proxy", "budgeter.__main__")  # the other front door; the CLI run itself
EXTRAS = frozenset(m for modules in MissingExtra.MODULES.values() for m in modules)


def preload() -> list[str]:
    """Import them all; returns the modules of the package that could not be (an extra absent)."""
    absent = []
    for module in _modules(budgeter.__path__, "budgeter."):
        if not _imported(module):
            absent.append(module)
            continue
        for name in _lazy_imports(module):
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


def _lazy_imports(module: str) -> Iterator[str]:
    """What a module imports inside its functions (and ``from x import y`` where y is a module)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return
    package = module if spec.submodule_search_locations is not None else module.rpartition(".")[0]
    with open(spec.origin, encoding="utf-8") as source:
        tree = ast.parse(source.read())
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(fn):
                yield from _names(node, package)


def _names(node: ast.AST, package: str) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names if _ours(alias.name))
    elif isinstance(node, ast.ImportFrom):
        base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) if node.level \
            else node.module or ""
        if _ours(base):
            yield base
            # a submodule imported by name (from jinja2 import nodes)
            yield from (f"{base}.{a.name}" for a in node.names if _is_module(f"{base}.{a.name}"))


def _ours(name: str) -> bool:
    """Neither an extra's package nor a skipped part of ours."""
    return name.partition(".")[0] not in EXTRAS and not name.startswith(SKIPPED)


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
