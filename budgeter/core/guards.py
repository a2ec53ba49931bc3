"""Tool-call guard rails: validate a call before the executor runs it, and rescue a lost path.

``validate_tool_call`` checks, in order: the arguments (VALID, REPAIRED with the lossless repair
applied, TRUNCATED, INVALID; a cut payload is never completed), the tool's JSON Schema (required
fields present, and non-empty for required strings; types; enums), budgeter's own elision markers
copied into the arguments, path arguments of a call that reads, writes, edits or runs something
that leave the workspace (``paths.path_problem``, against the policy's ``path_root`` when it names
one), and whether an identical call already failed in the session.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from budgeter.core.classify import CallKind, FileOp, call_kind, file_op
from budgeter.core.jsonargs import ArgStatus, classify_arguments, dumps
from budgeter.core.markers import contains_marker, handle_for
from budgeter.core.memo import IdentityMemo
from budgeter.core.messages import ToolCall
from budgeter.core.paths import path_leaves, path_problem
from budgeter.core.policy import Policy
from budgeter.core.schemas import plainly_valid
from budgeter.core.sniff import PathSuggestion, suggest_path
from budgeter.core.typing import JSONDict

FailureKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Problem:
    code: str
    """UNKNOWN_TOOL, SCHEMA, EMPTY_REQUIRED, COPIED_MARKER, UNSAFE_PATH or REPEATED_FAILURE."""
    field: str
    message: str


@dataclass(frozen=True, slots=True)
class CallVerdict:
    status: ArgStatus
    arguments: str
    """What to run: canonical JSON for VALID and REPAIRED, the text as given otherwise."""
    repair: str = ""
    detail: str = ""
    problems: tuple[Problem, ...] = ()
    repeat_of: int | None = None
    """History index of an identical call that already failed."""
    repeat_error: str = ""
    value: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    """The parsed arguments for VALID and REPAIRED."""

    @property
    def runnable(self) -> bool:
        return self.status in (ArgStatus.VALID, ArgStatus.REPAIRED) and not self.problems


def validate_tool_call(call: ToolCall, tools: Sequence[JSONDict] = (), *,
                       finish_reason: str | None = None,
                       failures: Mapping[FailureKey, tuple[int, str]] | None = None,
                       policy: Policy | None = None) -> CallVerdict:
    """``policy``: its ``file_tools`` and ``path_root`` (the defaults when None)."""
    verdict = classify_arguments(call.arguments, finish_reason=finish_reason)
    value = verdict.value
    problems: list[Problem] = []
    if tools:
        schema = tool_schema(tools, call.name)
        if schema is None:
            problems.append(Problem("UNKNOWN_TOOL", "name", f"no tool named {call.name!r} in tools"))
        elif value is not None:
            problems += schema_problems(value, schema)
    leaves = list(string_leaves(value)) if value is not None else [("", call.arguments)]
    problems += [Problem("COPIED_MARKER", path or "arguments",
                         f"{path or 'the arguments'} holds budgeter's elision marker: it was copied "
                         "from compressed history, not written")
                 for path, text in leaves if contains_marker(text)]
    if value is not None:
        problems += path_problems(call.name, value, leaves, policy or _DEFAULT_POLICY,
                                  named={p.field for p in problems})
    canonical = dumps(value) if value is not None else call.arguments
    earlier = (failures or {}).get((call.name, canonical))
    if earlier is not None:
        problems.append(Problem("REPEATED_FAILURE", "", f"identical to call #{earlier[0]}, "
                                f"which failed: {earlier[1]}"))
    return CallVerdict(verdict.status, canonical, verdict.repair, verdict.detail, tuple(problems),
                       earlier[0] if earlier else None, earlier[1] if earlier else "", value)


_DEFAULT_POLICY = Policy()
_TOUCHES = frozenset({CallKind.MUTATE, CallKind.READ, CallKind.COMMAND})


def path_problems(name: str, value: JSONDict, leaves: Sequence[tuple[str, str]], policy: Policy, *,
                  named: set[str]) -> list[Problem]:
    """UNSAFE_PATH for each path argument that leaves the workspace (``paths``), in a call that
    reads, writes, edits or runs something (``classify.call_kind``); a field ``named`` by an
    earlier problem is not named again. An empty path or ``.`` counts where the call reads, writes
    or edits a file, and the argument is not a directory's (``dir``, ``cwd``)."""
    op, _ = file_op(name, value, policy.file_tools)
    if op is FileOp.NONE and call_kind(name, value, op) not in _TOUCHES:
        return []
    out = []
    for where, text, is_dir in path_leaves(leaves):
        why = path_problem(text, root=policy.path_root, file=op is not FileOp.NONE and not is_dir)
        if why and where not in named:
            inside = f"the root {policy.path_root}" if policy.path_root else "the workspace"
            out.append(Problem("UNSAFE_PATH", where, f"{where} {text[:120]!r} {why}; paths must stay "
                               f"inside {inside}"))
    return out


def tool_schema(tools: Sequence[JSONDict], name: str) -> JSONDict | None:
    for tool in tools:
        fn = tool.get("function", tool) if isinstance(tool, dict) else {}
        if isinstance(fn, dict) and fn.get("name") == name:
            params = fn.get("parameters")
            return params if isinstance(params, dict) else {}
    return None


@functools.lru_cache(maxsize=1024)
def _validator(schema_text: str) -> Any:
    """A checked validator per distinct schema (checking a schema costs more than using it);
    a string when the schema itself is invalid."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    schema = json.loads(schema_text)
    if not plainly_valid(schema):  # (the meta-schema's walk: 0.5-0.7 ms a schema, ``core/schemas.py``)
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            return exc.message
    return Draft202012Validator(schema)


def _checker(schema: JSONDict) -> Any:
    try:
        return _validator(json.dumps(schema, sort_keys=True))
    except RecursionError:  # (the JSON Schema check follows about 120 levels: tools are held to fewer)
        return "it nests too deeply to check"


_CHECKERS = IdentityMemo(limit=1024)
"""Each schema object's validator: a session's tools are the same objects on every append, and
writing a schema out to find its validator was a fifth of checking a call (``bench_instructions``)."""


def schema_problems(value: JSONDict, schema: JSONDict) -> list[Problem]:
    from referencing.exceptions import Unresolvable  # (jsonschema's own, loaded with it)

    checker = _CHECKERS.one(schema, _checker, schema)
    if isinstance(checker, str):
        return [Problem("SCHEMA", "", f"the tool's own schema is invalid: {checker}")]
    try:
        out = [Problem("SCHEMA", _path(e.absolute_path), e.message) for e in checker.iter_errors(value)]
    except RecursionError:
        return [Problem("SCHEMA", "", "the arguments nest too deeply to check")]
    except Unresolvable as exc:  # a $ref to nowhere, or to a document (nothing is fetched)
        return [Problem("SCHEMA", "", f"the tool's own schema has a $ref that does not resolve: {str(exc)[:200]}")]
    props = schema.get("properties") or {}
    for key in schema.get("required") or ():
        declared = props.get(key) if isinstance(props, dict) else None
        is_string = isinstance(declared, dict) and declared.get("type") in (None, "string")
        if is_string and value.get(key) == "":
            out.append(Problem("EMPTY_REQUIRED", key, f"required field {key!r} is empty"))
    return out


def _path(parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def string_leaves(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(dotted path, text) of every string in a parsed JSON value; iterative, so any depth that
    ``json.loads`` accepted is walked without recursion."""
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, str):
            yield where, v
        elif isinstance(v, dict):
            stack.extend((f"{where}.{k}" if where else str(k), x) for k, x in reversed(v.items()))
        elif isinstance(v, list):
            stack.extend((f"{where}[{i}]", x) for i, x in reversed(list(enumerate(v))))


def rescue_path(content: str, *, html_pages_seen: int = 0) -> PathSuggestion:
    """``suggest_path`` with a stamp derived from the content (the same content, the same path)."""
    return suggest_path(content, html_pages_seen=html_pages_seen, stamp=handle_for(content)[:8])
