"""One HTTP/1.1 exchange on a connection: reading a request within the limits (header size and
deadline, body size), basic auth, handing it to the ASGI app, and writing the answer. The server
(:mod:`gpu_exporter.http.server`) owns the sockets and the lifecycle and mixes this in."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

import h11

from gpu_exporter.config import Settings
from gpu_exporter.http.auth import BUSY_DELAY, Credentials, Verdict
from gpu_exporter.http.webconfig import WebConfig, WebConfigSource

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_HEADER_BYTES = 16 * 1024
MAX_BODY_BYTES = 64 * 1024
WRITE_TIMEOUT = 30.0  # seconds for a whole response
WRITE_SLICE = 64 * 1024
#: The slice on a TLS connection: asyncio encrypts a whole slice into the transport's buffer at once
#: (a copy), beside the connection's 32 KiB read buffer; with 16 KiB (a TLS record) a client that
#: does not read holds about 64 KiB in all, as for plain HTTP.
TLS_WRITE_SLICE = 16 * 1024
PROBES = ("/healthz", "/readyz", "/health")  # /health: dcgm-exporter's, which NVIDIA's chart probes


class _Connection:
    def __init__(self, writer: asyncio.StreamWriter | None, now: float, source: str = "?") -> None:
        self.writer = writer
        self.source = source  # the address it is counted against (gpu_exporter.http.admission)
        self.accepted = now
        self.idle_since: float | None = now
        self.closed = False
        self.served = False  # answered a request already: at the cap, such idle connections go first
        self.refused = False  # its last request failed basic auth: at the cap it goes first, even busy
        self.task: asyncio.Task[None] | None = None

    def close(self) -> None:
        """Drop the connection now (also one still in its TLS handshake: its task is cancelled)."""
        self.closed = True
        if self.writer is not None:
            self.writer.transport.abort()
        if self.task is not None:
            self.task.cancel()


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


class Exchange:
    """Request handling, mixed into :class:`~gpu_exporter.http.server.Server` (which sets the attributes)."""

    settings: Settings
    credentials: Credentials
    state: dict[str, Any]
    app: ASGIApp
    web: WebConfigSource

    async def _requests(
        self,
        connection: _Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        config: WebConfig,
        peer: str,
        deadline: float,
    ) -> None:
        loop = asyncio.get_running_loop()
        http = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        scheme = "https" if config.tls is not None else "http"
        server = writer.get_extra_info("sockname")
        first = True
        while not connection.closed:
            try:
                request, body = await self._read_request(http, reader, deadline, loop, first)
            except h11.RemoteProtocolError as err:
                log.warning("bad HTTP request from %s: %s", peer, str(err)[:80])
                if http.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    status = err.error_status_hint if err.error_status_hint in (400, 413, 431, 505) else 400
                    await self._simple(writer, http, status, b"bad request\n", config)
                return
            if request is None:
                return
            connection.idle_since = None
            config = self.web.current()
            if await self._authorized(connection, http, writer, request, config, peer):
                await self._respond(http, writer, request, body, config, peer, scheme, server)
            connection.served = True
            if http.our_state is h11.MUST_CLOSE or http.their_state is h11.MUST_CLOSE:
                return
            try:
                http.start_next_cycle()
            except h11.LocalProtocolError:
                return
            now = loop.time()
            connection.idle_since = now
            deadline = now + self.settings.idle_timeout
            first = False

    async def _read_request(
        self,
        http: h11.Connection,
        reader: asyncio.StreamReader,
        deadline: float,
        loop: asyncio.AbstractEventLoop,
        first: bool,
    ) -> tuple[h11.Request | None, bytes]:
        """The next request and its (bounded) body; None when the client closed. Headers must be
        complete by ``deadline``; once data arrives after an idle wait, within the header timeout."""
        request: h11.Request | None = None
        body = bytearray()
        started = False
        head = 0
        while True:
            event = http.next_event()
            if event is h11.NEED_DATA:
                try:
                    async with asyncio.timeout_at(deadline):
                        data = await reader.read(65536)
                except TimeoutError:
                    if not first and not started:
                        return None, b""  # a keep-alive connection idle past --web.idle-timeout: normal
                    raise
                if not data:  # the client hung up: nothing to answer, nothing worth a log line
                    return None, b""
                if request is None:
                    head += len(data)
                    if head > MAX_HEADER_BYTES + 65536:  # h11 bounds incomplete heads; this bounds whole ones
                        raise h11.RemoteProtocolError("request head too large", error_status_hint=431)
                if not started and data:
                    started = True
                    deadline = min(deadline, loop.time() + self.settings.header_timeout)
                http.receive_data(data)
                continue
            if isinstance(event, h11.Request):
                request = event
                if event.http_version not in (b"1.0", b"1.1"):
                    raise h11.RemoteProtocolError("HTTP version not supported", error_status_hint=505)
                names = {name.lower() for name, _ in event.headers}
                if b"transfer-encoding" in names and b"content-length" in names:  # RFC 9112 6.3: a smuggling shape
                    raise h11.RemoteProtocolError("both Content-Length and Transfer-Encoding", error_status_hint=400)
                # The whole head, request line included, however its bytes arrived (h11 bounds only a head
                # still incomplete after a read, so one that comes whole in one read is measured here).
                line = len(event.method) + len(event.target) + len(event.http_version) + 8
                if line + sum(len(name) + len(value) + 4 for name, value in event.headers) > MAX_HEADER_BYTES:
                    raise h11.RemoteProtocolError("request head too large", error_status_hint=431)
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > MAX_BODY_BYTES:
                    raise h11.RemoteProtocolError("request body too large", error_status_hint=413)
            elif isinstance(event, h11.EndOfMessage):
                return request, bytes(body)
            elif isinstance(event, h11.ConnectionClosed | h11.PAUSED):
                return None, b""

    async def _authorized(
        self,
        connection: _Connection,
        http: h11.Connection,
        writer: asyncio.StreamWriter,
        request: h11.Request,
        config: WebConfig,
        peer: str,
    ) -> bool:
        """Basic auth when the web config has users; False once a 401 or 503 has been sent. While a
        bcrypt check waits or runs the connection counts as idle, so the connection cap can close it."""
        path = request.target.partition(b"?")[0].decode("latin-1")
        if not config.users or (self.settings.probes_without_auth and path in PROBES):
            return True
        authorization = next((v for n, v in request.headers if n.lower() == b"authorization"), b"").decode("latin-1")
        connection.idle_since = asyncio.get_running_loop().time()
        try:
            verdict, _ = await self.credentials.check(config.users, authorization, peer.rpartition(":")[0])
        finally:
            connection.idle_since = None
        connection.refused = verdict is not Verdict.OK
        if verdict is Verdict.OK:
            return True
        if verdict is Verdict.BUSY:
            log.warning("basic auth busy for %s: it has a check waiting already, or too many wait; answered 503", peer)
            connection.idle_since = asyncio.get_running_loop().time()  # idle meanwhile: it may be closed for room
            await asyncio.sleep(BUSY_DELAY)
            connection.idle_since = None
            await self._simple(writer, http, 503, b"authentication busy, try again\n", config,
                               [(b"retry-after", b"1")])  # fmt: skip
            return False
        if authorization:
            log.warning("basic auth failed from %s", peer)
        await self._simple(writer, http, 401, b"unauthorized\n", config,
                           [(b"www-authenticate", b'Basic realm="gpu-exporter"')])  # fmt: skip
        return False

    async def _respond(
        self,
        http: h11.Connection,
        writer: asyncio.StreamWriter,
        request: h11.Request,
        body: bytes,
        config: WebConfig,
        peer: str,
        scheme: str,
        server: Any,
    ) -> None:
        target = request.target
        path_bytes, _, query = target.partition(b"?")
        path = path_bytes.decode("latin-1")
        headers = [(name.lower(), value) for name, value in request.headers]
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": request.http_version.decode(),
            "method": request.method.decode("ascii"),
            "scheme": scheme,
            "path": _unquote(path),
            "raw_path": path_bytes,
            "query_string": query,
            "root_path": "",
            "headers": headers,
            "client": _address(writer.get_extra_info("peername")),
            "server": _address(server),
            "state": dict(self.state),
        }
        head = request.method == b"HEAD"
        deadline = asyncio.get_running_loop().time() + WRITE_TIMEOUT
        sent: dict[str, Any] = {"started": False, "done": False, "body_given": False}
        closed = asyncio.Event()

        async def receive() -> Message:
            if not sent["body_given"]:
                sent["body_given"] = True
                return {"type": "http.request", "body": body, "more_body": False}
            await closed.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                sent["status"] = message["status"]
                sent["headers"] = [*message.get("headers", []), *config.headers]
                return
            if message["type"] != "http.response.body" or sent["done"]:
                return
            parts: list[Any] = []  # the body as given (the snapshot's shared bytes), never joined into a copy
            if not sent["started"]:
                sent["started"] = True
                status = sent["status"]
                response = h11.Response(status_code=status, headers=sent["headers"], reason=_reason(status))
                parts += http.send_with_data_passthrough(response) or []
            chunk = message.get("body", b"")
            if chunk and not head:
                parts += http.send_with_data_passthrough(h11.Data(data=chunk)) or []
            if not message.get("more_body", False):
                sent["done"] = True
                parts += http.send_with_data_passthrough(h11.EndOfMessage()) or []
            await _write_shared(writer, parts, deadline)

        try:
            await self.app(scope, receive, send)
        except (ConnectionError, TimeoutError, h11.LocalProtocolError):
            raise ConnectionResetError from None
        except Exception:  # a failing handler must answer 500, not end the server (logged with its traceback)
            log.exception("request %s %s failed", request.method.decode(), path[:80])
            if not sent["started"]:
                await self._simple(writer, http, 500, b"internal error\n", config)
            else:
                http.send_failed()
            return
        finally:
            closed.set()
        if not sent["done"]:
            http.send_failed()

    async def _simple(
        self,
        writer: asyncio.StreamWriter,
        http: h11.Connection,
        status: int,
        text: bytes,
        config: WebConfig,
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(text)).encode()),
                   *(extra or []), *config.headers]  # fmt: skip
        if status not in (401, 503):  # a wrong password or a busy auth: the connection stays usable
            headers.append((b"connection", b"close"))
        try:
            data = http.send(h11.Response(status_code=status, headers=headers, reason=_reason(status)))
            data += http.send(h11.Data(data=text)) + http.send(h11.EndOfMessage())
        except h11.LocalProtocolError:
            return
        await _write(writer, data)


async def _write(writer: asyncio.StreamWriter, data: bytes | None) -> None:
    if data:
        writer.write(data)
        await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT)


async def _write_shared(writer: asyncio.StreamWriter, parts: list[Any], deadline: float) -> None:
    """Write ``parts`` a :data:`WRITE_SLICE` at a time, each slice once the last has drained, all by
    ``deadline``: a client that does not read holds at most a slice and the transport's buffer,
    never its own copy of the response (the body is the snapshot's bytes, shared by every client).
    Parts that fit in one slice together go out as one write (one TLS record, one send): a small
    response costs one copy of at most a slice instead of a write and a drain per part."""
    size = TLS_WRITE_SLICE if writer.get_extra_info("ssl_object") is not None else WRITE_SLICE
    if 0 < sum(len(part) for part in parts) <= size:
        parts = [b"".join(parts)]
    transport = writer.transport
    for part in parts:
        view = memoryview(part)
        for start in range(0, len(view), size):
            writer.write(view[start : start + size])
            # Where the kernel took the whole slice (a client that reads), there is nothing to wait for:
            # the drain and its timeout were a third of a large scrape's time on loopback.
            if transport.get_write_buffer_size() or transport.is_closing():
                async with asyncio.timeout_at(deadline):
                    await writer.drain()


async def _looks_like_tls(client: socket.socket, loop: asyncio.AbstractEventLoop) -> bool:
    """Whether the first byte the client sent is a TLS handshake record (0x16); waits for it and
    raises ConnectionResetError when the client closes first."""
    while True:
        try:
            first = client.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_reader(client.fileno(), _wake, ready)
            try:
                await ready
            finally:
                loop.remove_reader(client.fileno())
            continue
        if not first:
            raise ConnectionResetError
        return first == b"\x16"


def _wake(ready: asyncio.Future[None]) -> None:
    """A reader callback: the selector may report the socket again before the waiting task has run
    and removed it, and a second result would be an error logged by the event loop."""
    if not ready.done():
        ready.set_result(None)


def _san_allowed(writer: asyncio.StreamWriter, allowed: frozenset[str]) -> bool:
    ssl_object = writer.get_extra_info("ssl_object")
    certificate = ssl_object.getpeercert() if ssl_object is not None else None
    names = {value for _, value in (certificate or {}).get("subjectAltName", ())}
    return bool(names & allowed)


def _unquote(path: str) -> str:
    return unquote(path)


def _address(value: Any) -> tuple[str, int] | None:
    if isinstance(value, tuple) and len(value) >= 2:
        return str(value[0]), int(value[1])
    return None


def _peer(address: Any) -> str:
    parts = _address(address)
    return f"{parts[0]}:{parts[1]}" if parts else "?"
