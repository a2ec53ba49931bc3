"""llama.cpp's rebuild of the tools (``servers.ServerTools``): each session's rebuild is kept while
sessions' builds interleave, so that the template is handed the same objects and what it derives
from them (the tools' block) is made once per session; and a list holding other schemas, even the
same list changed in place, is rebuilt."""

from __future__ import annotations

import json
from typing import Any

from budgeter.core import memo
from budgeter.tokenizers.formats import builtin_template, native
from budgeter.tokenizers.servers import ServerTools, llama_cpp_tool

CHAT = [{"role": "user", "content": "q"}]


def tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": "d", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}}}, "extra": "dropped by llama.cpp"}


def test_interleaved_sessions_keep_their_rebuilt_tools() -> None:
    fmt = ServerTools(builtin_template("qwen3.6"))
    sessions = [[tool(f"s{k}_{j}") for j in range(3)] for k in range(4)]
    expected = [builtin_template("qwen3.6").render(CHAT, [llama_cpp_tool(t) for t in s]) for s in sessions]
    first = [fmt._rebuilt(list(s)) for s in sessions]  # each build hands over a new list
    blocks = len(native._TOOL_BLOCKS._items)
    for _ in range(3):
        for k, s in enumerate(sessions):
            assert fmt._rebuilt(list(s)) is first[k]
            assert fmt.render(CHAT, list(s)) == expected[k]
    assert len(native._TOOL_BLOCKS._items) == blocks + len(sessions)  # one block per session, made once


def test_other_schemas_are_rebuilt_even_in_the_same_list() -> None:
    fmt = ServerTools(builtin_template("qwen3.6"))
    schemas = [tool("a")]
    before = fmt.render(CHAT, schemas)
    schemas[0] = tool("b")
    after = fmt.render(CHAT, schemas)
    assert after != before and '"name": "b"' in after and '"name": "a"' not in after
    assert "dropped by llama.cpp" not in after


def test_the_rebuilds_kept_count_against_the_memo_budget() -> None:
    """They hold schemas of sessions a replica let go: each counts about its text, and they hold no
    more characters than the budget."""
    before = memo.budget()
    memo.configure(4000)
    try:
        fmt = ServerTools(builtin_template("qwen3.6"))
        first = fmt._rebuilt([tool(f"s_{j}") for j in range(3)])
        assert fmt._rebuilds._items.chars >= len(json.dumps(first)) // 2
        for k in range(40):
            fmt._rebuilt([tool(f"s{k}_{j}") for j in range(3)])
            assert fmt._rebuilds._items.chars <= 4000
        assert len(fmt._rebuilds._items) < 40
    finally:
        memo.configure(before)
