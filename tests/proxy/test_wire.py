"""The body sent upstream: the session layer hands a prompt's unchanged messages to the proxy as
the same dicts turn after turn (``Sessions.sent``), and the proxy makes it on a worker thread."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from budgeter.core.messages import Message, ToolCall, to_openai
from budgeter.proxy.server import open_sessions
from tests.proxy.conftest import proxy_settings
from tests.proxy.upstream import Script

pytestmark = pytest.mark.shared


def test_sessions_hand_over_the_same_dicts_for_the_same_messages(qwen3_path):
    """What ``Sessions.sent`` gives for a message sent as it is: equal to ``to_openai`` of it, and
    the same object on the next turn (converted once)."""
    sessions = open_sessions(proxy_settings("http://127.0.0.1:9", qwen3_path))
    messages = [Message("system", "be terse"), Message("user", "list the files"),
                Message("assistant", "", (ToolCall("c1", "ls", '{"path": "."}'),)),
                Message("tool", "a.txt", tool_call_id="c1")]
    first, tools, adapted = sessions.sent("qwen3", messages[:3], [])
    second, _, _ = sessions.sent("qwen3", messages, [])
    assert (tools, adapted) == ([], ())
    assert second == [to_openai(m) for m in messages]
    assert all(a is b for a, b in zip(first, second[:3], strict=True))


class Recording:
    """A tokenizer's lock that notes which threads took it (and still locks)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.threads: set[int] = set()

    def __enter__(self) -> Any:
        self.threads.add(threading.get_ident())
        return self.inner.__enter__()

    def __exit__(self, *exc: object) -> Any:
        return self.inner.__exit__(*exc)


def test_the_event_loop_never_waits_for_a_tokenizers_lock(proxy):
    """Another session's build can hold the tokenizer's lock for tens of milliseconds: every use
    of it in a turn (the build, the reply's append, the request's rewrite for its template) is made
    on a worker thread, streamed or not, so the event loop goes on serving the other connections."""
    tokenizers = proxy.sessions.tokenizers
    lock = Recording(tokenizers._locks["qwen3"])
    tokenizers._locks["qwen3"] = lock
    proxy.upstream.script(Script(content="one"), Script(content="two"), Script(content="three"))
    messages: list[dict[str, Any]] = [{"role": "system", "content": "be terse"}, {"role": "user", "content": "a"}]
    for k, reply in enumerate(["one", "two", "three"]):
        if k % 2:
            with proxy.client.chat.completions.create(model="m", messages=messages, stream=True) as stream:
                text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        else:
            text = proxy.client.chat.completions.create(model="m", messages=messages).choices[0].message.content
        assert text == reply
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": f"q{k}"}]
    assert lock.threads and proxy.server.thread.ident not in lock.threads
