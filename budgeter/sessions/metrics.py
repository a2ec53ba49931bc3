"""Prometheus metrics, each server with its own registry (served on a separate port)."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from budgeter.core.engine import BuildResult
from budgeter.core.messages import Repair

BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.rpc_seconds = Histogram(
            "budgeter_rpc_duration_seconds", "RPC latency by method and status code.",
            ["method", "code"], buckets=BUCKETS, registry=self.registry)
        self.rpcs_in_flight = Gauge(
            "budgeter_rpcs_in_flight", "RPCs being handled now, by method (a stopping server drains them).",
            ["method"], registry=self.registry)
        self.tokens_counted = Counter(
            "budgeter_tokens_counted", "Tokens counted: appended messages and CountTokens calls.",
            ["tokenizer"], registry=self.registry)
        self.tokens_elided = Counter(
            "budgeter_tokens_elided", "Tokens removed from prompts, by compaction step.",
            ["step"], registry=self.registry)
        self.store_errors = Counter(
            "budgeter_store_errors", "Store calls that failed (the store was unavailable).",
            ["store"], registry=self.registry)
        self.repaired_requests = Counter(
            "budgeter_repaired_requests", "Requests whose messages were repaired on the way in, by kind "
            "(lone_surrogates: made U+FFFD, which a server can take).", ["kind"], registry=self.registry)
        self.store_round_trips = Gauge(
            "budgeter_store_round_trips", "Requests sent to a networked store (a pipeline or a "
            "script counts once); 0 for the embedded stores.", registry=self.registry)

    def watch_store(self, store: object) -> None:
        self.store_round_trips.set_function(lambda: float(getattr(store, "round_trips", 0)))

    def repaired(self, repairs: Sequence[Repair]) -> None:
        if repairs:
            self.repaired_requests.labels("lone_surrogates").inc()

    def built(self, result: BuildResult) -> None:
        for step in result.steps:
            saved = step.tokens_before - step.tokens_after
            if saved > 0:
                self.tokens_elided.labels(step.step).inc(saved)
