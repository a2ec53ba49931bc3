"""Issue 54: mutated valid requests against a real server, through both front doors.

Each example is a realistic agent session (``tests/fuzz/mutations.py``) with hostile changes,
sent as a sequence of requests. Every answer is a defined one: gRPC never INTERNAL or UNKNOWN and
always an ErrorInfo (reason, domain "budgeter"); the proxy never a 5xx but the 502/504 that name
the upstream, and every 4xx an OpenAI-style error. Afterwards every session the example touched
can still be listed and built:

- gRPC: ListSessions includes it, GetSession and BuildPrompt answer OK (no build, then or on the
  way, is a TEMPLATE_ERROR; only the stateless CountTokens may be, for messages a template cannot
  render, such as arguments that are a JSON array). A FAILED_PRECONDITION
  ``PINNED_OVER_BUDGET`` is accepted only when the session's own policy is the cause (a tiny
  window, a huge reserve): a build with overrides (window 2**30, reserve 1024) must then succeed.
  Sessions created with a TTL under a minute may have expired and are exempt (NOT_FOUND then).
- proxy (with ``--recall-tool``; the scripted upstream answers with text, tool calls, calls cut
  by ``length``, recall-only calls, a 429, or a 200 that is no completion): never a
  TEMPLATE_ERROR; the session answers the next plain turn with 200 (or 400 ``PINNED_OVER_BUDGET`` when the
  request's own content does not fit the proxy's window: ``/v1/budgeter/fit`` with a window of 2**30
  must then fit it).

Requests are counted per front door and status; ``-s`` prints the totals (the long run's figure):
``BUDGETER_FUZZ_EXAMPLES=N python -m pytest -q -s tests/fuzz/test_mutations.py``.
"""

from __future__ import annotations

import itertools
import json
import os
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf.duration_pb2 import Duration
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budgeter.core.jsonargs import nesting
from budgeter.core.messages import TOOLS_DEPTH
from budgeter.v1 import budgeter_pb2 as pb
from budgeter.v1 import budgeter_pb2_grpc as pb_grpc
from budgeter.wire import error_info
from tests.fuzz import mutations as mu
from tests.proxy.upstream import Running, Script, Upstream

EXAMPLES = int(os.environ.get("BUDGETER_FUZZ_EXAMPLES", "25"))
COUNTS: Counter[tuple[str, str]] = Counter()
"""Requests sent, by front door and status."""
DEFINED = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION,
           grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.ABORTED, grpc.StatusCode.RESOURCE_EXHAUSTED}
RESCUE = pb.PromptOverrides(window=2**30, reserve=1024)
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
IDS = itertools.count()


@pytest.fixture(scope="module", autouse=True)
def totals() -> Iterator[None]:
    yield
    by_door = Counter[str]()
    for (door, _), n in COUNTS.items():
        by_door[door] += n
    print(f"\nmutated requests: {sum(by_door.values())} ({', '.join(f'{d} {n}' for d, n in sorted(by_door.items()))})")
    for (door, status), n in sorted(COUNTS.items()):
        print(f"  {door:5} {status:22} {n}")


# -- gRPC ------------------------------------------------------------------------------------------

ROLES = {"system": pb.ROLE_SYSTEM, "user": pb.ROLE_USER, "assistant": pb.ROLE_ASSISTANT, "tool": pb.ROLE_TOOL}


@pytest.fixture(scope="module")
def stub() -> Iterator[pb_grpc.BudgeterServiceStub]:
    from budgeter.service.server import create_server
    from budgeter.store import MemoryStore
    from tests.service.conftest import settings as server_settings

    srv = create_server(server_settings(), store=MemoryStore())
    channel = grpc.insecure_channel(srv.target)
    yield pb_grpc.BudgeterServiceStub(channel)
    channel.close()
    srv.stop(0)


def rpc(call: Callable[..., Any], request: Any, *, never: tuple[str, ...] = ()) -> Any:
    """One request: its answer, or None after a defined error with its ErrorInfo (whose reason is
    not one of ``never``)."""
    try:
        response = call(request, timeout=120)
    except grpc.RpcError as err:
        info = error_info(err)
        COUNTS["grpc", f"{err.code().name} {info.reason if info else '?'}"] += 1
        assert err.code() in DEFINED, (err.code(), err.details())
        assert info is not None and info.reason and info.domain == "budgeter", err.details()
        assert info.reason not in never, err.details()
        return None
    COUNTS["grpc", "OK"] += 1
    return response


def to_pb(m: dict[str, Any], *, draw: Any) -> pb.Message:
    out = pb.Message(role=ROLES.get(m.get("role", ""), 0), content=m.get("content") or "",
                     tool_call_id=m.get("tool_call_id", ""), finish_reason=m.get("finish_reason", ""),
                     name=m.get("name", ""), reasoning_content=m.get("reasoning_content", ""),
                     status=draw(st.sampled_from([0, 0, 1, 2])))
    for c in m.get("tool_calls") or ():
        out.tool_calls.add(id=c["id"], name=c["function"]["name"], arguments=c["function"]["arguments"])
    return out


@st.composite
def policies(draw) -> pb.Policy:
    sane = draw(st.booleans())
    p = pb.Policy(window=draw(st.sampled_from([4096, 32768])) if sane else draw(mu.INTS))
    for name in ("reserve", "protect_tail_turns", "shrink_min_chars", "shrink_keep_chars"):
        if not sane and draw(st.booleans()):
            setattr(p, name, draw(mu.INTS))
    if not sane and draw(st.booleans()):
        p.low_water = draw(mu.FLOATS)
    if draw(st.booleans()):
        p.path_root = draw(st.sampled_from(["", "/", "/work/repo", "relative/dir", "/a\x00b", "/" + "é" * 300]))
    if draw(st.booleans()):
        p.file_tools.writes.append(draw(st.sampled_from(["write_file", "", "run"])))
        p.file_tools.by_shape = draw(st.booleans())
    return p


TTLS = [None, Duration(seconds=3600), Duration(seconds=0), Duration(nanos=1), Duration(seconds=-1),
        Duration(seconds=mu.INT64), Duration(seconds=315_576_000_000), Duration(seconds=1, nanos=10**9),
        Duration(seconds=1, nanos=-1)]


def create(stub, draw) -> tuple[str, bool]:
    """A session made with a mutated request, else with a plain one: (name, short-lived)."""
    _, tools_json = draw(mu.tools_lists())
    sid = draw(st.sampled_from(["", f"m{next(IDS)}", "../x", "a" * 300, "sessions/x", "é", "a\x00"]))
    ttl = draw(st.sampled_from(TTLS))
    req = pb.CreateSessionRequest(session_id=sid, policy=draw(policies()), tools_json=tools_json,
                                  tokenizer=draw(st.sampled_from(["", "", "nope", "qwen3.6"])))
    if ttl is not None:
        req.ttl.CopyFrom(ttl)
    made = rpc(stub.CreateSession, req)
    if made is None:
        made = rpc(stub.CreateSession, pb.CreateSessionRequest(session_id=f"m{next(IDS)}", tools_json=tools_json))
    if made is None:
        made = rpc(stub.CreateSession, pb.CreateSessionRequest(session_id=f"m{next(IDS)}"))
    s = made.session
    short = s.HasField("ttl") and s.ttl.ToTimedelta().total_seconds() < 60
    return s.name, short


def overrides(draw) -> pb.PromptOverrides | None:
    if draw(st.booleans()):
        return None
    o = pb.PromptOverrides()
    for name in ("window", "reserve", "protect_tail_turns"):
        if draw(st.booleans()):
            setattr(o, name, draw(mu.INTS))
    if draw(st.booleans()):
        o.low_water = draw(mu.FLOATS)
    return o


def turns(stub, name: str, msgs: list[pb.Message], draw) -> None:
    """The session's messages in batches: appends (request_id reused with other bodies, etags
    stale) and builds (overrides, views, known prompts, messages appended)."""
    etags, request_ids, prompt_id = [""], [""], ""
    at = 0
    while at < len(msgs) or at == 0:
        k = draw(st.integers(1, 6))
        batch, at = msgs[at:at + k], at + max(k, 1)
        rid = draw(st.sampled_from([request_ids[-1], f"r{next(IDS)}", ""]))
        request_ids.append(rid)
        if draw(st.booleans()):
            done = rpc(stub.AppendMessages, pb.AppendMessagesRequest(session=name, messages=batch, request_id=rid,
                                                                     etag=draw(st.sampled_from(etags))))
            if done is not None:
                etags.append(done.etag)
            batch = []
        req = pb.BuildPromptRequest(session=name, messages=batch, request_id=rid if batch else "",
                                    view=draw(st.sampled_from([0, 1, 2, 3, 99])),
                                    known_prompt=draw(st.sampled_from([prompt_id, "", "garbage"])),
                                    accept_body_delta=draw(st.booleans()))
        o = overrides(draw)
        if o is not None:
            req.overrides.CopyFrom(o)
        built = rpc(stub.BuildPrompt, req, never=("TEMPLATE_ERROR",))
        if built is not None:
            prompt_id = built.prompt_id or prompt_id
            etags.append(built.etag)
            side_calls(stub, name, built, msgs, draw)


def side_calls(stub, name: str, built: pb.BuildPromptResponse, msgs: list[pb.Message], draw) -> None:
    """The other RPCs an agent makes along the way, with their numbers at the limits."""
    for handle in list(built.report.handles)[:2]:
        rpc(stub.GetPayload, pb.GetPayloadRequest(session=name, handle=handle))
    kind = draw(st.integers(0, 6))
    calls = [c for m in msgs for c in m.tool_calls]
    if kind == 0:
        rpc(stub.CountTokens, pb.CountTokensRequest(messages=msgs[:8], tools_json=draw(mu.tools_lists())[1]))
    elif kind == 1 and calls:
        rpc(stub.ValidateToolCall, pb.ValidateToolCallRequest(session=name, tool_call=draw(st.sampled_from(calls)),
                                                              finish_reason=draw(st.sampled_from(["", "length"]))))
    elif kind == 2:
        content = draw(mu.texts(proto=True))
        rpc(stub.SuggestPath, pb.SuggestPathRequest(session=name, content=content, tool="write_file"))
    elif kind == 3:
        edit = pb.LineEdit(start_line=draw(mu.INTS), end_line=draw(mu.INTS), body=draw(mu.texts(proto=True)))
        rpc(stub.PlanEdits, pb.PlanEditsRequest(session=name, snapshot="a\nb\nc\n", path="src/app.py", edits=[edit]))
    elif kind == 4:
        rpc(stub.ProfileSession, pb.ProfileSessionRequest(session=name, window=draw(mu.INTS), top=draw(mu.INTS)))
    elif kind == 5:
        rpc(stub.ListSessionEvents, pb.ListSessionEventsRequest(session=name))
    else:
        rpc(stub.ListSessions, pb.ListSessionsRequest(page_size=draw(mu.INTS),
                                                      page_token=draw(st.sampled_from(["", "garbage", "\x00", "bTE"]))))


def listed(stub, name: str) -> bool:
    token = ""
    while True:
        page = rpc(stub.ListSessions, pb.ListSessionsRequest(page_size=1000, page_token=token))
        if any(s.name == name for s in page.sessions):
            return True
        token = page.next_page_token
        if not token:
            return False


def assert_buildable(stub, name: str) -> None:
    assert listed(stub, name), name
    assert rpc(stub.GetSession, pb.GetSessionRequest(name=name)) is not None
    try:
        stub.BuildPrompt(pb.BuildPromptRequest(session=name), timeout=120)
        COUNTS["grpc", "OK"] += 1
        return
    except grpc.RpcError as err:
        COUNTS["grpc", f"{err.code().name} {error_info(err).reason}"] += 1
        assert error_info(err).reason == "PINNED_OVER_BUDGET", (err.code(), err.details())
    assert rpc(stub.BuildPrompt, pb.BuildPromptRequest(session=name, overrides=RESCUE)) is not None


@FUZZ
@given(st.data())
def test_grpc_mutated_sessions_stay_buildable(stub, data):
    draw = data.draw
    name, short = create(stub, draw)
    msgs = [to_pb(m, draw=draw) for m in draw(mu.sessions(proto=True))]
    turns(stub, name, msgs, draw)
    if short and rpc(stub.GetSession, pb.GetSessionRequest(name=name)) is None:
        return  # expired, as its TTL said
    assert_buildable(stub, name)
    rpc(stub.DeleteSession, pb.DeleteSessionRequest(name=name))  # keeps the listing short


# -- the proxy -------------------------------------------------------------------------------------

UPSTREAM_NAMED = {"UPSTREAM_INVALID", "UPSTREAM_TOO_LARGE", "UPSTREAM_TIMEOUT", "UPSTREAM_UNREACHABLE"}
STORED_ANYWAY = {"PINNED_OVER_BUDGET", "upstream"}
"""Refusals that come after the request's messages were stored: the next turn extends them."""


@pytest.fixture(scope="module")
def proxy() -> Iterator[tuple[str, Upstream]]:
    from budgeter.proxy.server import open_sessions, start
    from budgeter.settings import Settings

    up = Upstream()
    running = Running(up.app)
    values: dict[str, Any] = {"upstream": running.base_url, "store": "memory://", "proxy_port": 0,
                              "window": 32768, "reserve": 512, "metrics_port": 0, "upstream_read_timeout": 30.0,
                              "recall_tool": True}
    server = start(Settings(**values), sessions=open_sessions(Settings(**values)))
    yield server.base_url, up
    server.stop()
    running.stop()


RECALL_ARGS = ['{"handle": "0123456789abcdef"}', '{"handle": ""}', "{}", '{"handle": 5}', "[1]", "",
               '{"handle": "\\ud800"}', "[" * mu.DEEP + "]" * mu.DEEP, '{"a": ' * mu.DEEP + "1" + "}" * mu.DEEP,
               '{"handle": 1e999}']


def reply_scripts(tools: list[Any]) -> st.SearchStrategy[Script]:
    names = [t["function"]["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)]
    call = st.builds(lambda n, a, i: {"id": f"up{i}", "name": n, "arguments": a},
                     st.sampled_from(names or ["read_file"]), st.sampled_from(['{"path": "src/app.py"}', "{}"]),
                     st.integers(0, 3))
    cut = st.builds(lambda c, k: Script(tool_calls=[{**c, "arguments": '{"path": "src/ap'[:k]}],
                                        finish_reason="length"), call, st.integers(0, 12))
    return st.one_of(
        st.builds(lambda t: Script(content=t), mu.texts(proto=True)),
        st.builds(lambda cs: Script(tool_calls=cs, finish_reason="tool_calls"), st.lists(call, min_size=1, max_size=3)),
        cut,
        st.builds(lambda a: Script(tool_calls=[{"id": "r1", "name": "budgeter_recall", "arguments": a}],
                                   finish_reason="tool_calls"), st.sampled_from(RECALL_ARGS)),
        st.just(Script(raw=b"<html>bad gateway</html>")),
        st.just(Script(raw=b"data: nonsense\n\n", media_type="text/event-stream")),
        st.just(Script(status=429, error={"error": {"message": "slow down", "type": "rate_limit_error",
                                                     "param": None, "code": "rate_limit"}})),
    )


@st.composite
def bodies(draw, messages: list[Any], tools: list[Any]) -> dict[str, Any]:
    """A chat-completions body, with oddities of its schema now and then."""
    body: dict[str, Any] = {"model": "scripted", "messages": messages}
    if tools:
        body["tools"] = tools
    if draw(st.booleans()):
        body["stream"] = True
        if draw(st.booleans()):
            body["stream_options"] = {"include_usage": True}
    odd = draw(st.integers(0, 12))
    if odd == 0:
        body["max_tokens"] = draw(st.sampled_from([0, -1, mu.INT32, 2**64, 1.5, "10", None, float("inf"), [1]]))
    elif odd == 1 and messages:
        m = draw(st.sampled_from(messages))
        m["content"] = draw(st.sampled_from([[{"type": "text", "text": "part"}], 5, {"a": 1}, [], [5], None, True]))
    elif odd == 2 and messages:
        draw(st.sampled_from(messages))["role"] = draw(st.sampled_from(["developer", "function", "", 3, None]))
    elif odd == 3:
        body["tools"] = draw(st.sampled_from([{}, "tools", [1], [None], [{"type": "function"}]]))
    elif odd == 4:
        body["messages"] = draw(st.sampled_from([None, {}, "hi", [None], [[]]]))
    elif odd == 5:
        body["stream"] = draw(st.sampled_from(["yes", 1, None]))
    elif odd == 6:
        calls = [m for m in messages if m.get("tool_calls")]
        if calls:
            fn = draw(st.sampled_from(calls))["tool_calls"][0]["function"]
            fn["arguments"] = draw(st.sampled_from([{"path": "a.py"}, None, 5, ["x"]]))
    return body


def post(base: str, body: Any, session: str | None, *, raw: bytes | None = None, failing: bool = False
         ) -> tuple[httpx.Response, str]:
    headers = {"content-type": "application/json"}
    if session is not None:
        headers["x-budgeter-session"] = session
    content = raw if raw is not None else json.dumps(body).encode()
    response = httpx.post(f"{base}/chat/completions", content=content, headers=headers, timeout=120)
    return response, assert_answer(response, failing=failing)


def assert_answer(response: httpx.Response, *, failing: bool = False) -> str:
    """The response is a defined one (a 502 or 504 only when the upstream was told to fail);
    returns its code (``"ok"``, a reason, ``"upstream"``)."""
    status = response.status_code
    if status == 200:
        COUNTS["proxy", "200"] += 1
        if "event-stream" in response.headers.get("content-type", ""):
            errors = [line for line in response.text.splitlines() if line.startswith("data: {\"error\"")]
            assert all(json.loads(e[6:])["error"]["code"] in UPSTREAM_NAMED for e in errors), errors
        return "ok"
    error = response.json()["error"]
    COUNTS["proxy", f"{status} {error.get('code')}"] += 1
    assert status < 500 or failing and status in (502, 504) and error["code"] in UPSTREAM_NAMED, (status, error)
    assert isinstance(error["message"], str) and "type" in error and "code" in error, error
    assert error["code"] != "TEMPLATE_ERROR", error  # what is accepted is rendered as it was counted
    if status == 429 or error["code"] in UPSTREAM_NAMED:
        return "upstream"
    return str(error["code"])


def fit(base: str, body: dict[str, Any], draw: Any) -> None:
    """The stateless sidecar, with policy numbers at their limits."""
    options: Any = {k: draw(st.sampled_from([mu.INT32, 0, 1, -1, 2**64, 1e999, float("nan"), "x", None]))
                    for k in ("window", "reserve", "low_water", "protect_tail_turns") if draw(st.booleans())}
    body["budgeter"] = options if draw(st.integers(0, 9)) else draw(st.sampled_from([[], "x", 5]))
    text = json.dumps(body).replace("NaN", "1e999" if draw(st.booleans()) else "NaN")
    response = httpx.post(f"{base}/budgeter/fit", content=text.encode(), timeout=120)
    assert_answer(response)


def next_turn(messages: list[Any], response: httpx.Response) -> list[Any]:
    """What a client sends next: its messages, the reply (with a result for each call), a user."""
    out = list(messages)
    if response.status_code == 200 and "json" in response.headers.get("content-type", ""):
        reply = response.json()["choices"][0]["message"]
        out.append({k: v for k, v in reply.items() if k in ("role", "content", "tool_calls")})
        out += [{"role": "tool", "tool_call_id": c["id"], "content": "done"} for c in reply.get("tool_calls") or ()]
    return [*out, {"role": "user", "content": "Next step, please."}]


@FUZZ
@given(st.data())
def test_proxy_mutated_turns_leave_a_session_that_answers(proxy, data):
    base, upstream = proxy
    draw = data.draw
    tools, tools_json = draw(mu.tools_lists())
    conversation = draw(mu.sessions(proto=False))
    session = draw(st.sampled_from([None, None, None, f"p{next(IDS)}", f"p{next(IDS)}", "../x", "a" * 300]))
    last: tuple[list[Any], httpx.Response] | None = None
    cuts = sorted(draw(st.lists(st.integers(1, max(1, len(conversation))), min_size=1, max_size=3)))
    for cut in cuts:
        messages = json.loads(json.dumps(conversation[:cut]))
        script = draw(reply_scripts(tools))
        upstream.scripts[:] = [script]
        body = draw(bodies(messages, tools))
        raw = json.dumps(body).replace(json.dumps(tools), tools_json).encode() if tools else None
        response, code = post(base, body, session, raw=raw, failing=script.raw is not None)
        if code == "ok" or code in STORED_ANYWAY:
            last = (messages, response)
    upstream.scripts.clear()
    fit(base, draw(bodies(json.loads(json.dumps(conversation)), tools)), draw)
    if last is None:
        return
    follow = next_turn(*last)
    named = last[1].headers.get("x-budgeter-session") or session
    response, _ = post(base, {"model": "scripted", "messages": follow, **({"tools": tools} if tools else {})}, named)
    if response.status_code != 200:
        code = response.json()["error"]["code"]
        if code == "TOOLS_TOO_DEEP":  # the follow-up's own tools, which the turns before may not have
            assert nesting(tools, TOOLS_DEPTH) > TOOLS_DEPTH, response.text  # sent (a mutated body's ``{}``)
            return
        assert code == "PINNED_OVER_BUDGET", response.text
        rescue = {"messages": follow, "budgeter": {"window": 2**30}}
        fitted = httpx.post(f"{base}/budgeter/fit", content=json.dumps(rescue).encode(), timeout=120)
        assert fitted.status_code == 200, fitted.text
