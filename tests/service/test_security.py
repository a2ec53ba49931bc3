"""Authentication with tenants, TLS with generated certificates, and logs without message bodies."""

from __future__ import annotations

import logging
import subprocess

import grpc
import pytest

from budgeter.client import Client, ClientError
from budgeter.service.server import create_server
from budgeter.store import MemoryStore
from tests.service.agent import TOOLS, call, result
from tests.service.conftest import settings

TOKENS = {"alpha-token-0123456789": "alpha", "bravo-token-0123456789": "bravo"}


@pytest.fixture
def auth_server():
    srv = create_server(settings(auth_tokens=TOKENS), store=MemoryStore())
    yield srv
    srv.stop(0)


def test_tokens_are_required_and_tenants_are_isolated(auth_server):
    target = auth_server.target
    with Client(target) as anonymous:
        with pytest.raises(ClientError) as e:
            anonymous.create_session()
        assert (e.value.code, e.value.reason) == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
    with Client(target, token="wrong-token-0123456789") as wrong:
        with pytest.raises(ClientError) as e:
            wrong.tokenizers()
        assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
    with Client(target, token="alpha-token-0123456789") as alpha, \
            Client(target, token="bravo-token-0123456789") as bravo:
        a = alpha.create_session(session_id="shared-name")
        a.append([{"role": "user", "content": "alpha's secret plan"}])
        b = bravo.create_session(session_id="shared-name")  # same id, other tenant: no clash
        b.append([{"role": "user", "content": "bravo"}])
        alpha.create_session(session_id="only-alpha")
        assert [m["content"] for m in a.prompt().messages] == ["alpha's secret plan"]
        assert [m["content"] for m in b.prompt().messages] == ["bravo"]
        assert list(alpha.list_sessions(page_size=1)) == ["only-alpha", "shared-name"]
        assert list(bravo.list_sessions()) == ["shared-name"]
        for attempt in (lambda: bravo.get_session("only-alpha"),
                        lambda: bravo.append("only-alpha", [{"role": "user", "content": "x"}]),
                        lambda: bravo.prompt("only-alpha"), lambda: bravo.delete_session("only-alpha")):
            with pytest.raises(ClientError) as e:
                attempt()
            assert e.value.reason == "SESSION_NOT_FOUND"
        assert alpha.get_session("only-alpha")["message_count"] == 0
    with grpc.insecure_channel(target) as channel:  # probes stay open
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        assert health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest()).status == 1


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")

    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "2", "-subj", "/CN=budgeter test CA")
    for name, cn in (("server", "localhost"), ("client", "agent")):
        ssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={cn}")
        (d / f"{name}.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
        ssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext")
    return d


def test_tls_and_mutual_tls(certs):
    srv = create_server(settings(tls_cert=certs / "server.pem", tls_key=certs / "server.key"),
                        store=MemoryStore())
    try:
        with Client(f"localhost:{srv.port}", tls_ca=certs / "ca.pem") as c:
            assert c.count_tokens(text="hello over TLS") > 0
        with Client(srv.target, timeout=3, retries=0) as plain, pytest.raises(ClientError) as e:
            plain.tokenizers()  # plaintext to a TLS port fails
        assert e.value.code == grpc.StatusCode.UNAVAILABLE
    finally:
        srv.stop(0)
    srv = create_server(settings(tls_cert=certs / "server.pem", tls_key=certs / "server.key",
                                 tls_client_ca=certs / "ca.pem"), store=MemoryStore())
    try:
        with Client(f"localhost:{srv.port}", tls_ca=certs / "ca.pem", tls_cert=certs / "client.pem",
                    tls_key=certs / "client.key") as c:
            assert c.count_tokens(text="mutual") > 0
        with Client(f"localhost:{srv.port}", tls_ca=certs / "ca.pem", timeout=3, retries=0) as c, \
                pytest.raises(ClientError) as e:
            c.tokenizers()  # no client certificate
        assert e.value.code == grpc.StatusCode.UNAVAILABLE
    finally:
        srv.stop(0)


def test_generated_ids_are_unguessable(client):
    ids = {client.create_session().id for _ in range(20)}
    assert len(ids) == 20 and all(len(i) == 32 and int(i, 16) for i in ids)


def test_logs_never_hold_message_bodies(client, caplog):
    secret = "sk-SECRET-7f3a9c"
    caplog.set_level(logging.DEBUG)
    s = client.create_session(tools=TOOLS, window=2048, reserve=64)
    s.append([{"role": "user", "content": f"my key is {secret}"},
              call("c1", "write_file", {"path": "", "content": secret * 200}),
              result("c1", f"Error: {secret}")])
    s.prompt()
    s.validate_tool_call(call("c2", "write_file", {"path": "", "content": secret})["tool_calls"][0])
    s.plan_edits([{"start_line": 1, "end_line": 1, "body": secret}], snapshot=f"{secret}\n", path="a.txt")
    with pytest.raises(ClientError):
        s.append([{"role": "tool", "tool_call_id": "nope", "content": secret}], etag="1.bad")
    with pytest.raises(ClientError):
        client.count_tokens([{"role": "user", "content": secret}], text=secret)
    assert caplog.records, "expected some log records to check"
    assert secret not in caplog.text
