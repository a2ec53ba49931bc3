"""The ``budgeter`` command line (also ``python -m budgeter``)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from budgeter.core.jsonargs import dumps_text
from budgeter.core.messages import Message, Repair, check_tools, from_openai_list, repaired_note
from budgeter.core.policy import LOW_WATER
from budgeter.errors import BudgeterError, MissingExtra

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Exact, failure-aware context-window management for LLM agents.")


def show_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"budgeter {version('budgeter')}")
        raise typer.Exit()


@app.callback()
def root(version: Annotated[bool, typer.Option(
        "--version", callback=show_version, is_eager=True, help="Print the version and exit.")] = False) -> None:
    """Exact, failure-aware context-window management for LLM agents."""


def fail(reason: str, message: str) -> NoReturn:
    typer.echo(f"budgeter: {reason}: {message}", err=True)
    raise typer.Exit(2)


def read_text(path: str) -> str:
    """A file's text, or standard input for ``-``; unreadable input is a clear error."""
    try:
        return sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail("INPUT_UNREADABLE", f"{path}: {getattr(exc, 'strerror', None) or exc}")


def names(csv: str) -> list[str]:
    return [n.strip() for n in csv.split(",") if n.strip()]


TokenizerOpt = Annotated[str | None, typer.Option("--tokenizer", "-t", help=(
    "Built-in name (see `budgeter tokenizers`) or a path: model folder, tokenizer.json, .gguf, "
    ".tiktoken. Default: qwen3.6."))]


@app.command()
def trim(
    input: Annotated[str, typer.Argument(help="Chat-completions request body (JSON), or - for stdin.")],
    tokenizer: TokenizerOpt = None,
    window: Annotated[int, typer.Option(help="Context window of the model, in tokens.")] = 32768,
    reserve: Annotated[int, typer.Option(help="Tokens kept free for the reply.")] = 2048,
    low_water: Annotated[float, typer.Option(help="When over budget, compact to this share of it.")] = LOW_WATER,
    protect_tail: Annotated[int, typer.Option(help="Latest turns kept as they are.")] = 2,
    chat_format: Annotated[str | None, typer.Option(
        help="Use budgeter's named format (chatml) instead of the model template.")] = None,
    payloads: Annotated[Path | None, typer.Option(help="Write elided payloads here as {handle: text}.")] = None,
    reads: Annotated[str, typer.Option(help="Comma-separated tools that read files.")] = "",
    writes: Annotated[str, typer.Option(help="Comma-separated tools that write whole files.")] = "",
    edits: Annotated[str, typer.Option(help="Comma-separated tools that edit files in place.")] = "",
    shrink_min_chars: Annotated[int, typer.Option(help="Shrink texts longer than this outside the tail.")] = 2000,
    report_out: Annotated[str | None, typer.Option("--report", help=(
        "Write the compaction report (JSON) to this file; - for stderr."))] = None,
) -> None:
    """Compact a request body so it fits WINDOW - RESERVE tokens by the exact count.

    The output is the request body with its messages compacted; every other field (model,
    temperature, tools, ...) is kept as given, so it can be posted as is."""
    from budgeter.core import trim as run_trim
    from budgeter.core.chains import assemble
    from budgeter.core.policy import policy_from_dict
    from budgeter.tokenizers import resolve

    one_shot()
    body = read_transcript(input)
    check_reserve(window, reserve)
    repairs: list[Repair] = []
    try:
        messages, tools = request_of(body, repairs)
        counter = resolve(tokenizer, chat_format=chat_format)
        policy = policy_from_dict({
            "window": window, "reserve": reserve, "low_water": low_water,
            "protect_tail_turns": protect_tail, "shrink_min_chars": shrink_min_chars,
            "file_tools": {"reads": names(reads), "writes": names(writes), "edits": names(edits)}})
        result = run_trim(messages, counter=counter, tools=tools, policy=policy)
    except BudgeterError as exc:
        fail(exc.reason, exc.message)
    warn_repaired(repairs)
    if payloads is not None:
        shown = {h: assemble(h, result.links.__getitem__) for h in result.links if h in result.handles}
        payloads.write_text(dumps_text({**result.payloads, **shown}, indent=1), encoding="utf-8")
    if report_out is not None:
        write_out(report_out, dumps_text({"tokenizer": counter.name, **result.report()}, indent=1) + "\n")
    # what was counted, so the server renders exactly that (a template's rewrite: ``sent``)
    from budgeter.core.counting import sent

    wire = sent(counter, result.messages, tools)
    warn_adapted(counter, wire)
    if wire is None:
        typer.echo(dumps_text({**body, "messages": result.openai_messages()}, indent=1))
    else:
        out = {**body, "messages": wire[0]}
        out.pop("tools", None)
        typer.echo(dumps_text({**out, **({"tools": wire[1]} if wire[1] else {})}, indent=1))


def one_shot() -> None:
    """A command that loads a tokenizer, counts once and exits: no fastokens twin unless it counts
    much (``budgeter/tokenizers/twin.py``, ``Later``), and no clean-up at exit (``main`` reads
    ``twin.deferred()``)."""
    from budgeter.tokenizers.twin import defer

    defer()


def request_of(body: dict[str, Any], repairs: list[Repair]) -> tuple[list[Message], list[Any]]:
    """The messages and the tools of a request body; ``repairs`` gets what parsing repaired."""
    return from_openai_list(body["messages"], repairs=repairs), check_tools(body.get("tools") or [], field="tools")


def warn_adapted(counter: Any, wire: Any) -> None:
    """One line on stderr when the request was rewritten for the template (``wire``: what
    ``core.counting.sent`` gave): the model does not see it as written."""
    from budgeter.core.counting import adaptations

    if wire is not None:
        notes = "; ".join(a.note for a in adaptations(counter))
        typer.echo(f"budgeter: warning: the request was rewritten for {counter.name}'s template: {notes}", err=True)


def warn_repaired(repairs: Sequence[Repair]) -> None:
    """One line on stderr when lone surrogates in the messages were made U+FFFD (``Repair``s)."""
    if repairs:
        typer.echo(f"budgeter: warning: {repaired_note(repairs)}", err=True)


def check_reserve(window: int, reserve: int) -> None:
    if window < 1 or not 0 <= reserve < window:
        fail("INVALID_INPUT", f"--reserve {reserve}{' (the default)' if reserve == 2048 else ''} must be "
             f">= 0 and smaller than --window {window}; pass a smaller --reserve or a larger --window")


def write_out(path: str, text: str) -> None:
    """Text to a file, or to standard error for ``-``."""
    if path == "-":
        typer.echo(text, err=True, nl=False)
        return
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        fail("OUTPUT_UNWRITABLE", f"{path}: {exc.strerror or exc}")


@app.command()
def tokenizers() -> None:
    """List the built-in tokenizers, each with the chat template it renders."""
    from budgeter.tokenizers import DEFAULT
    from budgeter.tokenizers.registry import BUILTINS
    from budgeter.tokenizers.servers import DEFAULT_SERVER, SERVERS

    for name, builtin in BUILTINS.items():
        typer.echo(f"{name}{' (default)' if name == DEFAULT else ''}\t{builtin.description}\t"
                   f"template: {builtin.template}")
    typer.echo(f"# also: a model folder, tokenizer.json, .gguf, .tiktoken or ollama:NAME[:TAG]; append "
               f"@SERVER for its template conventions ({', '.join(SERVERS)}; default {DEFAULT_SERVER})")


@app.command()
def render(
    input: Annotated[str, typer.Argument(help="Chat-completions request body (JSON), or - for stdin.")],
    tokenizer: TokenizerOpt = None,
    chat_format: Annotated[str | None, typer.Option(
        help="A named format (chatml), a carried template (qwen3.6, qwen2.5, gemma3) or a .jinja file.")] = None,
    server: Annotated[str | None, typer.Option(
        help="Whose template conventions: llama.cpp (default) or vllm.")] = None,
) -> None:
    """Print the exact text a count is taken from; the count and the profile's notes go to stderr."""
    from budgeter.core.counting import sent
    from budgeter.tokenizers import resolve

    one_shot()
    body = read_transcript(input)
    repairs: list[Repair] = []
    try:
        messages, tools = request_of(body, repairs)
        counter = resolve(tokenizer, chat_format=chat_format, server=server)
        text = counter.render(messages, tools)  # type: ignore[attr-defined]
        tokens = counter.count_prompt(messages, tools)
    except BudgeterError as exc:
        fail(exc.reason, exc.message)
    warn_repaired(repairs)
    warn_adapted(counter, sent(counter, messages, tools))
    sys.stdout.write(text)
    sys.stdout.flush()
    typer.echo(f"# {counter.name}: {tokens} tokens", err=True)
    for note in counter.notes:
        typer.echo(f"# {note}", err=True)


def read_json(path: str) -> Any:
    text = read_text(path)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        fail("INVALID_JSON", f"{path}: {exc}")


def emit(value: Any, *, ok: bool = True) -> None:
    typer.echo(dumps_text(value, indent=1))
    if not ok:
        raise typer.Exit(1)


@app.command()
def validate(input: Annotated[str, typer.Argument(help=(
        'JSON {"tool_call": {...}, "tools": [...], "finish_reason": "length"?, "policy": {...}?}, '
        'or - for stdin. policy: e.g. {"path_root": "/abs/workspace"}.'))]) -> None:
    """Check a tool call before running it. Exit 1 when it must not run."""
    from budgeter.core.guards import validate_tool_call
    from budgeter.core.messages import ToolCall
    from budgeter.core.policy import policy_from_dict

    body = read_json(input)
    if isinstance(body, dict) and "tool_call" not in body and ("function" in body or "name" in body):
        body = {"tool_call": body}  # a bare tool call, as the model returned it
    call = body.get("tool_call") if isinstance(body, dict) else None
    fn = call.get("function", call) if isinstance(call, dict) else None
    if not isinstance(call, dict) or not isinstance(fn, dict) or not isinstance(fn.get("name"), str) \
            or not fn["name"]:
        fail("INVALID_INPUT", f"{input}: got {describe(body)}; expected a tool call "
             '{"id", "type": "function", "function": {"name", "arguments"}}, or '
             '{"tool_call": {...}, "tools": [...], "finish_reason": ...}')
    arguments = fn.get("arguments", "")
    if not isinstance(arguments, str):
        arguments = dumps_text(arguments)
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        fail("INVALID_INPUT", "tools must be a list")
    raw_policy = body.get("policy") or {}
    if not isinstance(raw_policy, dict):
        fail("INVALID_INPUT", "policy must be an object of policy fields")
    try:
        policy = policy_from_dict(raw_policy)
    except BudgeterError as exc:
        fail(exc.reason, exc.message)
    verdict = validate_tool_call(ToolCall(str(call.get("id", "")), fn["name"], arguments), tools,
                                 finish_reason=body.get("finish_reason"), policy=policy)
    from budgeter.shapes import verdict_of

    emit(verdict_of(verdict, id=str(call.get("id", "")), name=fn["name"]), ok=verdict.runnable)


def describe(value: Any) -> str:
    """What a JSON value is, for error messages: its type, and the keys of an object."""
    if isinstance(value, dict):
        inner = value.get("tool_call")
        if isinstance(inner, dict):
            return f"a tool_call with keys {sorted(inner)}" if inner else "an empty tool_call"
        return f"an object with keys {sorted(value)}" if value else "an empty object"
    return {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(type(value), "a number")


@app.command("suggest-path")
def suggest_path(
    input: Annotated[str, typer.Argument(help='JSON {"content": ...} or the raw content; - for stdin.')],
    html_pages_seen: Annotated[int, typer.Option(help="HTML pages the session already wrote.")] = 0,
) -> None:
    """Propose a relative path for content whose write lost its path."""
    from budgeter.core.guards import rescue_path

    raw = read_text(input)
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        body = None
    content = body["content"] if isinstance(body, dict) and isinstance(body.get("content"), str) else raw
    if not content:
        fail("INVALID_INPUT", "content is empty")
    s = rescue_path(content, html_pages_seen=html_pages_seen)
    from budgeter.shapes import suggestion_of

    emit(suggestion_of(s))


@app.command("plan-edits")
def plan_edits_cmd(
    input: Annotated[str, typer.Argument(help=(
        'JSON {"snapshot": "...", "edits": [{"start_line", "end_line", "body", "expected_old"?}]}.'))],
    output: Annotated[Path | None, typer.Option(
        help="Write the new text here, only when every edit applied.")] = None,
) -> None:
    """Apply line edits queued against one snapshot, bottom-up. Exit 1 unless every edit applied
    (then --output is left untouched)."""
    from budgeter.core.edits import Edit, plan_edits, strip_line_numbers

    body = read_json(input)
    try:
        snapshot = body["snapshot"]
        edits = [Edit(int(e["start_line"]), int(e["end_line"]), str(e.get("body", "")),
                      e.get("expected_old")) for e in body["edits"]]
        if not isinstance(snapshot, str) or not edits:
            raise TypeError
    except (KeyError, TypeError, ValueError):
        fail("INVALID_INPUT", "expected a snapshot string and a non-empty list of edits with "
             "start_line, end_line and body")
    plan = plan_edits(strip_line_numbers(snapshot), edits)
    if output is not None and plan.ok:
        write_out(str(output), plan.text)
    from budgeter.shapes import plan_of

    emit(plan_of(plan), ok=plan.ok)


def read_transcript(path: str) -> dict[str, Any]:
    """A chat-completions body, a JSON list of messages, or a JSONL transcript of messages."""
    text = read_text(path)
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):
        try:
            body = [json.loads(line) for line in text.splitlines() if line.strip()]
        except (ValueError, RecursionError) as exc:
            fail("INVALID_JSON", f"{path}: neither JSON nor JSONL: {exc}")
    if isinstance(body, list):
        body = {"messages": body}
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        fail("INVALID_INPUT", f"{path}: expected a chat-completions body, a list of messages or JSONL")
    return body


@app.command()
def profile(
    session: Annotated[str, typer.Argument(
        help="SESSION.json (body, list or JSONL), -, or a session id with --server.")],
    tokenizer: Annotated[list[str] | None, typer.Option("--tokenizer", "-t", help=(
        "Tokenizer SPEC to profile with (repeatable; compared side by side). Default: qwen3.6."))] = None,
    window: Annotated[int, typer.Option(help="Window for the compaction what-if.")] = 32768,
    reserve: Annotated[int, typer.Option(help="Tokens kept free for the reply.")] = 2048,
    html_out: Annotated[Path | None, typer.Option("--html", help="Write a self-contained HTML report.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
    server: Annotated[str | None, typer.Option(help="Profile a stored session on this budgeter server.")] = None,
) -> None:
    """Where a session's tokens go, per tokenizer: composition, waste, kinds, compaction what-if."""
    from budgeter.profiling import profile_body, show

    repairs: list[Repair] = []
    try:
        if server:
            from budgeter.client import Client

            with Client(server) as client:
                profiles = client.profile(session, tokenizers=tokenizer or [], window=window)
            source = f"{server} session {session}"
        else:
            one_shot()
            messages, tools = request_of(read_transcript(session), repairs)
            profiles = profile_body(messages, tools, tokenizers=tokenizer or [], window=window, reserve=reserve,
                                    progress=not as_json)
            source = session
    except BudgeterError as exc:
        fail(exc.reason, exc.message)
    warn_repaired(repairs)
    if html_out is not None:
        from budgeter.report import render

        html_out.write_text(render(profiles, source=source), encoding="utf-8")
    if as_json:
        typer.echo(dumps_text(profiles if len(profiles) > 1 else profiles[0], indent=1))
    else:
        show(profiles)
        if html_out is not None:
            typer.echo(f"HTML report: {html_out}")


@app.command()
def health(
    target: Annotated[str, typer.Option(help="host:port of a budgeter server.")] = "127.0.0.1:50051",
    service: Annotated[str, typer.Option(help="Service name to check; empty means the server.")] = "",
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the answer.")] = 3.0,
) -> None:
    """Standard gRPC health check (for container HEALTHCHECKs): exit 0 when SERVING, else 1."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as err:
            typer.echo(f"budgeter: {err.code().name}: {err.details() or 'no answer'}", err=True)
            raise typer.Exit(1) from None
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    typer.echo(status)
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        raise typer.Exit(1)


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Address to listen on.", show_default="127.0.0.1")] = None,
    port: Annotated[int | None, typer.Option(help="gRPC port; 0 picks a free one.", show_default="50051")] = None,
    store: Annotated[str | None, typer.Option(help=(
        "memory://, sqlite:///PATH or redis://HOST:PORT/DB (redis+cluster:// for a Cluster)."),
        show_default="SQLite at DATA_DIR/budgeter.db")] = None,
    data_dir: Annotated[Path | None, typer.Option(
        help="Where the embedded store lives.", show_default="$XDG_DATA_HOME/budgeter or "
        "~/.local/share/budgeter")] = None,
    tokenizer: Annotated[list[str] | None, typer.Option("--tokenizer", "-t", help=(
        "Extra tokenizer profile NAME=SPEC (repeatable); the built-ins are always offered."),
        show_default="none")] = None,
    default_tokenizer: Annotated[str | None, typer.Option(
        help="Profile used when a request names none.", show_default="qwen3.6")] = None,
    chat_format: Annotated[list[str] | None, typer.Option(help=(
        "A profile's chat format NAME=FORMAT (repeatable): chatml, qwen3.6, qwen2.5, gemma3 or a .jinja "
        "file; required for a tokenizer that ships no template."), show_default="none")] = None,
    metrics_port: Annotated[int | None, typer.Option(
        help="Prometheus /metrics port; 0 turns it off.", show_default="9464")] = None,
    config: Annotated[Path | None, typer.Option(help="TOML file with any of these settings.",
                                                show_default="none")] = None,
    auth_tokens_file: Annotated[Path | None, typer.Option(
        help="Require bearer tokens: one 'TENANT TOKEN' pair per line.",
        show_default="none: no authentication")] = None,
    tls_cert: Annotated[Path | None, typer.Option(help="Serve TLS with this certificate (PEM).",
                                                  show_default="none: plain text")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="The certificate's private key (PEM).",
                                                 show_default="none")] = None,
    tls_client_ca: Annotated[Path | None, typer.Option(help="Require client certificates from this CA.",
                                                       show_default="none")] = None,
    cpus: Annotated[str | None, typer.Option(help=(
        "Run only on these CPUs, e.g. 0 or 0,2-3: one replica per core, each on its own."),
        show_default="any")] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Run the gRPC service until SIGTERM or Ctrl-C. Settings also come from BUDGETER_* variables."""
    import logging

    from pydantic import ValidationError

    from budgeter.settings import load_settings

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = load_settings(config, host=host, port=port, store=store, data_dir=data_dir,
                                 tokenizers=tokenizer, default_tokenizer=default_tokenizer, chat_formats=chat_format,
                                 metrics_port=metrics_port, auth_tokens_file=auth_tokens_file,
                                 tls_cert=tls_cert, tls_key=tls_key, tls_client_ca=tls_client_ca, cpus=cpus)
        settings.tokens()
    except (ValidationError, ValueError, OSError) as exc:
        fail("INVALID_SETTINGS", str(exc).replace("\n", " "))
    if settings.grpc_experiments and "GRPC_EXPERIMENTS" not in os.environ and "grpc" not in sys.modules:
        os.environ["GRPC_EXPERIMENTS"] = settings.grpc_experiments  # read once, by the import below
    from budgeter.service.server import serve as run

    try:
        run(settings)
    except BudgeterError as exc:
        fail(exc.reason, exc.message)


@app.command()
def proxy(
    upstream: Annotated[str | None, typer.Option(help=(
        "Base URL of the OpenAI-compatible server to forward to. [default: http://127.0.0.1:8080/v1]"))] = None,
    tokenizer: Annotated[str | None, typer.Option("--tokenizer", "-t", help=(
        "The upstream model's tokenizer: a built-in name or a path (model folder, tokenizer.json, "
        ".gguf). [default: qwen3.6]"))] = None,
    chat_format: Annotated[str | None, typer.Option(help=(
        "The chat template the upstream renders: chatml, qwen3.6, qwen2.5, gemma3 or a .jinja file; "
        "required for a tokenizer that ships none (a GGUF without one). [default: the tokenizer's]"))] = None,
    host: Annotated[str | None, typer.Option(help="Address to listen on. [default: 127.0.0.1]")] = None,
    port: Annotated[int | None, typer.Option(help="HTTP port. [default: 8400]")] = None,
    window: Annotated[int | None, typer.Option(help="The model's context window. [default: 32768]")] = None,
    reserve: Annotated[int | None, typer.Option(
        help="Tokens kept for the reply; sent as max_tokens when a request has none. [default: 2048]")] = None,
    low_water: Annotated[float | None, typer.Option(
        help=f"When over budget, compact to this share of it. [default: {LOW_WATER}]")] = None,
    store: Annotated[str | None, typer.Option(help=(
        "memory://, sqlite:///PATH or redis://HOST:PORT/DB; the same store as `budgeter serve` may be "
        "shared. [default: SQLite at DATA_DIR/budgeter.db]"))] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Where the embedded store lives.")] = None,
    recall_tool: Annotated[bool | None, typer.Option(
        "--recall-tool/--no-recall-tool", help="Offer the model budgeter_recall(handle). [default: off]")] = None,
    read_timeout: Annotated[float | None, typer.Option(
        help="Seconds the upstream may stay silent. [default: 600]")] = None,
    config: Annotated[Path | None, typer.Option(help="TOML file with any of the settings.")] = None,
    cpus: Annotated[str | None, typer.Option(help="Run only on these CPUs, e.g. 0 or 0,2-3. [default: any]")] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Run the OpenAI-compatible proxy: point an agent's base_url at it instead of at the server."""
    import logging

    from pydantic import ValidationError

    from budgeter.settings import load_settings

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    profiles = None
    if tokenizer and ("/" in tokenizer or Path(tokenizer).exists()):  # a path: a profile named after it
        name = Path(tokenizer.rstrip("/")).stem.replace(".", "-") or "model"
        profiles, tokenizer = [f"{name}={tokenizer}"], name
    try:
        settings = load_settings(config, upstream=upstream, default_tokenizer=tokenizer, tokenizers=profiles,
                                 host=host, proxy_port=port, window=window, reserve=reserve, low_water=low_water,
                                 store=store,
                                 data_dir=data_dir, recall_tool=recall_tool,
                                 upstream_read_timeout=read_timeout,
                                 cpus=cpus)
        if settings.reserve >= settings.window:
            raise ValueError(f"reserve ({settings.reserve}) must be smaller than the window ({settings.window})")
        if chat_format:  # for the profile the proxy counts with
            settings = settings.model_copy(update={"chat_formats": {
                **settings.chat_formats, settings.default_tokenizer: chat_format}})
    except (ValidationError, ValueError, OSError) as exc:
        fail("INVALID_SETTINGS", str(exc).replace("\n", " "))
    try:
        from budgeter.proxy.server import serve as run
    except ImportError as exc:
        if not MissingExtra.explains(exc, "proxy"):
            raise
        fail(MissingExtra.reason, MissingExtra("budgeter proxy", "proxy").message)

    try:
        run(settings, log_level=log_level.lower())
    except BudgeterError as exc:
        fail(exc.reason, exc.message)


def main() -> None:
    # transformers says "PyTorch was not found" on import; budgeter never needs PyTorch, and the
    # line would land in every command's output (and break the progress bar).
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    from budgeter.tokenizers import cache

    cache.configure(tokenizer_cache(os.environ))
    try:
        app()
    except SystemExit as exc:
        from budgeter.tokenizers.twin import deferred  # (set by ``one_shot``; stdlib imports only)

        if not deferred() or not isinstance(exc.code, int | None):
            raise
        # a one-shot command has written its answer: leave without freeing what it loaded (the
        # tokenizer's Rust tables took a sixth of `budgeter trim`'s run to free, bench_flat ready)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError):  # (a reader that went away: `budgeter trim x.json | head`)
                stream.flush()
        os._exit(exc.code or 0)


def tokenizer_cache(env: Mapping[str, str]) -> Path | None:
    """Where built vocabularies and compiled templates are kept (``budgeter/tokenizers/cache.py``):
    ``BUDGETER_TOKENIZER_CACHE`` (a folder, or ``off``), else ``$XDG_CACHE_HOME/budgeter/tokenizers``,
    else ``~/.cache/budgeter/tokenizers``."""
    value = env.get("BUDGETER_TOKENIZER_CACHE", "").strip()
    if value.lower() in ("off", "0", "false", "no", "none"):
        return None
    if value:
        return Path(value).expanduser()
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "budgeter" / "tokenizers"
