"""The proxy's ASGI app (Starlette): thin handlers over ``ProxySessions`` and an aiohttp client.

Routes: ``POST /v1/chat/completions`` (streamed or not), ``GET /v1/models`` (passed through),
``POST /v1/budgeter/fit`` (stateless sidecar), ``GET /health`` (readiness: store and upstream),
``GET /health/liveness``, ``GET /metrics``; anything else
is an OpenAI-style 404. Blocking work (store, tokenizer) runs on the proxy's own threads, set up
to count before it serves (``sessions.workers.counting_pool``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import anyio
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from budgeter.core.counting import Adaptation, repaired
from budgeter.core.engine import BuildResult
from budgeter.core.jsonargs import dumps_bytes
from budgeter.core.messages import Message
from budgeter.errors import InvalidInput, LimitExceeded, StoreUnavailable
from budgeter.proxy import intake, recall
from budgeter.proxy.errors import (
    JSON,
    STALE_CONNECTION,
    UPSTREAM_ERRORS,
    RequestTooLarge,
    UpstreamError,
    error_response,
    event,
    upstream_error,
    upstream_invalid,
    upstream_too_large,
)
from budgeter.proxy.errors import body as error_body
from budgeter.proxy.metrics import ProxyMetrics
from budgeter.proxy.stream import NotACompletion, Reply, completion, parse_data, tee
from budgeter.proxy.turns import ProxySessions, Request, Turn
from budgeter.sessions.sessions import Sessions
from budgeter.sessions.workers import counting_pool
from budgeter.settings import Settings

T = TypeVar("T")

log = logging.getLogger("budgeter.proxy")
SESSION_HEADER = "x-budgeter-session"
MAX_HANDLES = 64  # keeps the header under ~1.1 KB
DROP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "upgrade",
        "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers", "host",
        "accept-encoding", SESSION_HEADER}


@dataclass
class Call:
    """One chat completion on its way through: what was sent, what it cost here."""

    request: Request
    turn: Turn
    body: dict[str, Any]
    counted: int
    started: float
    upstream: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


class Proxy:
    def __init__(self, settings: Settings, sessions: Sessions, *, tokenizer: str = "") -> None:
        self.settings = settings
        self.sessions = sessions
        self.metrics = ProxyMetrics()
        self.metrics.watch_store(sessions.store)
        policy = {"window": settings.window, "reserve": settings.reserve, "low_water": settings.low_water}
        self.turns = ProxySessions(sessions, tokenizer=tokenizer or settings.default_tokenizer,
                                   policy=policy, ttl=settings.session_ttl, lines=settings.live_sessions,
                                   max_bytes=settings.live_bytes // 2)
        self.url = settings.upstream.rstrip("/")
        self.extra_tools = [recall.TOOL] if settings.recall_tool else []
        # the previous request of each conversation, so a turn parses only its new messages: about
        # what the replica holds of the same sessions, bounded alike
        self.recent = intake.Recent(lines=settings.live_sessions, max_bytes=settings.live_bytes // 2)
        self._client: aiohttp.ClientSession | None = None
        self.pool = counting_pool(settings.max_workers, "budgeter-proxy")
        """Threads for the blocking work (store, tokenizer), set up to count, living as long as the
        proxy: Starlette's thread pool (anyio's) retires a thread idle for 10 s, and the next burst's
        new threads would set up at their first count."""

    async def _blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a worker thread, in a copy of this task's context."""
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self.pool, context.run, fn, *args)

    @property
    def client(self) -> aiohttp.ClientSession:
        """The upstream client, made on first use inside the server's event loop. aiohttp, not
        httpx: its C parser costs a third of the CPU of httpx's pure-Python h11 for a long request and
        its reply, and streamed chunks are parsed in C too (``bench_proxy``)."""
        if self._client is None:
            s = self.settings
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=s.upstream_connect_timeout,
                                            sock_read=s.upstream_read_timeout)
            # idle connections are closed after 4 s, before the usual 5 s of llama.cpp's and
            # uvicorn's servers; one the upstream closed first is retried once (STALE_CONNECTION)
            self._client = aiohttp.ClientSession(
                timeout=timeout, headers={"accept-encoding": "identity"}, auto_decompress=False,
                connector=aiohttp.TCPConnector(limit=256, keepalive_timeout=4), skip_auto_headers=("User-Agent",))
        return self._client

    # -- routes ----------------------------------------------------------------------------------

    async def chat(self, http: HTTPRequest) -> Response:
        started = time.perf_counter()
        try:
            response = await self._chat(http, started)
        except Exception as exc:
            if isinstance(exc, StoreUnavailable):
                self.metrics.store_errors.labels(self.sessions.store.name).inc()
            response = error_response(exc)
        self.metrics.rpc_seconds.labels("chat.completions", str(response.status_code)).observe(
            time.perf_counter() - started)
        return response

    async def _chat(self, http: HTTPRequest, started: float) -> Response:
        data = await read_body(http, self.settings.max_request_bytes)
        raw, request, turn, body, adapted = await self._blocking(self._turn, data,
                                                                  http.headers.get(SESSION_HEADER, ""))
        self.metrics.built(turn.result)
        self.metrics.adapted(adapted)
        said = self._repaired(request, turn.session)
        call = Call(request, turn, body, turn.result.tokens, started,
                    headers={**report_headers(turn), **notes_header((*adapted, *said))})
        forward = end_to_end(http.headers)
        if raw.get("stream") is True:
            return await self._stream(call, forward)
        return await self._complete(call, forward)

    def _turn(self, data: bytes, session: str
              ) -> tuple[dict[str, Any], Request, Turn, dict[str, Any], tuple[Adaptation, ...]]:
        """The body's fields (``intake.Recent.read``), its request, the turn, and the body to send upstream
        with the rewrites made for its template. The last is made here too, on a worker thread: it
        takes the tokenizer's lock, which another session's build may hold for tens of milliseconds
        (a compacting turn), and the event loop must not wait for it."""
        fields, request, continued = self.recent.read(data, session=session, extra_tools=self.extra_tools)
        self.metrics.bodies.labels("continued" if continued else "whole").inc()
        turn = self.turns.turn(request, session=session)
        return (fields, request, turn, *self._upstream_body(fields, request, turn))

    def _repaired(self, request: Request, session: str) -> tuple[Adaptation, ...]:
        """The request's lone surrogates made U+FFFD, as the note for its header; logged and counted
        too: the model does not see the request as written."""
        said = repaired(request.repairs)
        if said:
            self.metrics.repaired(request.repairs)
            log.warning("session %s: %s", session or "(fit)", said[0].note)
        return said

    def _upstream_body(self, raw: dict[str, Any], request: Request, turn: Turn
                       ) -> tuple[dict[str, Any], tuple[Adaptation, ...]]:
        """The body sent upstream, and the rewrites for the template it holds (``turns.wire``)."""
        messages, tools, adapted = self.turns.wire(turn.result, request.tools, turn.sent)
        out = {**raw, "messages": messages}
        if tools != request.tools or self.extra_tools:
            out["tools"] = tools
        if not tools:
            out.pop("tools", None)  # folded into the system message by the counted rendering
            out.pop("tool_choice", None)
        if "max_tokens" not in raw and "max_completion_tokens" not in raw:
            out["max_tokens"] = self.settings.reserve
        return out, adapted

    async def _complete(self, call: Call, forward: dict[str, str]) -> Response:
        for rounds in range(recall.MAX_ROUNDS + 1):
            upstream = await self._send(call, forward)
            content = await self._read(call, upstream)
            if upstream.status >= 400:
                return passthrough(upstream, content, call.headers)
            try:
                reply = completion(content)
            except NotACompletion as exc:  # nothing of it is stored as the reply
                raise upstream_invalid(self.url, str(exc)) from exc
            self._check_exact(call, reply)
            if not (self.extra_tools and recall.recall_only(reply)) or rounds == recall.MAX_ROUNDS:
                break
            await self._blocking(self._recall, call, reply)
        await self._finish(call, reply)
        return passthrough(upstream, content, call.headers)

    async def _read(self, call: Call, upstream: aiohttp.ClientResponse) -> bytes:
        """The whole body, read no further than ``max_reply_bytes``."""
        started = time.perf_counter()
        limit = self.settings.max_reply_bytes
        try:
            if (upstream.content_length or 0) > limit:
                raise self._too_large(f"a reply of {upstream.content_length} bytes")
            return b"".join([chunk async for chunk in capped(upstream.content.iter_any(), limit,
                                                              self._too_large("a longer reply"))])
        except UPSTREAM_ERRORS as exc:
            raise upstream_error(exc, self.url) from exc
        except UpstreamError:
            upstream.close()  # the rest is never read
            raise
        finally:
            upstream.release()
            call.upstream += time.perf_counter() - started

    def _too_large(self, what: str) -> UpstreamError:
        return upstream_too_large(self.url, what, limit=self.settings.max_reply_bytes, setting="max_reply_bytes")

    async def _stream(self, call: Call, forward: dict[str, str]) -> Response:
        """The status goes out with the first piece, once the upstream's first event was read as a
        chunk: a 2xx that is not a stream of chunks is a 502, never relayed."""
        upstream = await self._send(call, forward)
        if upstream.status >= 400:
            return passthrough(upstream, await self._read(call, upstream), call.headers)
        kind = upstream.headers.get("content-type", "")
        if "text/event-stream" not in kind:
            upstream.close()
            raise upstream_invalid(self.url, f"{kind or 'no content-type'} to a request for a stream")
        replies: list[Reply] = []
        refused: list[UpstreamError] = []
        relay = self._relay(call, upstream, forward, replies, refused)
        first = await anext(relay, None)
        if refused:  # over a limit before anything went out (a loaded proxy reads big pieces): a 502
            await relay.aclose()
            raise refused[0]
        if not replies[0].chunks:
            await relay.aclose()
            raise upstream_invalid(self.url, "server-sent events without a chat completion chunk")
        headers = {**end_to_end(upstream.headers), **call.headers}
        return StreamingResponse(resumed(first, relay), upstream.status, headers=headers)

    async def _relay(self, call: Call, upstream: aiohttp.ClientResponse, forward: dict[str, str],
                     replies: list[Reply], refused: list[UpstreamError]) -> AsyncGenerator[bytes, None]:
        """Each piece goes out as it comes, but the last is held until the reply's size is checked
        and its append handed over (``_finish``): a reply too large to store is refused in the stream."""
        last: bytes | None = None
        try:
            async for piece in self._pieces(call, upstream, forward, replies):
                if last is not None:
                    yield last
                last = piece
            await self._finish(call, replies[-1])
        except UPSTREAM_ERRORS as exc:  # headers are out: the stream ends here, nothing is stored
            log.warning("upstream stream broke: %s", type(exc).__name__)
        except UpstreamError as exc:  # over a limit: the client is told in the stream, nothing is stored
            log.warning("upstream stream refused: %s", exc.reason)
            refused.append(exc)
            if last is not None:
                yield last
            last = event(exc)
        if last is not None:
            yield last

    async def _pieces(self, call: Call, upstream: aiohttp.ClientResponse, forward: dict[str, str],
                      replies: list[Reply]) -> AsyncGenerator[bytes, None]:
        """The upstream's bytes. With the recall tool on, events are held only while the reply may
        still call nothing but ``budgeter_recall``; such a reply is answered and asked again."""
        for rounds in range(recall.MAX_ROUNDS + 1):
            reply = Reply()
            replies.append(reply)
            held: list[bytes] | None = [] if self.extra_tools else None
            async for piece in self._tee(call, upstream, reply):
                if held is None:
                    yield piece
                    continue
                held.append(piece)
                if not recall.undecided(reply):
                    yield b"".join(held)
                    held = None
            self._check_exact(call, reply)
            if held is not None and recall.recall_only(reply) and rounds < recall.MAX_ROUNDS:
                await self._blocking(self._recall, call, reply)
                with contextlib.suppress(UpstreamError):  # then the held reply goes out as it is
                    retry = await self._send(call, forward)
                    if retry.status < 400:
                        upstream = retry
                        continue
                    retry.release()
            if held:
                yield b"".join(held)
            return

    async def _tee(self, call: Call, upstream: aiohttp.ClientResponse, reply: Reply) -> AsyncIterator[bytes]:
        started = time.perf_counter()
        try:
            chunks = capped(upstream.content.iter_any(), self.settings.max_reply_bytes,
                            self._too_large("a longer stream"))
            async for piece in tee(chunks, lambda data: reply.add_chunk(parse_data(data))):
                yield piece
        finally:
            upstream.release()  # back to the pool when read to the end; closed when cut short
            call.upstream += time.perf_counter() - started

    async def _send(self, call: Call, forward: dict[str, str]) -> aiohttp.ClientResponse:
        """POST the body; returns once the upstream's headers are in (``_read`` or ``_tee`` takes
        the body)."""
        started = time.perf_counter()
        body, headers = dumps_bytes(call.body), {**forward, "content-type": "application/json"}
        try:
            try:
                upstream = await self.client.post(f"{self.url}/chat/completions", data=body, headers=headers)
            except STALE_CONNECTION as exc:  # a kept-alive connection the upstream closed as it was
                if isinstance(exc, aiohttp.ClientConnectorError):  # reused: once more (not: unreachable)
                    raise
                upstream = await self.client.post(f"{self.url}/chat/completions", data=body, headers=headers)
        except UPSTREAM_ERRORS as exc:
            raise upstream_error(exc, self.url) from exc
        finally:
            call.upstream += time.perf_counter() - started
        self.metrics.upstream_seconds.labels(str(upstream.status)).observe(time.perf_counter() - started)
        return upstream

    def _recall(self, call: Call, reply: Reply) -> None:
        """Answer a recall-only reply from the store; the next upstream body carries the answers."""
        message = reply.message()
        results = recall.answers(message, lambda h: self.sessions.payload(call.turn.session, h))
        body = recall.extend(call.body, message, results)
        counted = self.turns.count(body, call.request.tools)
        budget = self.settings.window - int(body.get("max_tokens") or body.get("max_completion_tokens") or 0)
        if counted > budget:  # the answer must leave the reply its max_tokens within the window
            body = recall.extend(call.body, message, recall.too_large(results, counted, budget))
            counted = self.turns.count(body, call.request.tools)
        self.metrics.recalls.inc(len(results))
        call.body, call.counted = body, counted

    def _check_exact(self, call: Call, reply: Reply) -> None:
        self.metrics.exactness(model=str(call.body.get("model", "")), counted=call.counted,
                               reported=reply.prompt_tokens, session=call.turn.session)

    async def _finish(self, call: Call, reply: Reply) -> None:
        """Hand the reply (with its finish_reason: a call cut by ``length`` stays TRUNCATED) to a
        worker to append, once its size is checked; the response goes out meanwhile, and the
        conversation's next turn waits for the append (``ProxySessions.reply_pending``). Waiting for
        it here was a third of the proxy's added time per turn (``bench_proxy``)."""
        if reply.finish_reason is not None:
            message = reply.message()
            try:
                self.turns.check_reply(message)
            except LimitExceeded as exc:  # the upstream's reply, not the client's request
                size = exc.metadata.get("size", "more")
                raise upstream_too_large(self.url, f"a message of {size} bytes", setting="max_message_bytes",
                                         limit=self.settings.max_message_bytes) from exc
            context = contextvars.copy_context()
            self.turns.reply_pending(call.turn, self.pool.submit(context.run, self._append_reply, call.turn, message))
        self.metrics.overhead_seconds.observe(time.perf_counter() - call.started - call.upstream)

    def _append_reply(self, turn: Turn, message: Message) -> bool:
        """``append_reply`` after the response: a failure is logged and counted, and the client's
        next request, which carries the reply, stores it then."""
        try:
            return self.turns.append_reply(turn, message)
        except StoreUnavailable as exc:
            self.metrics.store_errors.labels(self.sessions.store.name).inc()
            log.warning("reply not stored in session %s (the next request brings it): %s", turn.session, exc)
        except Exception:
            log.exception("reply not stored in session %s (the next request brings it)", turn.session)
        return False

    async def models(self, http: HTTPRequest) -> Response:
        try:
            async with self.client.get(f"{self.url}/models", headers=end_to_end(http.headers)) as upstream:
                return passthrough(upstream, await upstream.read(), {})
        except UPSTREAM_ERRORS as exc:
            return error_response(upstream_error(exc, self.url))

    async def fit(self, http: HTTPRequest) -> Response:
        """Stateless: the body fitted as a turn would send it (the same wire form, no session)."""
        try:
            raw = await read_json(http, self.settings.max_request_bytes)
            options = raw.pop("budgeter", None) or {}
            if not isinstance(options, dict):
                raise InvalidInput("budgeter must be an object of policy fields", field="budgeter")
            request, body, result, adapted = await self._blocking(self._fit, raw, options)
        except Exception as exc:
            return error_response(exc)
        self.metrics.built(result)
        self.metrics.adapted(adapted)
        said = self._repaired(request, "")
        report = {"tokenizer": self.turns.tokenizer, **result.report()}
        report["notes"] += [a.note for a in said]  # as a BuildPrompt's report says them
        return JSON({"body": body, "report": report}, headers=notes_header((*adapted, *said)))

    def _fit(self, raw: dict[str, Any], options: dict[str, Any]
             ) -> tuple[Request, dict[str, Any], BuildResult, tuple[Adaptation, ...]]:
        request = Request.of(raw)
        result = self.turns.fit(request, overrides=options)
        messages, tools, adapted = self.turns.wire(result, request.tools)
        body = {**raw, "messages": messages, **({"tools": tools} if tools else {})}
        if not tools:
            body.pop("tools", None)
        return request, body, result, adapted

    async def health(self, http: HTTPRequest) -> Response:
        """Readiness: SERVING (200) only while both the store and the upstream answer; else
        NOT_SERVING (503) with what is down. ``/health/liveness`` is the process alone."""
        body: dict[str, Any] = {"store": self.sessions.store.name, "upstream": self.url}
        try:
            await self._blocking(self.sessions.store.ping)
        except Exception:
            return JSON({"status": "NOT_SERVING", **body, "store_reachable": False}, 503)
        why = await self.upstream_down()
        body |= {"store_reachable": True, "upstream_reachable": not why, **({"upstream_error": why} if why else {})}
        return JSON({"status": "NOT_SERVING" if why else "SERVING", **body}, 503 if why else 200)

    async def liveness(self, http: HTTPRequest) -> Response:
        """The process serves (as the gRPC service's ``liveness`` health service): a store or an
        upstream that is down is no reason to restart it."""
        return JSON({"status": "SERVING"})

    async def upstream_down(self) -> str:
        """Why the upstream cannot be reached ('' when it answers, with any status: an upstream
        that refuses ``GET /models`` still serves completions)."""
        timeout = aiohttp.ClientTimeout(total=self.settings.upstream_connect_timeout)
        try:
            async with self.client.get(f"{self.url}/models", timeout=timeout):
                return ""
        except UPSTREAM_ERRORS as exc:
            return upstream_error(exc, self.url).message

    async def announce(self) -> None:
        """Say at start whether the upstream answers (once; ``/health`` says it on every probe),
        and each rewrite of the request the profile makes for its template (the model behind it
        does not see the request as the agent wrote it)."""
        why = await self.upstream_down()
        if why:
            log.warning("%s; /health answers 503 NOT_SERVING until it answers", why)
        else:
            log.info("upstream %s answers", self.url)
        # the rewrites the profile makes for its template (found when it loaded): once, not per turn
        for a in await self._blocking(self.sessions.adaptations, self.turns.tokenizer):
            log.warning("tokenizer %s: requests are rewritten for its template (%s): %s", self.turns.tokenizer,
                        a.kind, a.note)

    async def metrics_route(self, http: HTTPRequest) -> Response:
        return Response(generate_latest(self.metrics.registry), headers={"content-type": CONTENT_TYPE_LATEST})

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
        if not self.turns.settled(self.settings.grace):  # the replies still being appended
            log.warning("replies still being appended after %s s at shutdown", self.settings.grace)
        self.pool.shutdown(wait=False)  # its idle threads end


async def read_body(http: HTTPRequest, limit: int) -> bytes:
    """The body, refused on its Content-Length before any of it is read, else read no further
    than ``limit`` (a chunked body is counted as it comes)."""
    declared = http.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise RequestTooLarge(f"the request body is {declared} bytes; the limit is {limit}",
                              metadata={"limit": limit})
    over = RequestTooLarge(f"the request body is over the limit of {limit} bytes", metadata={"limit": limit})
    return b"".join([chunk async for chunk in capped(http.stream(), limit, over)])


async def read_json(http: HTTPRequest, limit: int) -> dict[str, Any]:
    return intake.parse(await read_body(http, limit))


async def capped(chunks: AsyncIterator[bytes], limit: int, error: Exception) -> AsyncIterator[bytes]:
    """``chunks`` until more than ``limit`` bytes came: then ``error`` (the rest is not read)."""
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise error
        yield chunk


async def resumed(first: bytes | None, rest: AsyncGenerator[bytes, None]) -> AsyncIterator[bytes]:
    """``first`` (already taken from ``rest``), then the rest."""
    try:
        if first is not None:
            yield first
        async for piece in rest:
            yield piece
    finally:
        await rest.aclose()


def end_to_end(headers: Mapping[str, str]) -> dict[str, str]:
    """Headers less hop-by-hop ones: the client's for the upstream (its API key among them), the
    upstream's for the client."""
    return {k: v for k, v in headers.items() if k.lower() not in DROP}


def passthrough(upstream: aiohttp.ClientResponse, content: bytes, extra: dict[str, str]) -> Response:
    return Response(content, upstream.status, headers={**end_to_end(upstream.headers), **extra})


def report_headers(turn: Turn) -> dict[str, str]:
    """What budgeter did, readable by any client without changing the OpenAI body."""
    r = turn.result
    return {
        "X-Budgeter-Session": turn.session,
        "X-Budgeter-Tokens-Before": str(r.tokens_before),
        "X-Budgeter-Tokens-After": str(r.tokens),
        "X-Budgeter-Budget": str(r.budget),
        "X-Budgeter-Compacted": str(r.compacted).lower(),
        "X-Budgeter-Extends-Previous": str(r.extends_previous).lower(),
        "X-Budgeter-Cache-Break-At": str(r.prefix_changed_at),
        "X-Budgeter-Reread-Tokens": str(r.reread_tokens),
        "X-Budgeter-Handles": ",".join(r.handles[:MAX_HANDLES]),  # the full list: report()
        "X-Budgeter-Handle-Count": str(len(r.handles)),
        "X-Budgeter-Appended": str(turn.appended),
        "X-Budgeter-Forked": str(turn.forked).lower(),
    }


def notes_header(adapted: Sequence[Adaptation]) -> dict[str, str]:
    """``X-Budgeter-Notes``: how the request was rewritten for the model's template (tools sent as
    text, roles merged, ...), as header-safe ASCII; none when it was sent as given."""
    if not adapted:
        return {}
    text = "; ".join(a.note for a in adapted)
    return {"X-Budgeter-Notes": "".join(c if " " <= c <= "~" else "?" for c in text)}


async def not_found(http: HTTPRequest, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 404)
    what = "no such route" if status == 404 else "method not allowed"
    return JSON(error_body(f"{what}: {http.method} {http.url.path}", type_="invalid_request_error",
                           code="NOT_FOUND" if status == 404 else "METHOD_NOT_ALLOWED"), status)


def create_app(settings: Settings, sessions: Sessions, *, tokenizer: str = "") -> Starlette:
    proxy = Proxy(settings, sessions, tokenizer=tokenizer)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # anyio picks (imports) its backend on first use, and Starlette first uses it for a streamed
        # reply: ~10 ms and two dozen modules, in the first agent's first turn, not here
        await anyio.sleep(0)
        await proxy.announce()
        yield
        await proxy.close()

    routes = [
        Route("/v1/chat/completions", proxy.chat, methods=["POST"]),
        Route("/v1/models", proxy.models, methods=["GET"]),
        Route("/v1/budgeter/fit", proxy.fit, methods=["POST"]),
        Route("/health", proxy.health, methods=["GET"]),
        Route("/health/liveness", proxy.liveness, methods=["GET"]),
        Route("/metrics", proxy.metrics_route, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: not_found})
    app.state.proxy = proxy
    return app
