"""Classify tool results and calls; recognise file tools by argument shape.

A result's status comes from the strongest evidence at hand (``Evidence``), and records which:

1. **declared**: the caller says so: the message's ``status`` (``ok``/``error``), which
   ``from_openai`` also takes from ``is_error``/``isError``; or the content is an MCP
   ``CallToolResult`` (a JSON object with a ``content`` list and a boolean ``isError``).
2. **verdict**: budgeter judged the call not runnable (see ``facts``).
3. **retried** / **same error**: what the model did next (see ``facts``).
4. **text**: ``text_failed`` below, used last and tuned for precision: a success shown as a
   failed call hides what the model asked for, a missed failure only costs room. It takes the
   kind of call into account: a read, search or fetch returns content that may say anything, so
   only a short result that talks about the call's own target counts there.

File tools: a call is a READ when its arguments have a path key (``path``, ``file_path``,
``filepath``, ``file``, ``filename``) and no content key; a WRITE when they also have a content
key (``content``, ``text``, ``contents``, ``data``), a READ also needs a reading name (read, view,
cat, open, show, load) or a line-range key (``start_line``, ``end_line``, ``offset``, ``limit``,
``lines``); an EDIT when they have an edit key
(``old_string``, ``new_string``, ``edits``, ``patch``, ``diff``, ``start_line``). Tool names the
caller configures in ``FileTools`` override the shape rules.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from typing import Any

from budgeter.core.policy import FileTools


class ResultStatus(StrEnum):
    OK = "OK"
    ERROR = "ERROR"


class Evidence(StrEnum):
    """What showed that a call failed, strongest first; its value is the word stubs show."""

    DECLARED = "declared"
    VERDICT = "verdict"
    RETRIED = "retried"
    SAME_ERROR = "same error"
    TEXT = "text"


class FileOp(StrEnum):
    NONE = "NONE"
    READ = "READ"
    WRITE = "WRITE"
    EDIT = "EDIT"


class CallKind(StrEnum):
    """What a call's result holds, for reading it: a MUTATE's or a COMMAND's result reports on
    the call; a READ's (read, search, list, fetch) is content, which may say anything."""

    MUTATE = "mutate"
    READ = "read"
    COMMAND = "command"
    OTHER = "other"


_MUTATES = re.compile(r"write|edit|replace|create|update|delete|remove|patch|apply|insert|move|rename|save|"
                      r"put|post|send|commit|push|upload|append|mkdir", re.I)
_READS = re.compile(r"read|view|cat\b|open|show|load|get|grep|search|find|glob|list|\bls\b|fetch|browse|"
                    r"http|web|url|curl|lookup|query|docs", re.I)
_COMMANDS = re.compile(r"bash|shell|exec|run|terminal|command|cmd|python|ipython|script|sh\b|test|build|"
                       r"install|make|npm|pip|cargo|git", re.I)
_COMMAND_KEYS = ("command", "cmd", "script", "code", "commands", "argv")


def call_kind(name: str, args: dict[str, Any] | None, op: FileOp) -> CallKind:
    """What the call does, from its file operation, its arguments and its name, in that order.
    A tool's sub-command (``{"command": "view"}``) names what it does; a command line runs."""
    if op is FileOp.WRITE or op is FileOp.EDIT:
        return CallKind.MUTATE
    if op is FileOp.READ:
        return CallKind.READ
    sub = next((v for k in _COMMAND_KEYS if isinstance(v := (args or {}).get(k), str)), None)
    if sub is not None and sub.strip() and " " not in sub.strip():
        return call_kind(sub, None, FileOp.NONE) if sub != name else CallKind.OTHER
    for pattern, kind in ((_MUTATES, CallKind.MUTATE), (_COMMANDS, CallKind.COMMAND), (_READS, CallKind.READ)):
        if pattern.search(name):
            return kind
    return CallKind.COMMAND if sub is not None else CallKind.OTHER


def declared_status(text: str, declared: str | None = None) -> ResultStatus | None:
    """The caller's own word on a result: ``declared`` (the message's status), else an MCP
    ``CallToolResult`` as the content (``{"content": [...], "isError": true}``); None when
    neither says."""
    if declared:
        return ResultStatus.ERROR if declared == "error" else ResultStatus.OK
    s = text.strip()
    if not (s.startswith("{") and s.endswith("}") and '"isError"' in s):
        return None
    try:
        obj = json.loads(s)
    except (ValueError, RecursionError):
        return None
    if isinstance(obj, dict) and isinstance(obj.get("isError"), bool) and isinstance(obj.get("content"), list):
        return ResultStatus.ERROR if obj["isError"] else ResultStatus.OK
    return None


def result_status(text: str, *, declared: str | None = None, kind: CallKind = CallKind.OTHER,
                  target: str = "", tool: str = "") -> tuple[ResultStatus, Evidence | None]:
    """(status, the evidence that decided it: None for an OK no one declared)."""
    said = declared_status(text, declared)
    if said is not None:
        return said, Evidence.DECLARED
    if text_failed(text, kind=kind, target=target, tool=tool):
        return ResultStatus.ERROR, Evidence.TEXT
    return ResultStatus.OK, None


# -- the text classifier ----------------------------------------------------------------------
# Tuned on the tune families of tests/data/results/ and reported on the held-out ones by
# tests/bench/bench_classify.py. Every rule looks for how a failure is *reported* (where the cue
# stands, what follows it), not for an error word anywhere.

_HEAD, _TAIL = 8000, 4000
_TAG = re.compile(r"^\s*<(\w*(?:error|fail)\w*)>", re.I)
"""A result wrapped in an error tag (``<error>``, ``<tool_use_error>``)."""
_WRAPPERS = re.compile(r"^\s*(?:<\w+>\s*|\[\w+\]\s*|tool (?:call |execution )?|the tool execution )", re.I)
_LEAD = re.compile(
    r"^(?:(?:error|fatal|exception|failure|failed|rejected|aborted|denied)\b(?:\s*\[[^\]\n]{0,40}\])?\s*[:!\-]"
    r"|(?:failed|unable|cannot|could not|couldn't|can't|refused|not allowed) to\b"
    r"|an? (?:unexpected |unknown )?error (?:has )?occurred"
    r"|(?:error|exception|failed)\s*$"
    r"|(?:permission|access) denied|no such file|(?:command |operation |request )?timed out\b"
    r"|[\w\-]{1,40} (?:failed|errored|error)\b"
    r"|(?:[\w\-]{1,40}|/[\w/\-]{1,40})(?:: [\w\-]{1,40})?:(?!\d)\s*(?P<rest>.{0,160}))",
    re.I)
"""How a failure's first line reads: an error word and a colon (``Error: ...``, ``error[E0425]:``,
``fatal: ...``), "failed to ...", "an error occurred", a tool or program name and a message
(``ls: cannot access ...``, ``write_file: path must not be empty``: the message must then hold a
cue of its own, ``_CUE``)."""
_CUE = re.compile(
    r"\b(?:error|fail(?:ed|ure|s)?|cannot|can't|could not|couldn't|unable|no such|not found|does not exist|"
    r"doesn't exist|denied|not permitted|not allowed|invalid|missing|required|must (?:not )?be|refused|"
    r"timed out|timeout|unknown|not a |is a directory|not supported|unsupported|exception|forbidden|"
    r"already exists|mismatch|not recognized|no match|did not match|didn't match|aborted|empty|not approved|"
    r"rejected|cancel+ed|not applied|not executed|not performed|was not|were not|not modified|too large|"
    r"exceed(?:s|ed)?|out of range|illegal|did not|didn't|is not an?|no \w+ (?:was|were) \w+ed|"
    r"not \w+(?:ed|en)|read-only)\b", re.I)
_NO_CUE = re.compile(r"\b(?:no|0|zero|without) (?:\w+ )?(?:errors?|failures?|failed|failing|problems?|issues?)\b"
                     r"|\bsuccess", re.I)
"""A line that says nothing failed."""
_HEADER = re.compile(r"^(?:[A-Za-z][\w ]{0,30}:|(?:call[ _]?id|id|tool|step)\s*:\s*\S{1,60}|#+)\s*$", re.I)
"""A label line before the report (``OBSERVATION:``, ``Call id: call_1``, ``Error:``)."""
_PROSE = re.compile(r"^(?:#+ )?[A-Z0-9'`\"][^\s=(){};]*(?: +\S+){2,}")
"""A sentence: three words or more, starting as a sentence does (not code, a path or a list)."""
_LOG_RECORD = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d|\b\d\d:\d\d:\d\d\b"
                         r"|^\[?(?:INFO|DEBUG|WARN(?:ING)?|TRACE)\]?[\s:]")
"""A log record (a time stamp, or a level other than an error's): a log's own lines, not a report."""
_EXIT = re.compile(r"(?:exit(?:ed)? (?:with )?(?:code|status)|exit_code|exitcode|returncode|return code|"
                   r"exit)\"?\s*[:=]?\s*(-?\d{1,9})(?!\d)", re.I)
_REPORTS = re.compile(
    r"(?m)^[ \t]*(?:\S+?:\d+(?::\d+)?: (?:fatal )?error(?:\[\w+\])?:"
    r"|(?:error|fatal error)(?:\[\w+\])?: "
    r"|[^\n]*\berror TS\d+:"
    r"|npm (?:ERR!|error) "
    r"|E: "
    r"|ERROR: "
    r"|(?:Killed|Segmentation fault|Aborted|Bus error)\b[^\n]*$"
    r"|FAIL\b"
    r"|--- FAIL: "
    r"|test result: FAILED"
    r"|[^\n]*: (?:command )?not found[ \t]*$"
    r"|(?:/bin/|/usr/bin/)?(?:ba|z|da|k)?sh: "
    r"|\S+: (?:cannot|can't) \w+"
    r"|[^\n]*: No such file or directory[ \t]*$)")
"""Lines that report a command's failure wherever they stand (a compiler's error after its
header, a test runner's summary, the shell's own messages)."""
_HINTS = ("error", "fail", "not found", "no such file", "killed", "segmentation", "aborted", "e: ", "sh: ",
          "cannot", "can't")
"""Words one of which every report line holds (lowered): text without them is not scanned."""
_FAILED_COUNT = re.compile(r"([1-9]\d*) (?:\w+ )?(?:failed|failing|errors?)\b(?! (?:and|or) \d)")
"""Matched in the lowered text, its word start checked apart (a case-blind scan, or a leading
``\b``, costs several times as much)."""
_SCAN = 3000
"""Characters of an output's head and of its tail that the report lines are looked for in (a
compiler's first error, a runner's summary): the regular expressions' cost grows with the text
(``bench_classify``'s corpus holds none longer)."""
_PASS_WORDS = re.compile(r"\b\d+ (?:passed|passing|succeeded|ok)\b|\btests?\b|\bfound\b|\bgenerated\b", re.I)
_EXC_LINE = re.compile(r"^[\w.]*(?:Error|Exception|Exit|Interrupt|Failure)\b")


def text_failed(text: str, *, kind: CallKind = CallKind.OTHER, target: str = "", tool: str = "") -> bool:
    """Whether the result text reports a failure, by how it is reported (precision first)."""
    body = text if len(text) <= _HEAD + _TAIL else text[:_HEAD] + "\n" + text[-_TAIL:]
    s = body.strip()
    if not s:
        return False
    header, first = _first_line(s)
    short = len(s) <= 600 and s.count("\n") <= 6
    if kind is CallKind.READ:
        # content can say anything: a short reply about the call's own target, or a tagged one
        return short and (_tagged(s) or _asks_retry(s) or (_leads(first) or _says_failed(first))
                          and _about(s, target, tool))
    code = _exit_code(s)
    if code:  # a failed command, as its wrapper reports it
        return True
    if _http_error(s):  # the command ran, the request it made did not
        return True
    if code == 0:  # the command's own status decides
        return False
    if _tagged(s) or (_leads(first) and not _LOG_RECORD.search(first)):
        return True
    if any(h.lower().startswith(("error", "exception", "failure")) for h in header):
        return True
    if _asks_retry(s):
        return True  # the tool asks the model to try again: what tools say after a failure
    if _names_itself(first, tool):
        return True  # the tool's own report on itself: its name, then what went wrong
    if (kind is not CallKind.COMMAND or len([ln for ln in s.split("\n", 3) if ln.strip()]) <= 2) \
            and _says_failed(first):
        return True  # a tool's own sentence about what it did not do (not a command's own output)
    return _reports(s)


def _first_line(s: str) -> tuple[list[str], str]:
    """(the label lines before it, the first line that says something)."""
    lines = [ln.strip() for ln in s.split("\n", 4)]
    k = 0
    while k < len(lines) - 1 and (not lines[k] or _HEADER.match(lines[k])):
        k += 1
    return [ln for ln in lines[:k] if ln], lines[k]


_RETRY = re.compile(r"\b(?:try again|please retry|narrow your search|try a different|use another tool"
                    r"|fix (?:the|your|any) \w+(?: \w+)? and (?:try|retry))\b", re.I)


def _asks_retry(s: str) -> bool:
    """The first or last lines ask the model to try again (``Please try again``, ``Fix the errors
    and try again``): a tool's words after a failure, whatever came before them."""
    head = s.split("\n", 1)[0]
    tail = [ln for ln in s.rsplit("\n", 4)[-4:] if ln.strip()][-2:]
    return any(_RETRY.search(_unquoted(ln)) and not _LOG_RECORD.search(ln) for ln in [head, *tail])


def _names_itself(line: str, tool: str) -> bool:
    """The line starts with the call's own tool name and goes on to say what went wrong
    (``apply_patch verification failed: ...``, ``Tool 'x' ...`` is ``_says_failed``'s)."""
    if len(tool) < 3 or not line.lower().startswith(tool.lower()):
        return False
    rest = line[len(tool):]
    return not rest[:1].isalnum() and bool(_CUE.search(_unquoted(rest))) and not _NO_CUE.search(rest)


def _says_failed(line: str) -> bool:
    """A sentence that reports a failure: a cue, and nothing saying all went well."""
    words = _unquoted(line)
    return bool(_PROSE.match(line)) and not _LOG_RECORD.search(line) and bool(_CUE.search(words)) and \
        not _NO_CUE.search(words)


_QUOTED = re.compile(r"(?<![A-Za-z])'[^'\n]*'(?![A-Za-z])|\"[^\"\n]*\"|`[^`\n]*`|‘[^’\n]*’")


def _unquoted(line: str) -> str:
    """The line without what it quotes: a name or a value (``'fix/error-handling'``) is not the
    message's own word."""
    return _QUOTED.sub("''", line)


def _tagged(s: str) -> bool:
    m = _TAG.match(s)
    return m is not None and s.rstrip().endswith(f"</{m.group(1)}>")


def _leads(first: str) -> bool:
    line = _WRAPPERS.sub("", first, count=1).strip()
    if _NO_CUE.search(line):
        return False  # "0 failed, 12 passed", "No errors found"
    m = _LEAD.match(line)
    if m is None:
        return False
    rest = m.group("rest")
    return rest is None or bool(_CUE.search(_unquoted(rest)))


def _about(s: str, target: str, tool: str) -> bool:
    """A short read result that names the call's target or tool, or says something is not there."""
    name = target.rsplit("/", 1)[-1]
    return bool(name and name in s) or bool(tool and tool in s) or bool(_ABSENT.search(s))


_ABSENT = re.compile(r"not found|no such|does not exist|doesn't exist|denied|not allowed|timed out|"
                     r"\b(?:argument|parameter|path)s?\b", re.I)


def _exit_code(s: str) -> int | None:
    """The exit status a wrapper reports where wrappers put it: in the first line or the last
    three (a number in the middle of the output is the output's own)."""
    head, _, rest = s.partition("\n")
    where = head + "\n" + "\n".join(rest.rsplit("\n", 3)[-3:])
    codes = [int(m.group(1)) for m in _EXIT.finditer(where)]
    return codes[-1] if codes else None


def _reports(body: str) -> bool:
    last = body[body.rfind("\n") + 1:].strip()
    if "Traceback (most recent call last):" in body and _EXC_LINE.match(last):
        return True  # a traceback that ends the output: what the command died of
    if len(body) > 2 * _SCAN:
        body = body[:_SCAN] + "\n" + body[-_SCAN:]
    low = body.lower()
    if not any(h in low for h in _HINTS):
        return False
    if "fail" in low or "error" in low:
        for m in _FAILED_COUNT.finditer(low):
            if m.start() and low[m.start() - 1].isalnum():
                continue
            line = _line_at(body, m.start())
            if _LOG_RECORD.search(line):
                continue
            if _PASS_WORDS.search(line) or "error" in m.group(0):
                return True
    return any(not _LOG_RECORD.search(_line_at(body, m.start())) for m in _REPORTS.finditer(body))


def _line_at(text: str, pos: int) -> str:
    end = text.find("\n", pos)
    return text[text.rfind("\n", 0, pos) + 1: end if end >= 0 else None]


_STATUS_LINE = re.compile(r"^HTTP/\d(?:\.\d)? [45]\d\d\b|<title>[45]\d\d\b")


def _http_error(s: str) -> bool:
    """An HTTP error: its status line or error page, or a JSON error body (a wrapper's status line
    may follow it)."""
    if _STATUS_LINE.search(s[:300]):
        return True
    return s.startswith("{") and _json_error(s[: s.rfind("}") + 1])


def _json_error(text: str) -> bool:
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return False
    if not isinstance(obj, dict):
        return False
    errors = obj.get("errors")
    status = str(obj.get("status", "")).lower()
    return bool(obj.get("error")) or obj.get("ok") is False or obj.get("success") is False or (
        status in ("error", "failed", "failure")) or (len(status) == 3 and status.isdigit() and status >= "400") or (
        isinstance(errors, list) and bool(errors) and not obj.get("data"))


def error_cue(text: str) -> bool:
    """Any sign of an error in the first lines: too weak to decide alone, used with the model's
    behaviour (the same text answering different attempts)."""
    return bool(_CUE.search(text[:2000]))


def file_op(name: str, args: dict[str, Any] | None, tools: FileTools) -> tuple[FileOp, str]:
    """(operation, path) for a call; path is '' when unknown."""
    args = args or {}
    path = next((v for k in tools.path_keys if isinstance(v := args.get(k), str)), "")
    if name in tools.reads:
        return FileOp.READ, path
    if name in tools.writes:
        return FileOp.WRITE, path
    if name in tools.edits:
        return FileOp.EDIT, path
    if not tools.by_shape or not any(k in args for k in tools.path_keys):
        return FileOp.NONE, path
    if any(k in args for k in tools.edit_keys):
        return FileOp.EDIT, path
    if any(k in args for k in tools.content_keys):
        return FileOp.WRITE, path
    if _READ_NAME.search(name) or any(k in args for k in tools.range_keys):
        return FileOp.READ, path
    return FileOp.NONE, path


_READ_NAME = re.compile(r"read|view|cat|open|show|load|get_file", re.I)
