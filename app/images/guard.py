"""Which addresses a server may fetch an image from for a client (``DREADS_FETCH_ALLOW``).

``dreads serve`` fetches the image URLs a client sends. Unless the operator allows them, it
fetches none from a loopback, private, link-local (cloud metadata), multicast, reserved or
unspecified address: the host is resolved, **every** address it resolves to is checked, and
the connection goes to the checked address itself (the URL's host kept for ``Host`` and TLS),
so a second DNS answer between the check and the connection cannot point elsewhere. A redirect
is a new request through the same check.

``FetchGuard.parse("10.0.0.0/8,images.internal")``: networks (CIDR or one address) and host
names (``images.internal``; ``*.internal`` for its subdomains) the operator opens.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from app.errors import ConfigError

__all__ = ["AsyncGuardedTransport", "FetchGuard", "FetchRefused"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Cloud metadata addresses, refused even where a network holding them is allowed.
METADATA = (ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254"))


class FetchRefused(httpx.ConnectError):
    """The guard refused the address (reported as a connection that failed, by design: the
    client is told nothing it could tell from a closed port)."""


#: IPv6 prefixes whose last 32 bits are an IPv4 address a gateway or the stack connects to:
#: NAT64's well-known prefix (RFC 6052) and IPv4-compatible addresses (``::a.b.c.d``).
_EMBEDS_LAST_32 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("::/96"))
#: NAT64 prefixes of local use (RFC 8215): never a public address, whatever they carry.
_LOCAL_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one reaches through (IPv4-mapped, NAT64, 6to4, IPv4-compatible;
    None: it carries none)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if any(address in net for net in _EMBEDS_LAST_32) and int(address) > 1:  # not :: or ::1
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _metadata(address: IPAddress) -> bool:
    """A cloud metadata address, or an IPv6 one that carries it (NAT64, IPv4-mapped)."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            return embedded in METADATA
    return address in METADATA


def _public(address: IPAddress) -> bool:
    """A globally reachable unicast address (not loopback, private, link-local, shared,
    multicast, reserved, documentation or unspecified; an IPv6 address that carries an IPv4
    one, as NAT64, 6to4 or IPv4-mapped, as that IPv4 address)."""
    if isinstance(address, ipaddress.IPv6Address):
        if address in _LOCAL_NAT64:
            return False
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            return _public(embedded)
    return address.is_global and not address.is_multicast


@dataclass(frozen=True)
class FetchGuard:
    """Public addresses, plus the networks and host names the operator opened."""

    networks: tuple[IPNetwork, ...] = ()
    hosts: tuple[str, ...] = ()  #: lower case; "*.example" also opens its subdomains

    @classmethod
    def parse(cls, text: str | None) -> FetchGuard:
        """``DREADS_FETCH_ALLOW``: networks and host names separated by commas.

        Raises:
            ConfigError: an entry that is neither a network nor a host name.
        """
        networks: list[IPNetwork] = []
        hosts: list[str] = []
        for raw in (text or "").split(","):
            entry = raw.strip().lower()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
                continue
            except ValueError:
                pass
            name = entry.removeprefix("*.")
            if not name or not all(part.replace("-", "").isalnum()
                                   for part in name.split(".")):
                raise ConfigError(f"DREADS_FETCH_ALLOW: {raw.strip()!r} is neither a network "
                                  "(10.0.0.0/8, 192.168.1.7) nor a host name "
                                  "(images.internal, *.internal)")
            hosts.append(entry)
        return cls(tuple(networks), tuple(hosts))

    def host_allowed(self, host: str) -> bool:
        """Whether the operator opened ``host`` by name (its addresses are then not checked,
        but for the metadata ones)."""
        host = host.lower().rstrip(".")
        return any(host == entry or (entry.startswith("*.") and host.endswith(entry[1:]))
                   for entry in self.hosts)

    def address_allowed(self, address: IPAddress) -> bool:
        if _metadata(address):
            return any(address in net and net.prefixlen == net.max_prefixlen
                       for net in self.networks)
        return _public(address) or any(address in net for net in self.networks)

    def checked(self, host: str, infos: Sequence[tuple[Any, ...]]) -> str:
        """The address to connect to: the first of ``infos`` (``getaddrinfo``'s answer for
        ``host``), once every one of them is allowed.

        Raises:
            FetchRefused: an address is not allowed, or there is none.
        """
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
        if not addresses:
            raise FetchRefused(f"no address for {host}")
        named = self.host_allowed(host)  # any address but the metadata ones
        if not all(self.address_allowed(a) or (named and not _metadata(a))
                   for a in addresses):
            raise FetchRefused(f"{host} resolves to an address this server does not fetch")
        return str(addresses[0])


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _pinned(request: httpx.Request, address: str) -> httpx.Request:
    """A copy of ``request`` sent to ``address``: its Host header and TLS name stay the URL's
    host. ``request`` itself is left as it was: the client resolves a relative redirect
    against its URL, which must still name the host (checked by name again), not the
    address."""
    host = request.url.host
    extensions = dict(request.extensions)
    if request.url.scheme == "https":
        extensions["sni_hostname"] = host
    return httpx.Request(request.method, request.url.copy_with(host=address),
                         headers=request.headers, stream=request.stream,
                         extensions=extensions)


def _port(request: httpx.Request) -> int:
    return request.url.port or (443 if request.url.scheme == "https" else 80)


class AsyncGuardedTransport(httpx.AsyncBaseTransport):
    """An ``httpx.AsyncHTTPTransport`` that connects only to addresses ``guard`` allows (the
    host resolved by the loop's resolver)."""

    def __init__(self, guard: FetchGuard) -> None:
        self.guard = guard
        self.inner = httpx.AsyncHTTPTransport(trust_env=False)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        literal = _literal(host)
        if literal is not None:
            if not self.guard.address_allowed(literal):
                raise FetchRefused(f"{host} is an address this server does not fetch")
            return await self.inner.handle_async_request(request)
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, _port(request), type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            raise FetchRefused(f"cannot resolve {host}") from exc
        pinned = _pinned(request, self.guard.checked(host, infos))
        return await self.inner.handle_async_request(pinned)

    async def aclose(self) -> None:
        await self.inner.aclose()
