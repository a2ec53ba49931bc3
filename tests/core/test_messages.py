"""Ingestion: lone surrogates are made U+FFFD, and each repair is reported (``Repair``)."""

from __future__ import annotations

import json

from budgeter.core.messages import Repair, from_openai_list, repaired_note, to_openai

CALL_ARGS = '{"path": "a.txt", "note": "x \\udc00 y \\ud83d\\ude00", "\\ud800": 1}'
"""Two lone surrogates as JSON escapes (a value and a key) beside a valid escaped pair."""


def test_each_repaired_field_is_reported_with_its_message_field_call_and_count():
    repairs: list[Repair] = []
    messages = from_openai_list([
        {"role": "user", "content": "fine"},
        {"role": "user", "content": [{"type": "text", "text": "a \ud800"}, {"type": "text", "text": "\udfff b"}]},
        {"role": "assistant", "content": "", "reasoning_content": "hmm \udc00",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "write", "arguments": CALL_ARGS}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ], repairs=repairs)
    assert sorted(repairs, key=lambda r: (r.index, r.field)) == [
        Repair(1, "content", 2), Repair(2, "reasoning_content", 1),
        Repair(2, "tool_calls[0].function.arguments", 2, "c1")]
    assert messages[1].content == "a \ufffd\ufffd b" and messages[2].reasoning == "hmm \ufffd"
    args = messages[2].tool_calls[0].arguments
    assert json.loads(args) == {"path": "a.txt", "note": "x \ufffd y \U0001f600", "\ufffd": 1}
    for m in messages:  # every field holds valid UTF-8 now
        json.dumps(to_openai(m), ensure_ascii=False).encode("utf-8")
    note = repaired_note(repairs)
    assert note.startswith("5 lone surrogates replaced with U+FFFD: ")
    assert "messages[2].tool_calls[0].function.arguments of call 'c1' (2)" in note
    assert "messages[1].content (2)" in note


def test_a_raw_surrogate_in_arguments_and_in_object_arguments_is_reported_too():
    repairs: list[Repair] = []
    from_openai_list([{"role": "assistant", "content": "", "tool_calls": [
        {"id": "a", "function": {"name": "f", "arguments": '{"p": "\ud800"}'}},
        {"id": "b", "function": {"name": "f", "arguments": {"p": "\udc00\udc00"}}}]}], repairs=repairs)
    assert repairs == [Repair(0, "tool_calls[0].function.arguments", 1, "a"),
                       Repair(0, "tool_calls[1].function.arguments", 2, "b")]


def test_clean_input_reports_nothing_and_a_valid_pair_is_no_repair():
    repairs: list[Repair] = []
    from_openai_list([{"role": "user", "content": "emoji \U0001f600 é"},
                      {"role": "assistant", "content": "", "tool_calls": [
                          {"id": "c", "function": {"name": "f", "arguments": '{"e": "\\ud83d\\ude00"}'}}]}],
                     repairs=repairs)
    assert repairs == [] and repaired_note(repairs) == ""


def test_the_note_names_the_first_places_and_counts_the_rest():
    repairs: list[Repair] = []
    from_openai_list([{"role": "user", "content": "\ud800"}] * 12, repairs=repairs)
    note = repaired_note(repairs)
    assert note.startswith("12 lone surrogates") and "messages[7].content (1)" in note
    assert "messages[8]" not in note and note.endswith(", and 4 more fields")
