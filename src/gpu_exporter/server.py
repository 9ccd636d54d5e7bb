"""The HTTP server: HTTP/1.1 (h11) on asyncio, serving the ASGI app with bounded resources.

Why not a stock ASGI server: the exporter must survive what a hostile network does, and that is
decided before a request reaches the app. Here every connection has a deadline for its TLS
handshake and request headers (``--web.read-header-timeout``) and for its next keep-alive request
(``--web.idle-timeout``); open connections are capped below the file limit, and at the cap the
longest-idle connection is closed so a fresh scrape is still answered; accept errors back off and
are logged in aggregate; TLS, client certificates and basic auth come from the web config, whose
files are re-read when they change, so a rotated certificate is used by the next connection.

Signals: SIGTERM, SIGINT and SIGQUIT stop gracefully (SIGQUIT first dumps every thread's stack);
SIGHUP calls the reload hook; SIGUSR1 dumps every thread's stack; SIGUSR2 is logged and ignored.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import errno
import faulthandler
import hashlib
import logging
import os
import resource
import signal
import socket
import ssl
import sys
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

import bcrypt
import h11

from gpu_exporter.config import Settings
from gpu_exporter.logs import flush_repeats
from gpu_exporter.webconfig import WebConfig, WebConfigSource

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_HEADER_BYTES = 16 * 1024
MAX_BODY_BYTES = 64 * 1024
WRITE_TIMEOUT = 30.0
SHUTDOWN_GRACE = 5.0
#: Accept errors (out of file descriptors, memory) are logged at most once per this many seconds.
ACCEPT_LOG_EVERY = 10.0
#: File descriptors kept free for everything but HTTP connections (GPU library, logs, threads).
FD_RESERVE = 64
PROBES = ("/healthz", "/readyz")
_ACCEPT_PAUSE = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


class BindError(OSError):
    """The listen address cannot be bound; the message names it and the OS error."""


def listen(settings: Settings) -> socket.socket:
    """A non-blocking listening socket on the configured address."""
    host = settings.host
    try:
        infos = socket.getaddrinfo(host, settings.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
    except OSError as err:
        raise BindError(f"cannot listen on {settings.listen_address}: {err.strerror or err}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6 and host == "::":
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)
        sock.listen(1024)
        sock.setblocking(False)
    except OSError as err:
        sock.close()
        raise BindError(f"cannot listen on {settings.listen_address}: {err.strerror or err}") from None
    return sock


def connection_cap(wanted: int) -> int:
    """``wanted`` capped well below the soft file limit (raised to the hard one first, as Go does)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = min(hard, 1 << 20) if hard != resource.RLIM_INFINITY else 1 << 20
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return max(8, min(wanted, soft - FD_RESERVE - soft // 8))


class Credentials:
    """Basic auth against bcrypt hashes; a verified (user, password, hash) is remembered so a scrape
    does not pay bcrypt's cost each time. Unknown users cost one bcrypt too (no timing oracle)."""

    def __init__(self) -> None:
        self._good: set[bytes] = set()
        self._busy = asyncio.Semaphore(2)
        self._dummies: dict[bytes, bytes] = {}  # cost → a hash of that cost, for unknown users

    def _dummy(self, users: Mapping[str, bytes]) -> bytes:
        """A hash as costly as the configured ones, so an unknown user takes as long as a known one."""
        cost = next(iter(users.values()), b"$2b$04$")[4:6]
        if cost not in self._dummies:
            self._dummies[cost] = bcrypt.hashpw(b"not a password", bcrypt.gensalt(int(cost)))
        return self._dummies[cost]

    async def check(self, users: Mapping[str, bytes], header: str) -> str | None:
        """The user name when ``header`` carries valid credentials, else None."""
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic" or len(encoded) > 1024:
            return None
        try:
            user, sep, password = base64.b64decode(encoded.strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        if not sep:
            return None
        hashed = users.get(user)
        key = hashlib.sha256(b"\0".join((user.encode(), password.encode(), hashed or b""))).digest()
        if hashed is not None and key in self._good:
            return user
        async with self._busy:  # bcrypt is CPU-bound by design: at most two at a time, off the loop
            reference = hashed if hashed is not None else await asyncio.to_thread(self._dummy, users)
            ok = await asyncio.to_thread(bcrypt.checkpw, password.encode(), reference)
        if not ok or hashed is None:
            return None
        if len(self._good) > 1024:
            self._good.clear()
        self._good.add(key)
        return user


class _Connection:
    def __init__(self, writer: asyncio.StreamWriter | None, now: float) -> None:
        self.writer = writer
        self.idle_since: float | None = now
        self.closed = False
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


class Server:
    """Serves ``app`` on ``sock`` until stopped by a signal; :meth:`run` returns the exit code."""

    def __init__(
        self,
        app: ASGIApp,
        settings: Settings,
        sock: socket.socket,
        web: WebConfigSource,
        reload: Callable[[], None] | None = None,
    ) -> None:
        self.app = app
        self.settings = settings
        self.sock = sock
        self.web = web
        self.reload_hook = reload
        self.connections: set[_Connection] = set()
        self.credentials = Credentials()
        self.stopping = asyncio.Event()
        self.slot_freed = asyncio.Event()
        self.cap = connection_cap(settings.max_connections)
        self.state: dict[str, Any] = {}
        self.signal_name = ""

    # -- lifecycle -----------------------------------------------------------------------------

    async def run(self) -> int:
        """Lifespan startup, serve until a stop signal, graceful shutdown; the process's exit code."""
        loop = asyncio.get_running_loop()
        for signum, handler in (
            (signal.SIGTERM, self._stop),
            (signal.SIGINT, self._stop),
            (signal.SIGQUIT, self._quit),
            (signal.SIGHUP, self._hangup),
            (signal.SIGUSR1, self._dump),
            (signal.SIGUSR2, self._ignore),
        ):
            loop.add_signal_handler(signum, handler, signum)  # before startup: a signal during it is handled
        lifespan = _Lifespan(self.app, self.state)
        failure = await lifespan.startup()
        if failure is not None:
            log.error("startup failed: %s", failure)
            return 1
        accepting = asyncio.create_task(self._accept_loop())
        housekeeping = asyncio.create_task(self._housekeeping())
        await self.stopping.wait()
        log.info("received %s: shutting down", self.signal_name)
        for task in (accepting, housekeeping):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.sock.close()
        for connection in list(self.connections):
            if connection.idle_since is not None:
                connection.close()
        deadline = loop.time() + SHUTDOWN_GRACE
        while self.connections and loop.time() < deadline:
            await asyncio.sleep(0.05)
        for connection in list(self.connections):
            connection.close()
        failure = await lifespan.shutdown()
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            loop.remove_signal_handler(signum)
        if failure is not None:
            log.error("shutdown failed: %s", failure)
            return 1
        log.info("Application shutdown complete; exiting with 0")
        return 0

    def _stop(self, signum: int) -> None:
        if self.stopping.is_set():
            log.warning("received %s again while stopping: exiting now", signal.Signals(signum).name)
            sys.stderr.flush()
            os._exit(1)
        self.signal_name = signal.Signals(signum).name
        self.stopping.set()

    def _quit(self, signum: int) -> None:
        self._dump(signum)
        self._stop(signum)

    def _dump(self, signum: int) -> None:
        log.info("received %s: stacks of every thread follow on standard error", signal.Signals(signum).name)
        faulthandler.dump_traceback(all_threads=True)

    def _ignore(self, signum: int) -> None:
        log.info("received %s: ignored (SIGHUP reloads, SIGTERM stops)", signal.Signals(signum).name)

    def _hangup(self, _signum: int) -> None:
        log.info("received SIGHUP: reloading the config and web config files")
        if self.reload_hook is not None:
            self.reload_hook()
        else:
            self.web.reload()

    async def _housekeeping(self) -> None:
        """Every second: notice changed web config files even without traffic, and report
        aggregated log lines whose window ended."""
        while True:
            await asyncio.sleep(1.0)
            self.web.current()
            flush_repeats()

    # -- accepting -----------------------------------------------------------------------------

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        pause = 0.01
        failures, reported = 0, -ACCEPT_LOG_EVERY
        wanted = self.settings.max_connections
        while True:
            if self.settings.max_connections != wanted:  # changed by a SIGHUP reload
                wanted = self.settings.max_connections
                self.cap = connection_cap(wanted)
            if len(self.connections) >= self.cap:
                if not self._evict():
                    self.slot_freed.clear()
                    await self.slot_freed.wait()
                await asyncio.sleep(0)  # let the evicted connection's socket close before accepting
                continue
            try:
                client, address = await loop.sock_accept(self.sock)
            except OSError as err:
                if err.errno in _ACCEPT_PAUSE:
                    failures += 1
                    if loop.time() - reported >= ACCEPT_LOG_EVERY:
                        log.warning("accepting connections failed %d time(s) in %gs (%s); pausing with backoff",
                                    failures, ACCEPT_LOG_EVERY, err.strerror)  # fmt: skip
                        failures, reported = 0, loop.time()
                    if self._evict():  # out of descriptors below the cap: idle connections go first here too
                        await asyncio.sleep(0)
                        continue
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, 1.0)
                    continue
                if err.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EINTR, errno.EAGAIN):
                    continue
                raise
            pause = 0.01
            client.setblocking(False)
            with contextlib.suppress(OSError):
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection = _Connection(None, loop.time())
            self.connections.add(connection)
            connection.task = asyncio.create_task(self._serve(connection, client, address))

    def _evict(self) -> bool:
        """At the cap: close the connection idle the longest (no request in progress). False when
        every connection is busy."""
        idle = [c for c in self.connections if c.idle_since is not None and not c.closed]
        if not idle:
            return False
        victim = min(idle, key=lambda c: c.idle_since or 0.0)
        log.warning("connection limit %d reached: closed the longest-idle connection", self.cap)
        victim.close()
        self.connections.discard(victim)
        return True

    # -- one connection ------------------------------------------------------------------------

    async def _serve(self, connection: _Connection, client: socket.socket, address: Any) -> None:
        loop = asyncio.get_running_loop()
        peer = _peer(address)
        try:
            config = self.web.current()
            deadline = loop.time() + self.settings.header_timeout
            async with asyncio.timeout_at(deadline):
                if config.tls is not None and not await _looks_like_tls(client, loop):
                    client.send(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 48\r\n\r\n"
                                b"Client sent an HTTP request to an HTTPS server.\n")  # fmt: skip
                    log.warning("plain HTTP request from %s on the TLS port refused", peer)
                    return
                reader = asyncio.StreamReader(limit=MAX_HEADER_BYTES * 2)
                protocol = asyncio.StreamReaderProtocol(reader)
                tls = {"ssl": config.tls, "ssl_handshake_timeout": self.settings.header_timeout} if config.tls else {}
                transport, _ = await loop.connect_accepted_socket(lambda: protocol, client, **tls)  # type: ignore[arg-type]
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            connection.writer = writer
            if connection.closed:
                return
            if config.allowed_sans and not _san_allowed(writer, config.allowed_sans):
                log.warning("client certificate from %s has no allowed SAN: connection closed", peer)
                return
            await self._requests(connection, reader, writer, config, peer, deadline)
        except TimeoutError:
            log.warning("connection from %s closed: no complete request in time", peer)
        except ssl.SSLError as err:
            log.warning("TLS handshake with %s failed: %s", peer, err.reason or err.strerror)
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        except Exception:  # one connection's bug must not end the server; logged with its traceback
            log.exception("connection from %s failed", peer)
        finally:
            if connection.writer is not None:
                connection.writer.transport.abort()
            else:
                client.close()
            self.connections.discard(connection)
            self.slot_freed.set()

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
                    status = err.error_status_hint if err.error_status_hint in (400, 413, 431) else 400
                    await self._simple(writer, http, status, b"bad request\n", config)
                return
            if request is None:
                return
            connection.idle_since = None
            config = self.web.current()
            await self._respond(http, writer, request, body, config, peer, scheme, server)
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
                if sum(len(name) + len(value) + 4 for name, value in event.headers) > MAX_HEADER_BYTES:
                    raise h11.RemoteProtocolError("request headers too large", error_status_hint=431)
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > MAX_BODY_BYTES:
                    raise h11.RemoteProtocolError("request body too large", error_status_hint=413)
            elif isinstance(event, h11.EndOfMessage):
                return request, bytes(body)
            elif isinstance(event, h11.ConnectionClosed | h11.PAUSED):
                return None, b""

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
        if config.users and not (self.settings.probes_without_auth and path in PROBES):
            authorization = next((v for n, v in headers if n == b"authorization"), b"").decode("latin-1")
            if await self.credentials.check(config.users, authorization) is None:
                if authorization:
                    log.warning("basic auth failed from %s", peer)
                await self._simple(writer, http, 401, b"unauthorized\n", config,
                                   [(b"www-authenticate", b'Basic realm="gpu-exporter"')])  # fmt: skip
                return
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
            data = b""
            if not sent["started"]:
                sent["started"] = True
                status = sent["status"]
                data += http.send(h11.Response(status_code=status, headers=sent["headers"], reason=_reason(status)))
            chunk = message.get("body", b"")
            if chunk and not head:
                data += http.send(h11.Data(data=chunk))
            if not message.get("more_body", False):
                sent["done"] = True
                data += http.send(h11.EndOfMessage())
            await _write(writer, data)

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
        if status != 401:
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


async def _looks_like_tls(client: socket.socket, loop: asyncio.AbstractEventLoop) -> bool:
    """Whether the first byte the client sent is a TLS handshake record (0x16); waits for it and
    raises ConnectionResetError when the client closes first."""
    while True:
        try:
            first = client.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            ready = loop.create_future()
            loop.add_reader(client.fileno(), ready.set_result, None)
            try:
                await ready
            finally:
                loop.remove_reader(client.fileno())
            continue
        if not first:
            raise ConnectionResetError
        return first == b"\x16"


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


class _Lifespan:
    """Runs the ASGI lifespan protocol: startup before serving, shutdown after."""

    def __init__(self, app: ASGIApp, state: dict[str, Any]) -> None:
        self.app = app
        self.state = state
        self.queue: asyncio.Queue[Message] = asyncio.Queue()
        self.replies: asyncio.Queue[Message] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None

    async def _main(self) -> None:
        scope: Scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": self.state}
        try:
            await self.app(scope, self.queue.get, self.replies.put)
        except Exception as err:  # noqa: BLE001 # reported as a startup/shutdown failure with its reason
            await self.replies.put({"type": "lifespan.failed", "message": f"{type(err).__name__}: {err}"})

    async def _exchange(self, kind: str) -> str | None:
        await self.queue.put({"type": f"lifespan.{kind}"})
        reply = await self.replies.get()
        if reply["type"] == f"lifespan.{kind}.complete":
            return None
        return str(reply.get("message") or reply["type"])

    async def startup(self) -> str | None:
        self.task = asyncio.create_task(self._main())
        return await self._exchange("startup")

    async def shutdown(self) -> str | None:
        if self.task is None or self.task.done():
            return None
        result = await self._exchange("shutdown")
        with contextlib.suppress(Exception):
            await self.task
        return result
