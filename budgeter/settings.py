"""One frozen ``Settings`` for the server, with defaults that work out of the box.

Sources, highest first: explicit values (CLI flags), ``BUDGETER_*`` environment variables, a TOML
config file (``--config``), the defaults. Only entry points (``budgeter serve``) build it; core,
store and tokenizers never read the environment.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from budgeter.core.policy import LOW_WATER
from budgeter.tokenizers import DEFAULT


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "budgeter"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BUDGETER_", frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(50051, ge=0, le=65535)
    store: str = ""
    """memory://, sqlite:///PATH, redis://HOST:PORT/DB or redis+cluster://HOST:PORT.
    Empty: SQLite in WAL mode at DATA_DIR/budgeter.db."""
    data_dir: Path = Field(default_factory=default_data_dir)
    redis_prefix: str = "budgeter"
    tokenizers: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    """Extra profiles NAME -> SPEC (path or built-in name), offered beside the built-ins."""
    chat_formats: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    """Profile NAME -> chat format (``chatml``, a carried template such as ``gemma3``, or a
    ``.jinja`` file): the template the model's server renders, for a tokenizer that ships none
    (required there) or to override the one it ships."""
    default_tokenizer: str = DEFAULT
    preload: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Profiles loaded at start-up (the default profile always is)."""
    metrics_port: int = Field(9464, ge=0, le=65535)
    """Prometheus /metrics on its own port; 0 turns it off."""
    max_workers: int = Field(8, ge=1)
    """Threads serving RPCs: more than the cores, as calls wait on the store (``bench_load``)."""
    grpc_experiments: str = "-event_engine_client,-event_engine_listener"
    """``GRPC_EXPERIMENTS`` for ``budgeter serve`` when its environment does not set it. The default
    turns grpc's EventEngine off, so a call's I/O runs on the thread that waits for it, not handed
    between threads (``bench_grpc``). Empty: grpc's own default."""
    cpus: Annotated[list[Annotated[int, Field(ge=0)]], NoDecode] = Field(default_factory=list)
    """CPUs the server runs on (``"0"``, ``"0,2"``, ``"0-3"``); empty: wherever the OS schedules
    it. Why pin: ``sessions/cpus.py``."""
    max_message_bytes: int = Field(4 << 20, ge=1024)
    max_messages_per_append: int = Field(1000, ge=1)
    max_sessions: int = Field(100_000, ge=1)
    max_request_bytes: int = Field(64 << 20, ge=1 << 16)
    idempotency_ttl: float = Field(86_400.0, gt=0)
    """Seconds a request_id is remembered."""
    durability: Literal["auto", "primary", "replica", "aof"] = "auto"
    """(Redis) When an append is acknowledged: ``primary``, once the primary has it; ``replica``,
    once ``durability_replicas`` replicas have it too (WAIT); ``aof``, once the primary and they
    have also written it to their append-only files (WAITAOF, Redis >= 7.2); ``auto``: ``replica``
    when every primary has a replica at start, else ``primary``. deploy/OPERATIONS.md says what each
    survives and costs."""
    durability_replicas: int = Field(1, ge=1)
    durability_timeout: float = Field(1.0, gt=0, lt=4)
    """Seconds an append waits for its replicas; then it is refused (UNAVAILABLE, STORE_UNAVAILABLE),
    and a retry with the same request_id is answered as a replay if the write survives. Under 4: the
    store connection's read timeout is 5 s, and a WAIT that runs out must be told apart from a store
    that does not answer (``store/redis.py``)."""
    live_sessions: int = Field(512, ge=1)
    """Sessions whose engine state a replica keeps in memory (least recently used go first)."""
    live_bytes: int = Field(1 << 30, ge=1)
    """Bytes of engine state a replica keeps in memory, estimated from each session's history; how
    it evicts: ``sessions/replica.py``."""
    grace: float = Field(5.0, ge=0)
    """Seconds in-flight RPCs get on SIGTERM."""
    store_wait: float = Field(3.0, ge=0)
    """Seconds to wait at start-up for the store to answer; then the server refuses to start."""
    store_check_interval: float = Field(5.0, gt=0)
    """Seconds between store checks; health is NOT_SERVING while the store is down."""
    auth_tokens: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    """Bearer token -> tenant. Empty: no authentication (bind to localhost or a private network)."""
    auth_tokens_file: Path | None = None
    """One ``TENANT TOKEN`` pair per line (``#`` comments); merged into ``auth_tokens``."""
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    """With it, clients must present a certificate signed by this CA (mutual TLS)."""
    config_file: Path | None = None

    # -- budgeter proxy (the OpenAI-compatible front door) --------------------------------------
    upstream: str = "http://127.0.0.1:8080/v1"
    """Base URL of the OpenAI-compatible server the proxy forwards to (llama.cpp, vLLM, ...)."""
    proxy_port: int = Field(8400, ge=0, le=65535)
    window: int = Field(32768, gt=0)
    """The upstream model's context window, in tokens."""
    reserve: int = Field(2048, ge=0)
    """Tokens kept free for the reply; sent as max_tokens when a request has none."""
    low_water: float = Field(LOW_WATER, ge=0.1, le=1.0)
    """When a prompt is over budget, compact it down to this share of the budget (the policy's
    ``low_water``): lower, fewer and smaller re-reads for a prefix-caching upstream."""
    recall_tool: bool = False
    """Offer the model ``budgeter_recall(handle)`` and answer it from the store."""
    upstream_connect_timeout: float = Field(5.0, gt=0)
    upstream_read_timeout: float = Field(600.0, gt=0)
    """Seconds the upstream may stay silent (before its first byte, or between chunks)."""
    session_ttl: float = Field(7 * 86_400.0, gt=0)
    """Seconds a proxy session lives after its last append."""
    header_timeout: float = Field(30.0, gt=0)
    """Seconds a client of the proxy has to send a request's line and headers, counted from the
    connection or from the first byte of a next request on it; then the connection is closed.
    uvicorn's ``timeout_keep_alive`` covers only the silence between requests: without this, a
    client sending its headers a byte at a time (slowloris) holds a connection for ever."""
    max_reply_bytes: int = Field(64 << 20, ge=1 << 16)
    """Bytes the proxy reads of one upstream reply (a body, or a stream's events as they pass);
    more is a 502 ``UPSTREAM_TOO_LARGE``. A reply whose message is over ``max_message_bytes``
    cannot be stored and is refused the same way."""

    @field_validator("tokenizers", "chat_formats", "auth_tokens", mode="before")
    @classmethod
    def _pairs(cls, value: Any) -> Any:
        """Accept ``["NAME=SPEC", ...]`` (flags) and ``"A=x,B=y"`` (environment)."""
        if isinstance(value, str):
            value = [v for v in value.split(",") if v.strip()]
        if isinstance(value, list | tuple):
            out = {}
            for pair in value:
                name, sep, spec = str(pair).partition("=")
                if not sep or not name.strip() or not spec.strip():
                    raise ValueError(f"expected NAME=SPEC, got {pair!r}")
                out[name.strip()] = spec.strip()
            return out
        return value

    @field_validator("cpus", mode="before")
    @classmethod
    def _cpu_list(cls, value: Any) -> Any:
        """Accept ``"0,2-3"`` (flags, environment) as well as a list of numbers (TOML)."""
        if isinstance(value, int):
            return [value]
        if not isinstance(value, str):
            return value
        out: list[int] = []
        for part in (p.strip() for p in value.split(",")):
            if not part:
                continue
            low, dash, high = part.partition("-")
            if not (low.strip().isdigit() and (not dash or high.strip().isdigit())):
                raise ValueError(f"expected CPU numbers such as 0,2-3, got {part!r}")
            first, last = int(low), int(high) if dash else int(low)
            if last < first:
                raise ValueError(f"CPU range {part!r} runs backwards")
            out += range(first, last + 1)
        return out

    @field_validator("cpus")
    @classmethod
    def _cpus_sorted(cls, value: list[int]) -> list[int]:
        return sorted(set(value))

    @field_validator("preload", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        return [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else value

    def tokens(self) -> dict[str, str]:
        """``auth_tokens`` plus the pairs of ``auth_tokens_file``."""
        out = dict(self.auth_tokens)
        if self.auth_tokens_file is not None:
            for n, line in enumerate(self.auth_tokens_file.read_text().splitlines(), 1):
                line = line.split("#", 1)[0].strip()
                if not line:
                    continue
                tenant, _, token = line.partition(" ")
                if not token.strip():
                    raise ValueError(f"{self.auth_tokens_file}:{n}: expected TENANT TOKEN")
                out[token.strip()] = tenant
        return out

    @property
    def store_url(self) -> str:
        return self.store or f"sqlite://{self.data_dir / 'budgeter.db'}"

    def store_options(self) -> dict[str, Any]:
        """``open_store``'s options for ``store_url``, the same for every front door."""
        opts: dict[str, Any] = {"idempotency_ttl": self.idempotency_ttl}
        if self.store_url.startswith(("redis", "unix://")):
            opts.update(prefix=self.redis_prefix, durability=self.durability,
                        durability_replicas=self.durability_replicas, durability_timeout=self.durability_timeout)
        return opts

    @property
    def store_shown(self) -> str:
        """``store_url`` without its password, for logs and messages."""
        return redacted(self.store_url)

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # the TOML file named by ``config_file`` (flag) or ``BUDGETER_CONFIG_FILE``
        path = getattr(init_settings, "init_kwargs", {}).get("config_file") or os.environ.get("BUDGETER_CONFIG_FILE")
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls, toml_file=path))


def redacted(url: str) -> str:
    """A URL with its password hidden (user info, and a ``password=`` query parameter)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "<unparsable URL>"
    if parts.password or parts.username:  # redis://SECRET@host: a lone user name is the password
        user = parts.username if parts.password else ""
        hidden = f"{user}:***@{parts.hostname or ''}" + (f":{port}" if port else "")
        url = url.replace(parts.netloc, hidden, 1)
    return re.sub(r"([?&]password=)[^&#]*", r"\1***", url)


def load_settings(config_file: str | Path | None = None, **values: Any) -> Settings:
    """Build the settings from flags (``values``, None meaning unset), environment and file."""
    given = {k: v for k, v in values.items() if v is not None and v != [] and v != ()}
    if config_file:
        given["config_file"] = Path(config_file)
    return Settings(**given)
