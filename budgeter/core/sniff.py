"""Sniff what kind of content a payload is, and suggest a path for a write that lost its path.

Rules (first match wins, on the first 600 characters, leading whitespace ignored):
- html: ``<!DOCTYPE`` or ``<html``; css: a leading ``/* name.css */`` comment, ``:root {`` or a
  selector block; json: parses as an object/array; python: ``def``/``class``/``import x``/
  ``from x import``/shebang python; shell: a sh/bash shebang or ``set -e``; markdown: a leading
  ``# `` heading or fenced block; yaml: ``key: value`` lines; ts/js: ``import``/``export``/
  ``function``/``const``/``let`` (ts when type annotations or ``interface`` appear);
  text otherwise.
Paths: the first HTML page is ``index.html``, later ones are slugged from ``<title>``; CSS is
named by its leading comment, else ``styles.css``; scripts are ``script.js``/``script.ts``; others
``.rescued/write_<stamp>.<ext>``. Paths keep ``paths.safe_path``'s rule (relative, inside the
workspace).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from budgeter.core.paths import safe_path

EXT = {"html": "html", "css": "css", "js": "js", "ts": "ts", "python": "py", "markdown": "md",
       "json": "json", "yaml": "yaml", "shell": "sh", "text": "txt"}

_CSS_NAME = re.compile(r"^/\*\s*([\w.-]+\.css)\s*\*/")
_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.I | re.S)
_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("html", re.compile(r"^(<!doctype html|<html)", re.I)),
    ("css", re.compile(r"^(/\*\s*[\w.-]+\.css\s*\*/|:root\s*\{|[.#]?[\w-]+(\s*,\s*[.#]?[\w-]+)*\s*\{\s*[\w-]+\s*:)")),
    ("shell", re.compile(r"^(#!\s*/\S*(ba|z)?sh\b|#!/usr/bin/env (ba|z)?sh\b|set -e)")),
    ("python", re.compile(r"^(#!.*python|(def|class) \w+|import \w+\s*$|from [\w.]+ import )", re.M)),
    ("markdown", re.compile(r"^(#{1,6} \S|```)")),
    ("ts", re.compile(r"^(interface \w+|(export )?(const|let|function) \w+\s*(<[^>]*>)?\(?[^=]*:\s*\w+)", re.M)),
    ("js", re.compile(r"^(import |export |function |const |let |var |'use strict'|\"use strict\")", re.M)),
    ("yaml", re.compile(r"^(---\s*$|[\w-]+:(\s+\S.*)?$)", re.M)),
]


def sniff(text: str) -> str:
    head = text.lstrip()[:600]
    if head[:1] in "{[":
        try:
            json.loads(text)
            return "json"
        except (ValueError, RecursionError):
            pass
    for kind, rule in _RULES:
        if rule.search(head) if kind in ("python", "ts", "js", "yaml") else rule.match(head):
            return kind
    return "text"


@dataclass(frozen=True, slots=True)
class PathSuggestion:
    kind: str
    path: str
    confidence: float
    reason: str


def slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return s[:48].strip("-")


def suggest_path(text: str, *, html_pages_seen: int = 0, stamp: str = "0") -> PathSuggestion:
    kind = sniff(text)
    head = text.lstrip()
    if kind == "html":
        title = _TITLE.search(text[:4000])
        if html_pages_seen == 0:
            return PathSuggestion(kind, "index.html", 0.9, "first HTML page of the session")
        if title and slug(title.group(1)):
            return PathSuggestion(kind, slug(title.group(1)) + ".html", 0.8, "slug of <title>")
    if kind == "css":
        named = _CSS_NAME.match(head)
        if named and safe_path(named.group(1)):
            return PathSuggestion(kind, named.group(1), 0.95, "named by its leading comment")
        return PathSuggestion(kind, "styles.css", 0.7, "default stylesheet name")
    if kind in ("js", "ts"):
        return PathSuggestion(kind, f"script.{EXT[kind]}", 0.6, "default script name")
    return PathSuggestion(kind, f".rescued/write_{stamp}.{EXT[kind]}", 0.3,
                          f"no conventional name for {kind}")
