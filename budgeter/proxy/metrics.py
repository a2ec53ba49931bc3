"""The proxy's metrics: those of ``budgeter serve`` (same names, same registry type) plus the live
proof of exactness and the proxy's own overhead."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from prometheus_client import Counter, Histogram

from budgeter.core.counting import Adaptation
from budgeter.sessions.metrics import BUCKETS, Metrics

log = logging.getLogger("budgeter.proxy")
DELTA_BUCKETS = (-1000, -100, -10, -2, -1, 0, 1, 2, 10, 100, 1000)


class ProxyMetrics(Metrics):
    def __init__(self) -> None:
        super().__init__()
        self.prompt_delta = Histogram(
            "budgeter_proxy_prompt_tokens_delta", "Upstream usage.prompt_tokens minus budgeter's count "
            "of the prompt it sent (0 = exact), per model.", ["model"], buckets=DELTA_BUCKETS,
            registry=self.registry)
        self.prompt_mismatches = Counter(
            "budgeter_proxy_prompt_tokens_mismatches", "Replies whose usage.prompt_tokens differed "
            "from budgeter's count.", ["model"], registry=self.registry)
        self.overhead_seconds = Histogram(
            "budgeter_proxy_overhead_seconds", "Time a chat completion spent in the proxy, not "
            "counting the upstream (reconcile, append, build, the reply's size check).", buckets=BUCKETS,
            registry=self.registry)
        self.upstream_seconds = Histogram(
            "budgeter_proxy_upstream_duration_seconds", "Upstream time per chat completion, by "
            "HTTP status.", ["status"], buckets=BUCKETS, registry=self.registry)
        self.adapted_requests = Counter(
            "budgeter_proxy_adapted_requests", "Requests sent upstream rewritten for the model's template, "
            "by kind of rewrite (tools_as_text, roles_merged, system_as_user, ...).", ["kind"],
            registry=self.registry)
        self.bodies = Counter(
            "budgeter_proxy_request_bodies", "Chat completion bodies read from where their conversation's "
            "previous request ended (read=continued), or read whole (read=whole: a new conversation, an "
            "edit, or a client that rewrites what comes before the new messages).", ["read"],
            registry=self.registry)
        self.recalls = Counter(
            "budgeter_proxy_recalls", "budgeter_recall calls answered by the proxy.", registry=self.registry)

    def adapted(self, adaptations: Sequence[Adaptation]) -> None:
        for a in adaptations:
            self.adapted_requests.labels(a.kind).inc()

    def exactness(self, *, model: str, counted: int, reported: int | None, session: str) -> None:
        if reported is None:
            return
        delta = reported - counted
        self.prompt_delta.labels(model).observe(delta)
        if delta:
            self.prompt_mismatches.labels(model).inc()
            log.warning("prompt_tokens mismatch: upstream counted %d, budgeter %d (delta %+d) for model "
                        "%r, session %s", reported, counted, delta, model, session)
