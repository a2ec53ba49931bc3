"""A turn parses only the messages new since its conversation's previous request (``intake``),
and that changes nothing it does: the messages, tools and repairs are those of reading the whole
body; a history that differs in one byte deep down, other tools, or a session another process
changed between two requests are reconciled as before; the cache stays within its caps."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgeter.core.messages import Message
from budgeter.errors import InvalidInput
from budgeter.proxy import reconcile as rc
from budgeter.proxy.intake import Recent, parse, split
from budgeter.proxy.memo import Bounded
from budgeter.proxy.server import open_sessions
from budgeter.proxy.turns import Request
from tests.proxy.conftest import proxy_settings
from tests.proxy.upstream import Script

pytestmark = pytest.mark.shared

SYSTEM = {"role": "system", "content": "You are terse."}
TOOLS = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]


def call(i: int, arguments: str = '{"path": "."}') -> dict[str, Any]:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": "ls", "arguments": arguments}}]}


def history(turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "list the files"}]
    for i in range(turns):
        out += [call(i), {"role": "tool", "tool_call_id": f"c{i}", "content": f"file{i}.txt\n" * 20}]
    return out


def body(messages: list[dict[str, Any]], tools: list[dict[str, Any]] = TOOLS) -> bytes:
    return json.dumps({"model": "m", "messages": messages, "tools": tools}).encode()


def one_byte_changed(messages: list[dict[str, Any]], at: int) -> list[dict[str, Any]]:
    changed = [dict(m) for m in messages]
    text = changed[at]["content"]
    changed[at]["content"] = text[:5] + ("X" if text[5] != "X" else "Y") + text[6:]
    return changed


def test_reading_only_the_new_messages_gives_what_reading_them_all_gives():
    recent = Recent(lines=8, max_bytes=1 << 30)
    grown = history(12)
    surrogate = call(99, '{"path": "\\ud800"}')  # an escaped lone surrogate in arguments: repaired
    bodies = [
        body(history(10)),
        body(grown),  # grown: the first 22 messages as before
        body([*grown, surrogate]),
        body([*grown, surrogate], tools=[*TOOLS, {"type": "function", "function": {"name": "cat"}}]),
        body(one_byte_changed([*grown, surrogate], 7)),  # one byte deep in the history
        body(grown[:9]),  # shorter: a regenerate of an earlier turn
        body([*grown, {"role": "user", "content": "lone \ud800 escaped in content"}]),  # read whole
        body(grown),
    ]
    before = None
    for data in bodies:
        got = recent.request(split(data), session="s")
        whole = Request.of(parse(data))
        assert (got.messages, got.tools, got.repairs) == (whole.messages, whole.tools, whole.repairs)
        before = got
    assert before is not None and len(recent) == 1


def test_the_messages_a_previous_request_held_byte_for_byte_are_not_parsed_again():
    recent = Recent(lines=8, max_bytes=1 << 30)
    first = recent.request(split(body(history(10))), session="s")
    again = recent.request(split(body(one_byte_changed(history(12), 7))), session="s")
    assert all(a is b for a, b in zip(first.messages[:7], again.messages[:7], strict=True))
    assert again.messages[7] is not first.messages[7] and again.messages[7] != first.messages[7]
    other = recent.request(split(body(history(12))), session="another conversation")
    assert not any(a is b for a, b in zip(other.messages, again.messages, strict=False))
    _, grown, went_on = recent.read(body(history(14)), session="another conversation")
    _, edited, _ = recent.read(body(one_byte_changed(history(14), 7)), session="another conversation")
    assert went_on and all(a is b for a, b in zip(other.messages, grown.messages[:26], strict=True))
    assert all(a is b for a, b in zip(grown.messages[:7], edited.messages[:7], strict=True))  # (read again)
    assert edited.messages[7] is not grown.messages[7]


def test_the_cache_holds_at_most_its_lines_and_bytes():
    data = [body(history(n)) for n in range(1, 7)]
    recent = Recent(lines=3, max_bytes=2 * (len(data[-1]) + len(data[-2])))
    for i, d in enumerate(data):
        recent.request(split(d), session=f"s{i}")
        assert len(recent) <= 3 and recent.size <= recent.max_bytes
    assert len(recent) == 2  # the last two bodies fill the bytes
    small = Recent(lines=3, max_bytes=len(data[0]))  # a body over the cap is not kept at all
    small.request(split(data[0]), session="s")
    assert len(small) == 0 and small.size == 0


def read_as_whole(recent: Recent, data: bytes, session: str = "") -> bool:
    """``recent.read(data)``, checked against reading the whole body: the same fields, messages,
    tools and repairs, or the same refusal. Whether it was read from where the previous ended."""
    try:
        whole_body = parse(data)
        whole = Request.of(whole_body)
    except InvalidInput as exc:
        with pytest.raises(InvalidInput) as err:
            recent.read(data, session=session)
        assert err.value.reason == exc.reason
        raise
    fields, got, continued = recent.read(data, session=session)
    assert (got.messages, got.tools, got.repairs) == (whole.messages, whole.tools, whole.repairs)
    assert {k: v for k, v in fields.items() if k != "messages"} == {
        k: v for k, v in whole_body.items() if k != "messages"}
    return continued


def test_a_body_that_goes_on_from_the_previous_one_is_read_from_where_that_ended():
    for session in ("s", ""):  # named by the client, or by its first two messages
        recent = Recent(lines=8, max_bytes=1 << 30)
        grown = history(12)
        compact = json.dumps({"model": "m", "messages": grown[:6], "stream": False}, separators=(",", ":"))
        bodies = [
            (body(history(10)), False),
            (body(grown), True),  # two more messages
            (body(grown), True),  # the same again: a regenerate
            (json.dumps({"model": "m", "messages": grown, "tools": TOOLS, "n": 2}).encode(), True),
            (body([*grown, {"role": "user", "content": "lone \ud800"}]), False),  # msgspec refuses it: whole
            (body(one_byte_changed(grown, 7)), False),
            (body(grown[:9]), False),  # a regenerate of an earlier turn
            (compact.encode(), False),  # other spacing
            (compact.replace('}],"stream"', '} , {"role":"user","content":"u"} ],"stream"').encode(), True),
            (json.dumps({"messages": grown[:4], "model": "m"}).encode(), False),
            (b'{"messages": %s, "model": "m"}' % json.dumps(grown[:5]).encode(), True),
            (b'{"messages": %s, "model": "m", "messages": %s}' % (
                json.dumps(grown[:6]).encode(), json.dumps(grown[:2]).encode()), False),  # the last one counts
        ]
        for data, continues in bodies:
            assert read_as_whole(recent, data, session) == continues, data[:80]


def test_fields_with_the_same_raw_json_as_the_previous_request_are_not_read_again():
    """A continued body's tools (and every field but its messages) are taken as read last time
    when their raw JSON is the same, whichever side of the messages they stand; changed ones are
    read again (tools before the messages: the body is read whole), and every read equals reading
    the whole body."""
    other = [*TOOLS, {"type": "function", "function": {"name": "cat", "parameters": {"type": "object"}}}]
    for tools_first in (False, True):
        recent = Recent(lines=8, max_bytes=1 << 30)
        read, last = [], TOOLS
        for turns, tools in ((4, TOOLS), (5, TOOLS), (6, other), (7, other), (7, TOOLS)):
            fields = {"tools": tools, "messages": history(turns)} if tools_first else {
                "messages": history(turns), "tools": tools}
            data = json.dumps({**fields, "model": "m"}).encode()
            assert read_as_whole(recent, data, "s") == (turns > 4 and not (tools_first and tools != last))
            read.append(recent.read(data, session="s")[0]["tools"])  # (the same body again: continued)
            last = tools
        assert read[1] is read[0] and read[3] is read[2] and read[4] is not read[3]
        assert read[2] == other and read[4] == TOOLS


_MESSAGES = st.lists(st.builds(lambda role, text: {"role": role, "content": text},
                               st.sampled_from(["user", "assistant"]), st.text(max_size=30)), min_size=1, max_size=6)


@settings(max_examples=120, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["grow", "same", "edit", "cut"]), _MESSAGES), min_size=1, max_size=6),
       st.sampled_from([(", ", ": "), (",", ":"), (" , ", " : ")]), st.booleans(), st.booleans(),
       st.sampled_from(["s", ""]))
def test_reading_from_where_the_previous_body_ended_gives_what_reading_it_whole_gives(
        steps, separators, messages_first, vary_after, session):
    """Any sequence of requests (each grows, repeats, edits or cuts the history), in any spacing
    and order of fields, reads as reading each body whole reads it."""
    recent = Recent(lines=4, max_bytes=1 << 30)
    messages = [{"role": "system", "content": "You are a careful, terse assistant. " * 3}]
    kept: dict[str, list[dict[str, Any]]] = {}
    """The previous request of each conversation, as ``recent`` keeps them: by the session's name,
    or unnamed by its first two messages (a shorter body is kept by none), the 4 latest."""
    for k, (op, more) in enumerate(steps):
        if op == "grow":
            messages = [*messages, *more]
        elif op == "edit" and len(messages) > 1:
            messages = [*messages[:-1], {**messages[-1], "content": messages[-1]["content"] + "!"}]
        elif op == "cut" and len(messages) > 1:
            messages = messages[:-1]
        fields: dict[str, Any] = {"messages": messages, "model": "m"} if messages_first else {
            "model": "m", "messages": messages}
        if vary_after:
            fields["stream"] = k % 2 == 0
        key = session or (json.dumps(messages[:2]) if len(messages) >= 2 else "")
        previous = kept.get(key) if key else None
        goes_on = previous is not None and messages[:len(previous)] == previous
        assert read_as_whole(recent, json.dumps(fields, separators=separators).encode(), session) == goes_on
        if key:
            kept.pop(key, None)
            kept[key] = messages
            while len(kept) > 4:
                del kept[next(iter(kept))]


def test_conversations_that_begin_alike_go_on_each_from_its_own_previous_request():
    """Unnamed conversations of one agent share their first bytes: each is still found by where
    its second message begins, up to ``CANDIDATES`` of them whose second messages begin alike."""
    from budgeter.proxy.intake import CANDIDATES

    recent = Recent(lines=64, max_bytes=1 << 30)
    count = CANDIDATES + 2
    talks = [[SYSTEM, {"role": "user", "content": f"task {k}: " + "x" * 40}] for k in range(count)]
    for turn in range(3):
        went_on = []
        for k in range(count):
            talks[k] = [*talks[k], {"role": "assistant", "content": f"a{turn}"}] if turn else talks[k]
            went_on.append(read_as_whole(recent, body(talks[k]), ""))
        assert went_on == [turn > 0] * count
    alike = Recent(lines=64, max_bytes=1 << 30)  # their second messages begin alike too
    talks = [[SYSTEM, {"role": "user", "content": "x" * 80 + f" task {k}"}] for k in range(CANDIDATES)]
    for turn in range(3):
        went_on = [read_as_whole(alike, body([*talk, *[{"role": "assistant", "content": "a"}] * turn]), "")
                   for talk in talks]
        assert went_on == [turn > 0] * CANDIDATES


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=',[]{}":0123 .eE-+\\/tuefalsnrol\n\ud800', max_size=60), st.booleans())
def test_any_bytes_after_the_previous_request_read_as_reading_the_body_whole_reads_them(tail, named):
    """Whatever follows the end of the previous request's last message (new messages, fields,
    garbage), reading from there gives the request, or the refusal, that reading it whole gives."""
    recent = Recent(lines=4, max_bytes=1 << 30)
    first = json.dumps({"model": "m", "messages": history(2)}).encode()
    read_as_whole(recent, first, "s" if named else "")
    prefix = first[:first.rindex(b"]")]  # up to the end of the last message
    with contextlib.suppress(InvalidInput):  # refused alike (checked inside)
        read_as_whole(recent, prefix + tail.encode("utf-8", "surrogatepass"), "s" if named else "")


def test_a_bad_body_that_goes_on_from_a_good_one_is_refused_as_reading_it_whole_refuses_it():
    recent = Recent(lines=8, max_bytes=1 << 30)
    good = history(3)
    read_as_whole(recent, body(good), "s")
    good_json = json.dumps(good)[:-1]
    for rest, reason in [(b', {"role": "user", "content": "\xff"}]', "INVALID_JSON"),
                         (b', {"role": "user", "content": "a"},]', "INVALID_JSON"),
                         (b', NaN]', "INVALID_MESSAGE"), (b', 5]', "INVALID_MESSAGE"),
                         (b', {"role": "user", "content": "a"}], "stream": "yes"', "INVALID_INPUT"),
                         (b']]', "INVALID_JSON")]:
        data = b'{"model": "m", "messages": ' + good_json.encode() + rest + b"}"
        with pytest.raises(InvalidInput) as err:
            read_as_whole(recent, data, "s")
        assert err.value.reason == reason, rest


@pytest.mark.parametrize(("raw", "reason"), [
    (b'{"messages": [{"role": "user", "content": "\xff"}]}', "INVALID_JSON"),  # msgspec passes over it
    (b'{"messages": [{"role": "user", "content": "a"},]}', "INVALID_JSON"),
    (b"[1]", "INVALID_JSON"),
    (b'{"messages": [NaN]}', "INVALID_MESSAGE"),  # JSON to Python, not a message
    (b'{"messages": {"role": "user"}}', "INVALID_MESSAGE"),
])
def test_a_bad_body_is_refused_as_reading_it_whole_refuses_it(raw, reason):
    with pytest.raises(InvalidInput) as split_err:
        Recent(lines=1, max_bytes=1 << 20).request(split(raw))
    with pytest.raises(InvalidInput) as whole_err:
        Request.of(parse(raw))
    assert split_err.value.reason == whole_err.value.reason == reason


def ask(proxy, messages, *, tools=None, session="agent"):
    extra = {"tools": tools} if tools else {}
    raw = proxy.client.chat.completions.with_raw_response.create(
        model="m", messages=messages, extra_headers={"X-Budgeter-Session": session}, **extra)
    return raw.parse(), raw.headers


def contents(proxy, session):
    return [m.content for m in proxy.history(session)]


def test_a_history_that_differs_in_one_byte_deep_down_forks(proxy):
    proxy.upstream.script(Script(content="a1"), Script(content="a2"), Script(content="b2"))
    first = [SYSTEM, *[{"role": "user", "content": f"note {i}: " + "x" * 200} for i in range(20)]]
    ask(proxy, first)
    second = [*first, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"}]
    _, h2 = ask(proxy, second)
    assert h2["x-budgeter-forked"] == "false" and h2["x-budgeter-appended"] == "1"
    edited = one_byte_changed(second, 3)
    _, h3 = ask(proxy, edited)
    assert h3["x-budgeter-forked"] == "true" and h3["x-budgeter-session"].startswith("agent.")
    assert contents(proxy, h3["x-budgeter-session"]) == [m["content"] for m in edited] + ["b2"]
    assert contents(proxy, "agent") == [m["content"] for m in second] + ["a2"]  # untouched


def test_the_official_clients_bodies_are_read_from_where_the_previous_request_ended(proxy):
    """With and without a session header, each turn after a conversation's first reads only its
    new bytes, as ``/metrics`` counts."""
    proxy.upstream.script(*[Script(content=f"r{i}") for i in range(6)])
    for headers in ({"X-Budgeter-Session": "agent"}, {}):
        messages = [SYSTEM, {"role": "user", "content": "u0"}]
        for i in range(3):
            reply = proxy.client.chat.completions.create(model="m", messages=messages, tools=TOOLS,
                                                         extra_headers=headers)
            messages = [*messages, {"role": "assistant", "content": reply.choices[0].message.content},
                        {"role": "user", "content": f"u{i + 1}"}]
    text = httpx.get(proxy.base_url.removesuffix("/v1") + "/metrics").text
    assert 'budgeter_proxy_request_bodies_total{read="continued"} 4.0' in text
    assert 'budgeter_proxy_request_bodies_total{read="whole"} 2.0' in text


def test_other_tools_with_the_same_messages_fork(proxy):
    proxy.upstream.script(Script(content="a1"), Script(content="a2"), Script(content="a3"))
    first = [SYSTEM, {"role": "user", "content": "u1"}]
    ask(proxy, first, tools=TOOLS)
    second = [*first, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"}]
    _, h2 = ask(proxy, second, tools=TOOLS)
    assert h2["x-budgeter-forked"] == "false"
    more = [*TOOLS, {"type": "function", "function": {"name": "cat", "parameters": {"type": "object"}}}]
    _, h3 = ask(proxy, second, tools=more)
    assert h3["x-budgeter-forked"] == "true"
    fork = proxy.sessions.line(h3["x-budgeter-session"])
    assert [t["function"]["name"] for t in fork.tools] == ["ls", "cat"]
    assert len(proxy.sessions.line("agent").history) == 5  # the first line, its reply a2 and nothing else


def test_a_session_another_process_changed_between_two_requests_is_read_from_the_store(make_proxy, tmp_path,
                                                                                      qwen3_path):
    store = f"sqlite://{tmp_path / 'shared.db'}"
    proxy = make_proxy(store=store)
    other = open_sessions(proxy_settings(proxy.upstream.base_url, qwen3_path, store=store))  # as `budgeter
    # serve` in another process would open it
    proxy.upstream.script(Script(content="a1"), Script(content="a2"), Script(content="c3"))
    try:
        first = [SYSTEM, {"role": "user", "content": "u1"}]
        ask(proxy, first)
        assert proxy.server.settled(30)  # a1 is stored (just after the response) before the other writes
        other.append("agent", [Message(role="user", content="u2")])  # the same next message, stored by another
        second = [*first, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"}]
        _, h2 = ask(proxy, second)
        assert h2["x-budgeter-forked"] == "false" and h2["x-budgeter-appended"] == "0"
        assert contents(proxy, "agent") == ["You are terse.", "u1", "a1", "u2", "a2"]
        other.append("agent", [Message(role="user", content="u3 from elsewhere")])  # another next message
        third = [*second, {"role": "assistant", "content": "a2"}, {"role": "user", "content": "u3"}]
        _, h3 = ask(proxy, third)
        assert h3["x-budgeter-forked"] == "true"
        assert contents(proxy, "agent")[-1] == "u3 from elsewhere"  # its line is left as the other wrote it
        assert contents(proxy, h3["x-budgeter-session"]) == [m["content"] for m in third] + ["c3"]
    finally:
        other.store.close()


def test_a_body_with_invalid_utf8_in_a_new_message_is_a_400(proxy):
    proxy.upstream.script(Script(content="a1"))
    first = [SYSTEM, {"role": "user", "content": "u1"}]
    ask(proxy, first)
    data = body([*first, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "BAD"}], tools=[])
    r = httpx.post(proxy.base_url + "/chat/completions", content=data.replace(b"BAD", b"\xff\xfe"),
                   headers={"X-Budgeter-Session": "agent", "content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_JSON"


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(alphabet="ab", max_size=2), min_size=1, max_size=8), st.data())
def test_a_match_that_passes_over_the_pairs_seen_before_is_the_match_made_afresh(contents, data):
    """``rc.match`` with the previous turn's ``Seen`` (the same objects, equal copies, an edit, a
    shorter or longer request) finds what comparing every pair finds."""
    base = [Message("user", c) for c in contents]
    earlier = base[:data.draw(st.integers(1, len(base)))]
    seen = rc.Seen(tuple(earlier), tuple(earlier))
    copies = [Message(m.role, m.content) for m in base]
    stored = data.draw(st.sampled_from([base, copies, base[:-1] or base]))
    request = list(data.draw(st.sampled_from([base, copies, [*base, Message("user", "new")], base[:1]])))
    if data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(request) - 1))
        request[at] = Message("user", request[at].content + "!")
    assert rc.match(stored, request, seen=seen) == rc.match(stored, request)


def test_remembered_fork_ids_are_those_fork_id_computes():
    fork_ids = rc.ForkIds(Bounded(entries=2, max_bytes=1 << 20))
    base = [Message("system", "s"), *[Message("user", f"u{i}") for i in range(6)]]
    edited = [*base[:3], Message("user", "u2, edited"), *base[4:]]
    equal = [Message(m.role, m.content) for m in base]  # the same content, other objects
    calls = [(base, TOOLS, 3), (base, TOOLS, 3), (edited, TOOLS, 3), (equal, TOOLS, 3), (base, [], 3),
             (base, TOOLS, 5), (base[:3], TOOLS, 3), (base, TOOLS, 3), (base, TOOLS, 2)]
    for messages, tools, at in calls:
        match = rc.Match(False, at)
        assert fork_ids("root", messages, tools, match) == rc.fork_id("root", messages, tools, match)
    assert fork_ids("other", base, TOOLS, rc.Match(False, 3)).startswith("other.")


def test_a_conversation_goes_on_in_a_fork_and_an_edit_inside_it_forks_again(proxy):
    proxy.upstream.script(*[Script(content=f"r{i}") for i in range(8)])
    messages = [SYSTEM, {"role": "user", "content": "u0"}]
    for i in range(3):  # r0, r1, r2 on the line "agent"
        reply, _ = ask(proxy, messages)
        messages = [*messages, {"role": "assistant", "content": reply.choices[0].message.content},
                    {"role": "user", "content": f"u{i + 1}"}]
    messages[4] = {"role": "assistant", "content": "r1, edited by the client"}
    forks = []
    for i in range(3):  # r3, r4, r5 in the fork the edit made, one line
        reply, h = ask(proxy, messages)
        forks.append(h["x-budgeter-session"])
        assert h["x-budgeter-forked"] == "true" and h["x-budgeter-appended"] == ("8" if i == 0 else "1")
        messages = [*messages, {"role": "assistant", "content": reply.choices[0].message.content},
                    {"role": "user", "content": f"v{i}"}]
    assert len(set(forks)) == 1 and contents(proxy, forks[0]) == [m["content"] for m in messages[:-1]]
    messages[8] = {"role": "assistant", "content": "r3, edited too"}  # inside the fork, past the first edit
    _, h = ask(proxy, messages)
    assert h["x-budgeter-session"] not in ("agent", forks[0])
    assert contents(proxy, h["x-budgeter-session"]) == [m["content"] for m in messages] + ["r6"]
    assert contents(proxy, forks[0])[-1] == "r5" and contents(proxy, "agent")[-1] == "r2"


def test_a_bounded_memo_drops_the_least_recently_used_past_its_entries_or_bytes():
    memo: Bounded[str, int] = Bounded(entries=3, max_bytes=100)
    for i in range(4):
        memo.put(f"k{i}", i, 10)
    assert len(memo) == 3 and memo.get("k0") is None and memo.size == 30
    assert memo.get("k1") == 1  # now the most recently used
    memo.put("big", 9, 80)  # over 100 bytes: the least recently used go first
    assert memo.get("k2") is None and memo.get("k1") == 1 and memo.size <= 100
    memo.put("k1", 1, 101)  # larger than the whole memo: not kept, nor its old value
    assert memo.get("k1") is None and memo.size == 90 and memo.get("k3") == 3


_LEAVES = (st.none() | st.booleans() | st.integers(-(10**30), 10**30) | st.floats(allow_nan=False)
           | st.text(alphabet=st.characters(codec="utf-8")))
_VALUES = st.recursive(_LEAVES, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.text(max_size=4), inner, max_size=4), max_leaves=12)
_ODD = ['{"a": NaN}', '{"a": 1e400}', '[-Infinity]', '"\\ud800"', '{"x": "\\udfff", "y": 12345678901234567890123}',
        '[' * 5000 + ']' * 5000, '{"a": 1, "a": 2}', '{"a": 1', '\xff', '']


@settings(max_examples=300, deadline=None)
@given(_VALUES, st.sampled_from(["json", "bytes", "raw"]))
def test_intake_reads_json_as_jsonargs_reads_it(value, form):
    """msgspec reads what ``jsonargs.loads`` reads, to the same value (integers past 64 bits
    included)."""
    import msgspec

    from budgeter.core.jsonargs import loads as reference
    from budgeter.proxy.intake import loads

    text = json.dumps(value)
    data = {"json": text, "bytes": text.encode(), "raw": msgspec.Raw(text.encode())}[form]
    assert loads(data) == reference(text) and json.dumps(loads(data)) == text


@pytest.mark.parametrize("odd", _ODD)
def test_what_msgspec_refuses_jsonargs_reads_or_refuses_as_before(odd):
    from budgeter.core.jsonargs import loads as reference
    from budgeter.proxy.intake import loads

    def outcome(read: Any) -> tuple[str, Any]:
        try:
            return "value", json.dumps(read(odd))
        except (ValueError, RecursionError) as exc:
            return "error", type(exc)

    assert outcome(loads) == outcome(reference)
