"""Which connections stay open when peers compete for the connection cap.

Connections are counted per source address (an IPv6 address by its /64, which one host is usually
given whole). One address holds at most :func:`share` of the cap: a new connection from an address
holding its share replaces the oldest of that address's own that is idle, or else is closed at once. At the
cap, the address holding the most connections gives way, so an address holding fewer than the
biggest holder, a new one above all, is always admitted. Of the connections of the address that
gives way, the first to go is one whose last request failed basic auth, then the one idle the
longest (answered already before one that has not sent a request yet, such as a TLS handshake in
progress), then the oldest busy one.
"""

from __future__ import annotations

import ipaddress
from typing import Protocol

#: One address holds at most this fraction of the cap (1/4: 128 of the default 512) ...
SHARE_DIVISOR = 4
#: ... and at least this many connections, whatever the cap.
MIN_SHARE = 4
#: Seconds a new connection has to send its request before a newer one of its address may replace it.
FRESH_GRACE = 0.5


class Held(Protocol):
    """What admission reads of a connection (:class:`gpu_exporter.http.exchange._Connection`)."""

    source: str
    accepted: float
    idle_since: float | None
    served: bool
    refused: bool


def source(address: object) -> str:
    """The address a connection is counted against: the IPv4 address (also one mapped into IPv6),
    or the /64 of an IPv6 address; ``"?"`` when the socket gave none."""
    if not isinstance(address, tuple) or not address or not isinstance(address[0], str):
        return "?"
    host = address[0]
    if ":" not in host:
        return host
    try:
        parsed = ipaddress.IPv6Address(host.partition("%")[0])
    except ValueError:
        return host
    if parsed.ipv4_mapped is not None:
        return str(parsed.ipv4_mapped)
    return str(ipaddress.IPv6Network((int(parsed) >> 64 << 64, 64)))


def share(cap: int) -> int:
    """The most connections one address may hold under ``cap``."""
    return min(cap, max(MIN_SHARE, cap // SHARE_DIVISOR))


def _weakest(held: dict[Held, None]) -> Held:
    """The connection of one address to close first (see the module's docstring)."""
    return min(held, key=lambda c: (not c.refused, c.idle_since is None, not c.served,
                                    c.idle_since if c.idle_since is not None else c.accepted))  # fmt: skip


class Admission:
    """The open connections by source address."""

    def __init__(self) -> None:
        self.by_source: dict[str, dict[Held, None]] = {}
        self.count = 0

    def add(self, connection: Held) -> None:
        self.by_source.setdefault(connection.source, {})[connection] = None
        self.count += 1

    def discard(self, connection: Held) -> None:
        held = self.by_source.get(connection.source)
        if held is None or connection not in held:
            return
        del held[connection]
        self.count -= 1
        if not held:
            del self.by_source[connection.source]

    def held(self, address: str) -> int:
        return len(self.by_source.get(address, ()))

    def admit(self, address: str, cap: int, now: float) -> tuple[bool, Held | None]:
        """Whether one more connection from ``address`` is admitted under ``cap`` at ``now``, and the
        connection to close first to make room (None: there is room, or it is not admitted). An
        address that holds its share, or holds the most at the cap, makes room from its own, but only
        by a connection that is idle (see :func:`_yields`): otherwise the new one is refused. A
        smaller holder is admitted at the cap by closing one of the biggest holder's."""
        own = self.by_source.get(address)
        if own and len(own) >= share(cap):
            return _own(own, now)
        if self.count < cap:
            return True, None
        top = max(self.by_source.values(), key=len)
        if own and len(own) >= len(top):
            return _own(own, now)
        return True, _weakest(top)

    def biggest(self) -> Held | None:
        """The connection to close when one must go, whoever asks (out of file descriptors): of the
        address holding the most; None when there are none."""
        if not self.by_source:
            return None
        return _weakest(max(self.by_source.values(), key=len))


def _yields(connection: Held, now: float) -> bool:
    """Whether ``connection`` gives way to a newer one of its own address: its last request failed
    basic auth, or it is idle (answered already, or accepted :data:`FRESH_GRACE` ago and still
    without a complete request: a slow or silent client, a TLS handshake not finished)."""
    if connection.refused:
        return True
    return connection.idle_since is not None and (connection.served or connection.accepted <= now - FRESH_GRACE)


def _own(held: dict[Held, None], now: float) -> tuple[bool, Held | None]:
    """Room for one more of an address from its own: the oldest connection that yields (scanned
    in the order accepted, so a silent flood costs one look per new connection); or refused."""
    for connection in held:
        if _yields(connection, now):
            return True, connection
    return False, None
