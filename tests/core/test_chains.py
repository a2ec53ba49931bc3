"""Digest payloads as links: each dropped message is kept once, however many drops follow, and the
payload a handle names is still the JSON list of every message its digest replaced, byte for byte."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from budgeter.core import Engine, Policy
from budgeter.core.chains import Link, ListHash, assemble, joined, list_handle
from budgeter.core.jsonargs import dumps
from budgeter.core.markers import handle_for, handles_in
from budgeter.core.messages import Message, ToolCall, from_openai_list, to_openai
from budgeter.core.pipeline import Context, Kind
from budgeter.core.steps.drop import _as_json, _digest_message
from budgeter.errors import PayloadNotFound
from tests.bench.bench_service import turns
from tests.bench.sessions import make_session

json_texts = st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                          lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(), kids, max_size=3),
                          max_leaves=8).map(dumps)


@given(st.text(alphabet="0123456789abcdef", max_size=16),
       st.lists(st.tuples(st.integers(0, 10**6), json_texts), max_size=6))
def test_a_link_reads_back_as_written(base, items):
    link = Link(base, tuple(items))
    assert Link.decode(link.encode()) == link


@given(st.lists(json_texts, max_size=6))
def test_the_handle_of_a_list_is_that_of_its_text(items):
    assert list_handle(items) == handle_for(joined(items))
    assert json.loads(joined(items)) == [json.loads(i) for i in items]


@given(st.lists(json_texts, max_size=8), st.lists(st.integers(0, 8), max_size=4))
def test_a_list_hashed_in_parts_has_the_handle_of_the_whole(items, cuts):
    hashed, start = ListHash(), 0
    for cut in sorted(cuts):
        hashed = hashed.extended(items[start:cut])
        start = max(start, cut)
    whole = hashed.extended(items[start:])
    assert whole.handle() == list_handle(items)
    assert hashed.handle() == list_handle(items[:max(start, 0)])  # extending left the part as it was


any_text = st.text(st.characters(blacklist_categories=()), max_size=12)  # lone surrogates too


@given(any_text, any_text, st.sampled_from(["user", "assistant", "tool"]))
def test_a_digest_holds_each_message_as_dumps_writes_it(content, arguments, role):
    m = Message(role=role, content=content, tool_calls=(ToolCall("c1", "f", arguments),) if role == "assistant" else (),
                tool_call_id="c1" if role == "tool" else None, finish_reason="stop" if role == "assistant" else None)
    assert _as_json(m) == dumps(to_openai(m, extensions=True))


def test_a_looping_chain_is_refused():
    links = {"a": Link("b", ((1, "1"),)), "b": Link("a", ((2, "2"),))}
    with pytest.raises(ValueError, match="loop"):
        assemble("a", links.__getitem__)


def test_each_drop_keeps_only_what_it_adds(qwen36):
    body = make_session(7, chars=600_000)
    session = Engine(qwen36, policy=Policy(window=16384, reserve=1024), tools=body["tools"])
    shown: dict[str, tuple[int, ...]] = {}
    fresh = Context(qwen36, body["tools"], session.policy, session.log, target=0)
    for turn in turns(body["messages"]):
        session.append(from_openai_list(turn))
        session.build()
        for item in session._plan:
            handle = handles_in(item.message.content)[-1] if item.kind is Kind.DIGEST else ""
            if handle and handle not in shown:
                shown[handle] = item.covers
                # made from the digest before it, the text equals one made afresh (hash, counts)
                assert _digest_message(list(item.covers), fresh).content == item.message.content
    assert len(shown) >= 5  # drop after drop, each merged into the digest before it
    earlier = list(shown.values())
    # a drop that also took turns older than the newest its digest held (a file's read that was the
    # newest, a user's message): its hash resumed from before them, not from the digest's end
    assert any(b[:len(a)] != a for a, b in zip(earlier, earlier[1:], strict=False))
    based = 0
    for handle, covers in shown.items():
        payload = session.payload(handle)
        assert handle_for(payload) == handle  # a handle is its payload's hash, as for any payload
        assert payload == dumps([to_openai(session.history[i], extensions=True) for i in covers])
        based += bool(session.links[handle].base)
    assert based >= len(shown) - 1
    kept = [i for link in session.links.values() for i, _ in link.items]
    assert len(kept) == len(set(kept))  # no message kept twice: the links grow with history, not its square
    with pytest.raises(PayloadNotFound):
        session.payload("0" * 16)


def test_a_digest_counts_again_a_dropped_call_found_failed_later(qwen36):
    """A write given again with the same arguments shows the first did not do its job: once that
    first write is in a digest, the next digest counts it as failed (its tally made afresh)."""
    args = json.dumps({"path": "notes.txt", "content": "draft " * 20})

    def write(call_id: str) -> list[dict]:
        return [{"role": "assistant", "content": "", "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": "write_file", "arguments": args}}]},
                {"role": "tool", "tool_call_id": call_id, "content": "wrote notes.txt"}]

    def chat(k: int) -> list[dict]:
        return [{"role": "user", "content": f"part {k}: " + "go on with the plan " * 40},
                {"role": "assistant", "content": f"step {k}: " + "working through it " * 60}]

    session = Engine(qwen36, policy=Policy(window=4096, reserve=512))
    made: list[str] = []
    fresh = Context(qwen36, [], session.policy, session.log, target=0)
    turns_ = [[{"role": "system", "content": "You write files."}], write("w1")[:1], write("w1")[1:],
              *[chat(k) for k in range(16)], write("w2")[:1], write("w2")[1:], *[chat(k) for k in range(16, 40)]]
    for turn in turns_:
        session.append(from_openai_list(turn))
        session.build()
        digest = next((i for i in session._plan if i.kind is Kind.DIGEST), None)
        if digest is not None and digest.message.content not in made:
            made.append(digest.message.content)
            assert _digest_message(list(digest.covers), fresh).content == digest.message.content
    assert any("write_file ok" in d for d in made)  # dropped before the second write came
    assert "write_file failed x1" in made[-1]
