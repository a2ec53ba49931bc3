"""A small scripted OpenAI-compatible upstream, for behaviour a random-weight model cannot be made
to show on demand (a tool call cut mid-string with finish_reason length, a reply that calls only
the recall tool, an upstream error or a stall). The real upstream is llama.cpp's server
(tests/proxy/test_llamacpp.py).

Each request takes the next scripted ``Script`` (a reply, an error, a delay); streamed replies are
written the way llama.cpp's server writes them (role chunk, deltas, a finish chunk, an optional
usage chunk, ``data: [DONE]``). ``usage.prompt_tokens`` comes from ``count`` (e.g. transformers'
``apply_chat_template`` on the received body) so the proxy's exactness check meets an independent
count.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass
class Script:
    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """[{"id", "name", "arguments"}]; arguments is the raw text (may be cut)."""
    finish_reason: str = "stop"
    status: int = 200
    error: dict[str, Any] | None = None
    delay: float = 0.0
    stall: float = 0.0
    """Seconds a stream stalls before its finish chunk."""
    prompt_tokens: int | None = None
    """Overrides the counted usage (to provoke a mismatch)."""
    reply: Callable[[dict[str, Any]], Script] | None = None
    """Decide from the received body (e.g. call recall with a handle found in the prompt)."""
    raw: bytes | None = None
    """Sent as the whole body with ``status`` and ``media_type``, whatever the request asked
    (an upstream that answers 200 with what is no chat completion)."""
    media_type: str = "application/json"
    split: bool = False
    """Write each streamed event in two halves, cut inside its JSON (as a server's writes may be)."""


class Held:
    """A reply the upstream holds back: ``arrived`` is set once the request is in, and the reply
    (``content``) goes once ``go`` is set; ``script`` is what to queue."""

    def __init__(self, content: str) -> None:
        self.arrived, self.go = threading.Event(), threading.Event()
        self.content = content
        self.script = Script(reply=self._answer)

    def _answer(self, body: dict[str, Any]) -> Script:
        self.arrived.set()
        assert self.go.wait(30), "the test never let the reply go"
        return Script(content=self.content)


class Upstream:
    def __init__(self, count: Callable[[dict[str, Any]], int] | None = None, *, keep: bool = True) -> None:
        self.count = count
        self.keep = keep
        """Keep what was received and sent, for tests to read. A benchmark's upstream keeps nothing:
        every replayed history it held made its full collections tens to hundreds of milliseconds,
        inside whichever request was in flight (``bench_proxy``'s stalls at low proxy CPU)."""
        self.scripts: list[Script] = []
        self.received: list[dict[str, Any]] = []
        self.sent: list[bytes] = []
        self.app = Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"]),
                                     Route("/v1/models", self.models, methods=["GET"])])

    def script(self, *scripts: Script) -> None:
        self.scripts.extend(scripts)

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "scripted", "object": "model", "owned_by": "tests"}]})

    async def chat(self, request: Request) -> Response:
        body = await request.json()
        if self.keep:
            self.received.append(body)
        script = self.scripts.pop(0) if self.scripts else self._default(body)
        if script.reply is not None:
            script = script.reply(body)
        if script.delay:
            await asyncio.sleep(script.delay)
        if script.raw is not None:
            return Response(script.raw, script.status, media_type=script.media_type)
        if script.status >= 400:
            return JSONResponse(script.error or {"error": {"message": "scripted", "code": script.status}},
                                script.status)
        usage = self._usage(body, script)
        if body.get("stream"):
            return StreamingResponse(self._events(body, script, usage), media_type="text/event-stream")
        message: dict[str, Any] = {"role": "assistant", "content": script.content or None}
        if script.tool_calls:
            message["tool_calls"] = [{"id": c["id"], "type": "function",
                                      "function": {"name": c["name"], "arguments": c["arguments"]}}
                                     for c in script.tool_calls]
        out = {"id": "chatcmpl-1", "object": "chat.completion", "created": int(time.time()),
               "model": body.get("model", ""), "usage": usage,
               "choices": [{"index": 0, "message": message, "finish_reason": script.finish_reason}]}
        return JSONResponse(out)

    @staticmethod
    def _default(body: dict[str, Any]) -> Script:
        """The body's ``scripted_reply`` (an assistant message, for benchmarks replaying a session),
        else "ok"."""
        m = body.get("scripted_reply")
        if not isinstance(m, dict):
            return Script(content="ok")
        calls = [{"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                 for c in m.get("tool_calls") or ()]
        return Script(content=m.get("content") or "", tool_calls=calls,
                      finish_reason=m.get("finish_reason") or ("tool_calls" if calls else "stop"))

    def _usage(self, body: dict[str, Any], script: Script) -> dict[str, int] | None:
        """None when this upstream cannot count (as some servers report no usage)."""
        if script.prompt_tokens is None and self.count is None:
            return None
        prompt = script.prompt_tokens if script.prompt_tokens is not None else self.count(body)  # type: ignore[misc]
        return {"prompt_tokens": prompt, "completion_tokens": 3, "total_tokens": prompt + 3}

    async def _events(self, body: dict[str, Any], script: Script, usage: dict[str, int] | None):
        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            data = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                    "model": body.get("model", ""),
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            return f"data: {json.dumps(data)}\n\n".encode()

        pieces = [chunk({"role": "assistant", "content": None})]
        text = script.content
        pieces += [chunk({"content": text[i:i + 7]}) for i in range(0, len(text), 7)]
        for n, c in enumerate(script.tool_calls):
            pieces.append(chunk({"tool_calls": [{"index": n, "id": c["id"], "type": "function",
                                                 "function": {"name": c["name"], "arguments": ""}}]}))
            args = c["arguments"]
            pieces += [chunk({"tool_calls": [{"index": n, "function": {"arguments": args[i:i + 9]}}]})
                       for i in range(0, len(args), 9)]
        stall_at = len(pieces)
        pieces.append(chunk({}, script.finish_reason))
        if usage is not None and (body.get("stream_options") or {}).get("include_usage"):
            data = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                    "model": body.get("model", ""), "choices": [], "usage": usage}
            pieces.append(f"data: {json.dumps(data)}\n\n".encode())
        pieces.append(b"data: [DONE]\n\n")
        for n, piece in enumerate(pieces):
            if n == stall_at and script.stall:
                await asyncio.sleep(script.stall)
            if self.keep:
                self.sent.append(piece)
            for half in (piece[:len(piece) // 2], piece[len(piece) // 2:]) if script.split else (piece,):
                yield half
                await asyncio.sleep(0)


class Running:
    """An ASGI app served by uvicorn on 127.0.0.1:0 in a thread."""

    def __init__(self, app: Any, *, port: int = 0) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        self.port = sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def main() -> None:
    """``python -m tests.proxy.upstream PORT``: the scripted upstream as its own process (benchmarks)."""
    import gc
    import sys

    server = uvicorn.Server(uvicorn.Config(Upstream(keep=False).app, host="127.0.0.1", port=int(sys.argv[1]),
                                           log_level="warning"))
    server.config.load()
    gc.freeze()  # what start-up made is never garbage: full collections do not walk it again
    server.run()


if __name__ == "__main__":
    main()
