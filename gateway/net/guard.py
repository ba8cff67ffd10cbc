"""Which addresses the web tools may reach, and an
aiohttp resolver that enforces it at connect time.

A name is checked by what it resolves to, not by how it looks, and the connection goes to exactly
the addresses that were checked: aiohttp connects to what the resolver returns, so a DNS answer that
changes between the check and the connect (rebinding) has nothing to slip into. IP-literal hosts
never reach a resolver; `check_host` covers them.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.abc import AbstractResolver, ResolveResult

from gateway.errors import ToolError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# host, port → addresses (the system resolver by default)
Lookup = Callable[[str, int], Awaitable[list[str]]]
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# The old inet_aton spellings of an IPv4 address: 2130706433, 0x7f000001, 0177.0.0.1, 127.1, 0x7f.1
_LEGACY_IPV4 = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)(?:\.(?:0x[0-9a-f]*|[0-9]+)){0,3}", re.IGNORECASE)


class BlockedAddress(ToolError):
    """The URL leads to an address the web tools must
    not reach (private, loopback, link-local, …)."""


def refusal(ip: IPAddress) -> str | None:
    """Why `ip` may not be reached from a web tool, or None for a public address."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = (
            ip.ipv4_mapped
            or ip.sixtofour
            or (ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF) if ip in _NAT64 else None)
        )
        if embedded is not None:
            return refusal(embedded)
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local:
        # fec0::/10: deprecated, still routed inside some
        # networks; Python counts it as global
        return "a private address"
    if ip.is_unspecified or ip.is_multicast or ip.is_reserved:
        return "a reserved address"
    if ip.is_private or not ip.is_global:
        return "a private address"
    return None


def parse_ip(host: str) -> IPAddress | None:
    """An IP literal, including the decimal, octal and hex IPv4 forms resolvers accept
    (`http://2130706433/` is 127.0.0.1 to getaddrinfo), so they are judged by the address they stand
    for, whoever would parse them."""
    text = host.strip("[]").split("%", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    if not _LEGACY_IPV4.fullmatch(text.rstrip(".")):
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(text.rstrip(".")))
    except OSError:
        return None


def check_address(host: str, address: str, *, allow_private: bool) -> None:
    ip = parse_ip(address)
    if ip is None:
        raise BlockedAddress(f"{host} resolved to {address!r}, which is not an IP address.")
    why = None if allow_private else refusal(ip)
    if why is not None:
        shown = host if host == address else f"{host} ({address})"
        raise BlockedAddress(
            f"Refused to fetch {shown}: it is {why}. The web tools reach public addresses only "
            "(tools.web_fetch.allow_private lets the owner open private ones)."
        )


def check_host(host: str, *, allow_private: bool) -> None:
    """An IP-literal host is checked here (aiohttp does not
    resolve it); a name is checked when it resolves."""
    ip = parse_ip(host)
    if ip is not None:
        check_address(host, str(ip), allow_private=allow_private)
    elif not allow_private and _names_this_machine(host.lower().rstrip(".")):
        raise BlockedAddress(f"Refused to fetch {host}: it names this machine.")


def _names_this_machine(host: str) -> bool:
    return host in ("localhost", "localhost.localdomain") or host.endswith(".localhost")


async def system_lookup(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class GuardedResolver(AbstractResolver):
    """Resolve once, refuse the name if any of its addresses is refused, hand aiohttp only the
    checked addresses.

    `route` maps a checked address to the one dialled; it is the identity outside tests (a test
    network maps a public-looking address onto 127.0.0.x).
    """

    def __init__(
        self,
        *,
        allow_private: bool,
        lookup: Lookup = system_lookup,
        route: Callable[[str], str] | None = None,
    ) -> None:
        self.allow_private = allow_private
        self.lookup = lookup
        self.route = route
        self.lookups = 0

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.lookups += 1
        try:
            addresses = await self.lookup(host, port)
        except OSError as exc:
            raise BlockedAddress(f"Could not resolve {host}: {exc.strerror or exc}.") from None
        if not addresses:
            raise BlockedAddress(f"Could not resolve {host}: no addresses.")
        for address in addresses:
            check_address(host, address, allow_private=self.allow_private)
        return [self._result(host, a, port) for a in addresses]

    def _result(self, host: str, address: str, port: int) -> ResolveResult:
        dialled = self.route(address) if self.route is not None else address
        family = socket.AF_INET6 if ":" in dialled else socket.AF_INET
        result: Any = {
            "hostname": host,
            "host": dialled,
            "port": port,
            "family": family,
            "proto": 0,
            "flags": socket.AI_NUMERICHOST,
        }
        return result  # type: ignore[no-any-return]

    async def close(self) -> None:
        return None
