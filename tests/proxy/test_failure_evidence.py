"""The mission's case through the proxy: what reaches the upstream holds one short stub."""

from __future__ import annotations

import json

import pytest

from tests.core.test_evidence import PAGE, WRITE_TOOLS, call, mission, result
from tests.proxy.upstream import Script

pytestmark = pytest.mark.shared


def test_the_missions_case_reaches_the_upstream_as_one_short_stub(make_proxy):
    proxy = make_proxy(window=32768, reserve=2048)
    proxy.upstream.script(Script(content="Writing it to index.html."))
    proxy.client.chat.completions.create(model="m", messages=mission(), tools=WRITE_TOOLS)
    sent = proxy.upstream.received[-1]["messages"]
    stubs = [m["content"] for m in sent if "budgeter:failed" in (m.get("content") or "")]
    assert len(stubs) == 1 and "x3" in stubs[0]
    assert all(json.loads(c["function"]["arguments"]).get("content") != PAGE
               for m in sent for c in m.get("tool_calls") or ())


def test_an_agents_sdk_error_result_is_collapsed_once_answered(make_proxy):
    """The OpenAI Agents SDK's default error text for a failing tool starts with no error word."""
    proxy = make_proxy(window=32768, reserve=2048)
    proxy.upstream.script(Script(content="ok"))
    error = ("An error occurred while running the tool. Please try again. Error: "
             "[Errno 13] Permission denied: '/srv/site/index.html'")
    messages = [{"role": "user", "content": "Publish the page."},
                call("a", "write_file", {"path": "/srv/site/index.html", "content": PAGE}), result("a", error),
                {"role": "assistant", "content": "Trying another place."},
                call("b", "write_file", {"path": "site/index.html", "content": PAGE}), result("b", "wrote 6950 bytes")]
    proxy.client.chat.completions.create(model="m", messages=messages, tools=WRITE_TOOLS)
    sent = proxy.upstream.received[-1]["messages"]
    contents = [json.loads(c["function"]["arguments"])["content"] for m in sent for c in m.get("tool_calls") or ()]
    assert contents[0] != PAGE and contents[1] == PAGE  # the failed write's payload left; the good one stays
    assert sent[-1]["content"] == "wrote 6950 bytes"


def test_a_declared_failure_is_taken_and_its_flag_not_forwarded(make_proxy):
    proxy = make_proxy(window=32768, reserve=2048)
    proxy.upstream.script(Script(content="ok"))
    messages = [{"role": "user", "content": "Publish it."},
                call("a", "publish", {"body": PAGE}), result("a", "Published.", is_error=True),
                {"role": "assistant", "content": "It was not published."}, {"role": "user", "content": "Again."}]
    proxy.client.chat.completions.create(model="m", messages=messages)
    sent = proxy.upstream.received[-1]["messages"]
    assert any("why=declared" in (m.get("content") or "") for m in sent)
    assert all("is_error" not in m and "status" not in m for m in sent)
