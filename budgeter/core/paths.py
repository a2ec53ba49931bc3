"""Where a tool call's path arguments point, judged lexically: inside the workspace or not.

The rule (``path_problem``): a path is unsafe when it is absolute, climbs out with ``..`` once
normalised (``a/../../b``), starts with ``~`` (a home directory: shells and many tools expand it),
holds a NUL byte, is a Windows drive path (``C:\\x``, ``C:/x``, ``C:x``) or a UNC path
(``\\\\server\\share``); and, where a file is meant, when it is empty or names the directory
itself (``.``). A backslash counts as a separator. With a root (``Policy.path_root``, an absolute
POSIX path) every path is resolved against it instead: an absolute path inside the root is fine,
and so is a relative one that stays inside it. The rest of the rule holds with a root too.

Nothing here touches the filesystem (the core is pure): a symlink inside the workspace that points
out of it is the executor's to refuse, by resolving the path before it opens it.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable

_DRIVE = re.compile(r"^[A-Za-z]:")
_INDEX = re.compile(r"(?:\[\d+\])+$")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_DIR_KEY = re.compile(r"^(?:dir|directory|cwd|workdir|\w+_(?:dir|directory))s?$")
_FILE_KEY = re.compile(r"^(?:path|file|filepath|filename|src|source|dest|destination"
                       r"|\w+_(?:path|file|filepath|filename))s?$")
"""Argument names that hold a path (``path``, ``file_path``, ``target_file``, ``old_path``,
``paths``...; camelCase too: ``filePath``, ``targetFile``); ``_DIR_KEY``'s name a directory,
where ``.`` and an empty value are fine."""


def path_problem(path: str, *, root: str = "", file: bool = True) -> str:
    """Why ``path`` breaks the rule in this module's docstring; '' when it keeps it. ``file``:
    the path names a file (not a directory), so an empty path or ``.`` is refused too."""
    if "\0" in path:
        return "holds a NUL byte"
    p = path.replace("\\", "/")
    if p.startswith("//"):
        return "is a UNC path (\\\\server\\share)"
    if _DRIVE.match(p):
        return "is a Windows drive path"
    if p.startswith("~"):
        return "starts with ~ (a home directory)"
    if file and not p:
        return "is empty"
    if root:
        base = posixpath.normpath(root)
        where = posixpath.normpath(posixpath.join(base, p))  # an absolute p replaces the base
        if where != base and not where.startswith(base.rstrip("/") + "/"):
            return f"resolves to {where}, outside the root {base}"
        return "names the root directory, not a file" if file and where == base else ""
    if p.startswith("/"):
        return "is absolute"
    norm = posixpath.normpath(p)
    if norm == ".." or norm.startswith("../"):
        return "climbs out of the workspace with .."
    return "names the workspace directory, not a file" if file and norm == "." else ""


def safe_path(path: str) -> bool:
    """A path to a file that stays inside the workspace (``path_problem`` finds nothing)."""
    return not path_problem(path)


def path_leaves(leaves: Iterable[tuple[str, str]]) -> Iterable[tuple[str, str, bool]]:
    """(field, text, names a directory) for each string leaf (``guards.string_leaves``) whose
    argument name says it holds a path, at any depth (``edits[2].file_path``, ``paths[0]``)."""
    for field, text in leaves:
        key = _CAMEL.sub("_", _INDEX.sub("", field).rpartition(".")[2]).lower()
        if _DIR_KEY.match(key):
            yield field, text, True
        elif _FILE_KEY.match(key):
            yield field, text, False
