"""An on-disk cache of what a tokenizer load builds: parsed vocabularies, compiled chat templates.

A vocabulary load then costs what reading a file costs (``tests/bench/bench_flat.py``, ready).
Each entry is one file ``ROOT/KIND/SOURCE/KEY.bin``; ``KEY`` is a hash of everything that decides the
built value: the source's bytes (or their hash), the versions of the libraries that build it,
the code of ours that builds it, this module's ``FORMAT`` and the Python version (the value is
stored with ``marshal``, whose format is Python's own). The file holds, in order: ``MAGIC``, the
key it was written for, the SHA-256 of its payload, the payload's length, the payload. An entry
whose key, length or checksum does not match (stale, truncated, corrupted, another version's) is
never used: the value is built again and the entry rewritten. Entries are written to a temporary
file in the same folder and renamed into place, so concurrent processes read a whole entry or
none. A cache that cannot be written (read-only, full) is logged once and loading goes on
without it; loading never fails because of the cache.

The entry point sets the folder (``configure``): ``budgeter`` uses ``BUDGETER_TOKENIZER_CACHE``,
else ``$XDG_CACHE_HOME/budgeter/tokenizers``, else ``~/.cache/budgeter/tokenizers``; ``off``
turns it off. Without ``configure`` (a library user) nothing is cached.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import marshal
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

FORMAT = 1
MAGIC = b"budgeter-tokenizer-cache\n"
_HEAD = len(MAGIC) + 32 + 32 + 8
T = TypeVar("T")
log = logging.getLogger("budgeter.tokenizers")

_root: Path | None = None
_warned = threading.Event()


def configure(root: Path | None) -> None:
    """Cache in ``root`` from now on; None: no cache."""
    global _root
    _root = root


def location() -> Path | None:
    return _root


def key_of(kind: str, parts: Iterable[str | bytes]) -> str:
    """The hex SHA-256 of ``kind``, this cache's format, the Python version and ``parts``."""
    h = hashlib.sha256()
    for part in (kind, str(FORMAT), sys.version, *parts):
        raw = part.encode() if isinstance(part, str) else part
        h.update(len(raw).to_bytes(8, "little"))
        h.update(raw)
    return h.hexdigest()


def text_digest(text: str) -> str:
    """The sha256 of ``text`` (a template's source), lone surrogates and all."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def file_digest(path: str | Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def source_digest(module_file: str | None) -> str:
    """The hash of one of our modules' source: a change to the code that builds a value is a new key.
    A module read from no file (a zip) counts as its package's version."""
    try:
        return file_digest(module_file) if module_file else ""
    except OSError:
        from importlib.metadata import version

        return f"budgeter=={version('budgeter')}"


def fetch(kind: str, source: str, parts: Iterable[str | bytes], build: Callable[[], T]) -> T:
    """The cached value for (``kind``, ``source``, ``parts``), or ``build()``'s, stored for next
    time. ``source``: the hash of what the value is built from; ``parts``: the rest of the key
    (versions). An entry for the same source with other parts (another version) is removed when
    this one is written, so the cache holds one entry per source. The value must be marshal-able
    (None, numbers, str, bytes, and tuples, lists, dicts and sets of them)."""
    root = _root
    if root is None:
        return build()
    key = key_of(kind, [source, *parts])
    path = root / kind / source[:32] / f"{key}.bin"
    found = read(path, key)
    if found is not None:
        return found[0]  # type: ignore[no-any-return]
    value = build()
    if write(path, key, value):
        for other in path.parent.glob("*.bin"):
            if other != path:
                with contextlib.suppress(OSError):
                    other.unlink()
    return value


SETTLED_NS = 2_000_000_000
"""How old a file's times must be before a value is kept by them (``by_file_state``), as git treats
an index entry written in the same second as its file: a coarse clock could keep both times across
a rewrite."""


def by_file_state(kind: str, path: str | Path, compute: Callable[[], T]) -> T:
    """``compute()``, a value derived from the file at ``path``, kept for its real path by its
    device, inode, size and modification and change times (a change time no tool sets back: a file
    written since is computed again), once those times are ``SETTLED_NS`` old; computed each time
    without a cache, or for a file that cannot be stat'ed (``compute`` says what it makes of it)."""
    try:
        real, st = os.path.realpath(path), os.stat(path)
    except OSError:
        return compute()
    if _root is None or time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < SETTLED_NS:
        return compute()
    state = f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
    return fetch(kind, text_digest(real), [state], compute)


def read(path: Path, key: str) -> tuple[Any] | None:
    """``(value,)`` of a whole, matching entry; None for a missing, stale or damaged one."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    view = memoryview(data)
    payload = view[_HEAD:]
    if (len(data) < _HEAD or view[:len(MAGIC)] != MAGIC
            or view[len(MAGIC):len(MAGIC) + 32] != bytes.fromhex(key)
            or int.from_bytes(view[_HEAD - 8:_HEAD], "little") != len(payload)
            or view[len(MAGIC) + 32:_HEAD - 8] != hashlib.sha256(payload).digest()):
        log.info("budgeter: tokenizer cache entry %s is stale or damaged; building it again", path)
        return None
    try:
        return (marshal.loads(payload),)
    except (ValueError, EOFError, TypeError):  # (its checksum matched: written by another build of Python)
        return None


def write(path: Path, key: str, value: Any) -> bool:
    """Store ``value`` under ``key`` at ``path`` atomically; an unwritable cache is logged once."""
    payload = marshal.dumps(value)
    head = MAGIC + bytes.fromhex(key) + hashlib.sha256(payload).digest() + len(payload).to_bytes(8, "little")
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".tmp-", delete=False) as f:
            tmp = f.name
            f.write(head)
            f.write(payload)
        os.replace(tmp, path)
        tmp = None
        return True
    except OSError as exc:
        if not _warned.is_set():
            _warned.set()
            log.warning("budgeter: the tokenizer cache %s cannot be written (%s); loading without it "
                        "(set BUDGETER_TOKENIZER_CACHE to another folder, or to off)", path.parent, exc)
        return False
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):  # (a failed write: leave no temporary file behind)
                os.unlink(tmp)
