"""The fetch guard of ``dreads serve``: a client's image URL on a loopback, private,
link-local or metadata address is never connected to (a listener there sees nothing), a
redirect is checked as the first request is, the connection goes to the address that was
checked, and every failure below HTTP reads the same."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from app.errors import ConfigError, ImageError, ImageUnreachable
from app.images import ImagePolicy, fetch_image, fetch_image_async
from app.images.guard import FetchGuard, FetchRefused
from tests.fixtures.images import png
from tests.fixtures.raw_server import RawServer, http_response

GUARDED = ImagePolicy(guard=FetchGuard(), timeout_s=5)


@pytest.fixture
def listener() -> Iterator[RawServer]:
    server = RawServer(lambda conn, _: conn.sendall(http_response(png(1))))
    yield server
    server.stop()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]"])
def test_a_loopback_url_is_refused_and_never_connected_to(listener: RawServer,
                                                          host: str) -> None:
    with pytest.raises(ImageUnreachable, match=r"^could not fetch image URL .*DREADS_FETCH"):
        fetch_image(f"http://{host}:{listener.port}/a.png", policy=GUARDED)
    assert listener.connections == 0


async def test_the_api_path_refuses_it_too(listener: RawServer) -> None:
    with pytest.raises(ImageUnreachable, match=r"^could not fetch image URL"):
        await fetch_image_async(f"{listener.url}/a.png", policy=GUARDED)
    assert listener.connections == 0


def test_without_a_guard_the_cli_fetches_local_urls(listener: RawServer) -> None:
    assert fetch_image(f"{listener.url}/a.png", policy=ImagePolicy()).width == 24
    assert listener.connections == 1


def test_the_allow_list_opens_a_network(listener: RawServer) -> None:
    policy = ImagePolicy(guard=FetchGuard.parse("127.0.0.0/8"))
    assert fetch_image(f"{listener.url}/a.png", policy=policy).width == 24


def test_a_redirect_to_a_refused_address_is_checked_again() -> None:
    hidden = RawServer(lambda conn, _: conn.sendall(http_response(png(2))), host="127.0.0.2")
    front = RawServer(lambda conn, _: conn.sendall(http_response(
        b"", status="302 Found", headers=(f"Location: {hidden.url}/secret.png",))))
    try:
        policy = ImagePolicy(guard=FetchGuard.parse("127.0.0.1/32"))
        with pytest.raises(ImageUnreachable, match=r"^could not fetch image URL"):
            fetch_image(f"{front.url}/a.png", policy=policy)
        assert front.connections == 1
        assert hidden.connections == 0
    finally:
        front.stop()
        hidden.stop()


def _resolving(monkeypatch: pytest.MonkeyPatch, answers: dict[str, list[str]]) -> None:
    real = socket.getaddrinfo

    def fake(host: str, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        if host not in answers:
            return real(host, port, *args, **kwargs)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (addr, port))
                for addr in answers[host]]

    monkeypatch.setattr(socket, "getaddrinfo", fake)


def test_every_resolved_address_is_checked(monkeypatch: pytest.MonkeyPatch,
                                           listener: RawServer) -> None:
    _resolving(monkeypatch, {"mixed.example": ["93.184.215.14", "127.0.0.1"]})
    with pytest.raises(ImageUnreachable, match=r"^could not fetch image URL"):
        fetch_image(f"http://mixed.example:{listener.port}/a.png", policy=GUARDED)
    assert listener.connections == 0


def test_the_connection_goes_to_the_checked_address_with_the_url_host(
        monkeypatch: pytest.MonkeyPatch, listener: RawServer) -> None:
    _resolving(monkeypatch, {"images.internal": ["127.0.0.1"]})
    policy = ImagePolicy(guard=FetchGuard.parse("images.internal"))
    image = fetch_image(f"http://images.internal:{listener.port}/a.png", policy=policy)
    assert image.width == 24
    assert f"Host: images.internal:{listener.port}".encode() in listener.requests[0]


def test_a_closed_port_and_a_port_that_is_not_http_read_the_same() -> None:
    garbage = RawServer(lambda conn, _: conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n"))
    closed = RawServer()
    closed_port = closed.port
    closed.stop()
    policy = ImagePolicy(guard=FetchGuard.parse("127.0.0.0/8"), timeout_s=3)
    messages = []
    try:
        for port in (garbage.port, closed_port):
            with pytest.raises(ImageUnreachable) as caught:
                fetch_image(f"http://127.0.0.1:{port}/a.png", policy=policy)
            messages.append(caught.value.message.replace(str(port), "PORT"))
    finally:
        garbage.stop()
    assert messages[0] == messages[1]


@pytest.mark.parametrize(("address", "allowed"), [
    ("8.8.8.8", True), ("2606:4700::1111", True),
    ("127.0.0.1", False), ("10.1.2.3", False), ("192.168.1.1", False), ("172.16.0.1", False),
    ("100.64.0.1", False), ("169.254.169.254", False), ("fd00:ec2::254", False),
    ("::1", False), ("fe80::1", False), ("224.0.0.1", False), ("0.0.0.0", False),
    ("::ffff:10.0.0.1", False), ("240.0.0.1", False),
])
def test_only_public_addresses_by_default(address: str, allowed: bool) -> None:
    assert FetchGuard().address_allowed(ipaddress.ip_address(address)) is allowed


def test_an_allow_list_opens_networks_and_names_but_not_the_metadata_address() -> None:
    guard = FetchGuard.parse(" 10.0.0.0/8, images.internal ,*.corp.example,169.254.0.0/16")
    assert guard.address_allowed(ipaddress.ip_address("10.9.8.7"))
    assert not guard.address_allowed(ipaddress.ip_address("192.168.0.1"))
    assert not guard.address_allowed(ipaddress.ip_address("169.254.169.254"))
    assert guard.address_allowed(ipaddress.ip_address("169.254.1.1"))
    assert guard.host_allowed("images.internal")
    assert guard.host_allowed("a.corp.example")
    assert not guard.host_allowed("corp.example.evil")
    assert FetchGuard.parse("169.254.169.254").address_allowed(
        ipaddress.ip_address("169.254.169.254"))


def test_a_bad_allow_list_entry_says_what_is_expected() -> None:
    with pytest.raises(ConfigError, match=r"DREADS_FETCH_ALLOW: 'http://x/' is neither"):
        FetchGuard.parse("10.0.0.0/8,http://x/")


def test_a_malformed_url_is_an_image_error_not_a_crash() -> None:
    with pytest.raises(ImageError, match=r"not a valid URL \(Invalid port"):
        fetch_image("http://[::1/a.png", policy=GUARDED)


def test_a_host_opened_by_name_still_cannot_reach_the_metadata_address() -> None:
    guard = FetchGuard.parse("*.corp.example")

    def infos(address: str) -> list[tuple[Any, ...]]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, 80))]

    assert guard.checked("imgs.corp.example", infos("10.1.1.1")) == "10.1.1.1"
    with pytest.raises(FetchRefused):
        guard.checked("imgs.corp.example", infos("169.254.169.254"))
    with pytest.raises(FetchRefused):
        FetchGuard().checked("imgs.corp.example", infos("10.1.1.1"))


@pytest.mark.parametrize("address", [
    "64:ff9b::a00:1",        # NAT64 (RFC 6052) of 10.0.0.1: the gateway connects to it
    "64:ff9b::a9fe:a9fe",    # NAT64 of the metadata address
    "64:ff9b:1::a00:1",      # local-use NAT64 (RFC 8215)
    "2002:7f00:1::",         # 6to4 of 127.0.0.1
    "::7f00:1",              # IPv4-compatible 127.0.0.1
])
def test_an_ipv6_address_that_carries_a_private_ipv4_one_is_refused(address: str) -> None:
    assert not FetchGuard().address_allowed(ipaddress.ip_address(address))


def test_nat64_of_a_public_address_is_public() -> None:
    assert FetchGuard().address_allowed(ipaddress.ip_address("64:ff9b::808:808"))


def test_a_relative_redirect_of_a_host_opened_by_name_is_followed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def reply(conn: socket.socket, head: bytes) -> None:
        if head.startswith(b"GET /a.png"):
            conn.sendall(http_response(b"", status="302 Found",
                                       headers=("Location: /b.png",)))
        else:
            conn.sendall(http_response(png(1)))

    server = RawServer(reply)
    try:
        _resolving(monkeypatch, {"images.internal": ["127.0.0.1"]})
        policy = ImagePolicy(guard=FetchGuard.parse("images.internal"), timeout_s=5)
        image = fetch_image(f"http://images.internal:{server.port}/a.png", policy=policy)
        assert image.width == 24
        assert all(f"Host: images.internal:{server.port}".encode() in r
                   for r in server.requests)
    finally:
        server.stop()


@pytest.mark.parametrize("address", ["64:ff9b::a9fe:a9fe", "::ffff:169.254.169.254"])
def test_a_host_opened_by_name_cannot_reach_the_metadata_address_through_ipv6(
        address: str) -> None:
    infos = [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, 80, 0, 0))]
    with pytest.raises(FetchRefused):
        FetchGuard.parse("*.corp.example").checked("imgs.corp.example", infos)
