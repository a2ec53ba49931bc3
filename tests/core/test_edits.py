"""PlanEdits: bottom-up application of line-range edits queued against one snapshot."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from budgeter.core.edits import Edit, plan_edits, strip_line_numbers

FILE = "".join(f"line {n}\n" for n in range(1, 151))
EDITS = [  # five spaced edits, some growing, some shrinking, all numbered against FILE
    Edit(10, 12, "ten\nten-b\nten-c\nten-d\nten-e\n"),    # 3 lines -> 5 (+2)
    Edit(40, 49, "forty\n"),                              # 10 -> 1 (-9)
    Edit(75, 75, "seventy-five a\nseventy-five b\n"),     # 1 -> 2 (+1)
    Edit(100, 103, ""),                                   # delete 4 (-4)
    Edit(140, 139, "inserted before 140\n"),              # insert (+1)
]


def expected_file() -> str:
    out = []
    for n in range(1, 151):
        if n == 10:
            out += ["ten", "ten-b", "ten-c", "ten-d", "ten-e"]
        if n == 40:
            out.append("forty")
        if n == 75:
            out += ["seventy-five a", "seventy-five b"]
        if n == 140:
            out.append("inserted before 140")
        if 10 <= n <= 12 or 40 <= n <= 49 or n == 75 or 100 <= n <= 103:
            continue
        out.append(f"line {n}")
    return "\n".join(out) + "\n"


def naive_top_down(text: str, edits) -> str:
    lines = text.split("\n")[:-1]
    for e in edits:
        body = e.body[:-1].split("\n") if e.body else []
        lines[e.start_line - 1:e.end_line] = body
    return "\n".join(lines) + "\n"


def test_five_edits_land_bottom_up_where_top_down_fails():
    want = expected_file().split("\n")
    naive = naive_top_down(FILE, EDITS).split("\n")
    assert naive != want  # the failure this guards against
    plan = plan_edits(FILE, EDITS)
    assert plan.ok and plan.text.split("\n") == want
    assert [r.shift for r in plan.results] == [2, -9, 1, -4, 1]
    assert plan.order == (4, 3, 2, 1, 0)


def test_ranges_overlaps_and_expected_old_lines():
    plan = plan_edits(FILE, [Edit(5, 8, "x\n"), Edit(7, 9, "y\n"), Edit(151, 152, "z\n"),
                             Edit(20, 21, "w\n", expected_old="line 20\nline 21\n"),
                             Edit(30, 30, "v\n", expected_old="something else\n"),
                             Edit(60, 60, "u\n")])
    status = [r.status for r in plan.results]
    assert status == ["OVERLAP", "OVERLAP", "OUT_OF_RANGE", "APPLIED", "MISMATCH", "APPLIED"]
    assert plan.results[1].message == "edits 0 and 1 overlap (lines 5-8 and 7-9)"
    assert not plan.ok
    assert "w\n" in plan.text and "u\n" in plan.text and "v\n" not in plan.text
    assert "line 5\n" in plan.text  # rejected edits change nothing
    wide = plan_edits(FILE, [Edit(1, 50, "big\n"), Edit(10, 12, "a\n"), Edit(30, 31, "b\n")])
    assert [r.status for r in wide.results] == ["OVERLAP"] * 3 and wide.text == FILE


def test_numbered_snapshots_are_read_back_as_text():
    numbered = "".join(f"{n:6d}\tline {n}\n" for n in range(1, 151))
    assert strip_line_numbers(numbered) == FILE
    assert strip_line_numbers("1: a\n3: b\n") == "1: a\n3: b\n"  # not consecutive: left alone


@st.composite
def edit_sets(draw):
    n = draw(st.integers(1, 60))
    lines = [f"L{i}" for i in range(1, n + 1)]
    cuts = sorted(draw(st.lists(st.integers(1, n + 1), min_size=0, max_size=12, unique=True)))
    edits, prev_end = [], 0
    for start in cuts:
        if start <= prev_end:
            continue
        end = draw(st.integers(start - 1, min(n, start + 4)))
        if edits and start == edits[-1].start_line:
            continue
        body = "".join(f"new{start}.{k}\n" for k in range(draw(st.integers(0, 4))))
        edits.append(Edit(start, end, body))
        prev_end = max(end, start)
    order = draw(st.permutations(range(len(edits))))
    return lines, [edits[i] for i in order]


@given(edit_sets())
def test_result_equals_applying_by_line_identity(case):
    lines, edits = case
    plan = plan_edits("\n".join(lines) + "\n", edits)
    assert plan.ok
    by_start = {e.start_line: e for e in edits}
    want: list[str] = []
    skip_until = 0
    for n in range(1, len(lines) + 2):
        e = by_start.get(n)
        if e is not None:
            want += e.body.split("\n")[:-1] if e.body else []
            skip_until = e.end_line
        if n <= len(lines) and n > skip_until:
            want.append(lines[n - 1])
    assert plan.text == ("\n".join(want) + "\n" if want else "")
