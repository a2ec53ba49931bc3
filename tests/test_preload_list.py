"""``preload.LAZY`` lists by hand the third-party modules the package imports inside functions
(what ``budgeter serve`` imports at start-up so that a ``pip install`` over it cannot break it):
after ``preload()``, every such import outside the proxy and the extras is loaded."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import budgeter
from budgeter.errors import MissingExtra
from budgeter.preload import SKIPPED

ROOT = Path(budgeter.__file__).parent
EXTRAS = {m for modules in MissingExtra.MODULES.values() for m in modules}


def _function_imports() -> set[str]:
    found = set()
    for path in ROOT.rglob("*.py"):
        module = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        if module.startswith(SKIPPED) or module.startswith("budgeter.v1"):
            continue
        for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    found |= {a.name for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    found.add(node.module)
    return {m for m in found if not m.startswith("budgeter") and m.partition(".")[0] not in EXTRAS}


def test_every_import_inside_a_function_is_preloaded():
    wanted = sorted(m for m in _function_imports() if m.partition(".")[0] not in sys.stdlib_module_names)
    code = ("import json, sys; from budgeter.preload import preload; preload(); "
            f"print(json.dumps([m for m in {wanted!r} if m not in sys.modules]))")
    missing = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                        check=True, timeout=300).stdout)
    assert missing == []
