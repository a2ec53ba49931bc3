from __future__ import annotations

import pytest

from budgeter.client import Client
from budgeter.service.server import create_server
from budgeter.settings import Settings
from budgeter.store import MemoryStore


def settings(**kw) -> Settings:
    base = dict(host="127.0.0.1", port=0, metrics_port=0, store="memory://", max_workers=8)
    return Settings(**{**base, **kw})


@pytest.fixture
def server():
    srv = create_server(settings(), store=MemoryStore())
    yield srv
    srv.stop(0)


@pytest.fixture
def client(server):
    with Client(server.target, timeout=30) as c:
        yield c
