"""An accepted socket's transport, owned by the server from the moment it exists (TLS or not).

Why not ``loop.connect_accepted_socket(..., ssl=...)`` alone: it keeps the socket's own transport to
itself. When the task awaiting it is cancelled (a connection shed at the cap, the header deadline)
just after the TLS handshake completed, it starts a graceful TLS shutdown, which leaves the socket
registered with the event loop's selector while it waits for the peer's close_notify. Closing the
socket then frees its descriptor number while the selector still holds it, and the next accepted
connection that is given that number is never woken for reading (the selector believes it is
registered already): its TLS handshake stalls until the deadline (issue 40: one fresh scrape in a
few hundred timed out under a connection flood). Here the socket's transport is made first, not
reading, and handed to ``own`` before TLS starts on it; aborting that transport unregisters the
descriptor before the socket is closed, whatever state TLS was in.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable


class _NotReading(asyncio.Protocol):
    """The socket transport's protocol until TLS or the request reader takes over: reads nothing,
    so no byte of a ClientHello or a request is consumed before it."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()


async def open_accepted(
    loop: asyncio.AbstractEventLoop,
    sock: socket.socket,
    protocol: asyncio.Protocol,
    tls: ssl.SSLContext | None,
    handshake_timeout: float,
    own: Callable[[asyncio.Transport], None],
) -> asyncio.Transport:
    """The transport ``protocol`` reads ``sock`` through: TLS over the socket's transport when
    ``tls`` is given. ``own`` receives the socket's transport as soon as it exists; the caller
    aborts that one (never closes ``sock`` itself) if this raises or is cancelled afterwards."""
    raw, _ = await loop.connect_accepted_socket(_NotReading, sock)
    assert isinstance(raw, asyncio.Transport)
    own(raw)
    if tls is None:
        raw.set_protocol(protocol)
        protocol.connection_made(raw)
        raw.resume_reading()
        return raw
    transport = await loop.start_tls(raw, protocol, tls, server_side=True, ssl_handshake_timeout=handshake_timeout)
    if transport is None:  # typed optional; CPython's start_tls returns the TLS transport or raises
        raise ConnectionResetError("connection closed during the TLS handshake")
    protocol.connection_made(transport)
    return transport
