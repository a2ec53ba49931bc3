"""A client that never finishes its request head (slowloris) loses its connection after
``header_timeout``; one that sends its head in time is served. Each test waits for the server's
close (a blocking recv), with a generous safety timeout, never for a duration."""

from __future__ import annotations

import socket
import threading

import httpx
import pytest

pytestmark = pytest.mark.shared

SAFETY = 60.0  # only against a hang: the close is expected long before


def closed(sock: socket.socket) -> bool:
    """Block until the server closes the connection: True, or False if it sends anything else."""
    sock.settimeout(SAFETY)
    try:
        return sock.recv(1 << 16) == b""
    except ConnectionResetError:
        return True


def trickle(sock: socket.socket, head: bytes, stop: threading.Event) -> threading.Thread:
    """Send ``head`` a byte every 0.2 s until the server closes: a head of thousands of bytes is
    never complete within the deadline, however busy the machine (the pace only keeps bytes coming)."""
    def run() -> None:
        for byte in head:
            if stop.wait(0.2):
                return
            try:
                sock.send(bytes([byte]))
            except OSError:
                return
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def served_once(sock: socket.socket) -> None:
    """A whole request on ``sock`` and its whole answer, the connection kept alive."""
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: proxy\r\n\r\n")
    sock.settimeout(SAFETY)
    got = b""
    while b"\r\n\r\n" not in got:
        got += sock.recv(1 << 16)
    head, _, body = got.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    while len(body) < length:
        body += sock.recv(1 << 16)
    assert head.startswith(b"HTTP/1.1 200") and b"SERVING" in body


ENDLESS_HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nX-Slow: " + b"a" * 10_000


@pytest.mark.parametrize("case", ["silent", "first request", "next request on a kept-alive connection"])
def test_a_connection_without_a_whole_request_head_in_time_is_closed(make_proxy, case):
    proxy = make_proxy(header_timeout=0.5)
    stop = threading.Event()
    with socket.create_connection(("127.0.0.1", proxy.server.port)) as sock:
        if case == "next request on a kept-alive connection":
            served_once(sock)
        if case != "silent":
            trickle(sock, ENDLESS_HEAD, stop)
        try:
            assert closed(sock)
        finally:
            stop.set()
    r = httpx.get(proxy.base_url.removesuffix("/v1") + "/health")  # others are served as before
    assert r.status_code == 200


def test_a_head_in_time_is_served_and_its_connection_kept(make_proxy):
    proxy = make_proxy(header_timeout=30)
    with socket.create_connection(("127.0.0.1", proxy.server.port)) as sock:
        served_once(sock)
        served_once(sock)  # the same connection, kept alive


def test_the_proxys_connections_send_without_waiting_for_acks(make_proxy):
    """TCP_NODELAY on every accepted connection: without it a reply written as head then body
    waits for the client's delayed ACK on a kept-alive connection (tens of ms a turn)."""
    proxy = make_proxy()
    with socket.create_connection(("127.0.0.1", proxy.server.port)) as sock:
        served_once(sock)
        connections = list(proxy.server.server.server_state.connections)
        assert connections
        for protocol in connections:
            accepted = protocol.transport.get_extra_info("socket")
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
