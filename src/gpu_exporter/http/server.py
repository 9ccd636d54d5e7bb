"""The HTTP server: HTTP/1.1 (h11) on asyncio, serving the ASGI app with bounded resources.

Why not a stock ASGI server: the exporter must survive what a hostile network does, and that is
decided before a request reaches the app. Here every connection has a deadline for its TLS
handshake and request headers (``--web.read-header-timeout``) and for its next keep-alive request
(``--web.idle-timeout``); open connections are capped below the file limit and shared fairly between
source addresses (:mod:`gpu_exporter.http.admission`), so a fresh scrape is still answered while
another address floods the port; accept errors back off and
are logged in aggregate; TLS, client certificates and basic auth come from the web config, whose
files are re-read when they change, so a rotated certificate is used by the next connection.

Signals: SIGTERM, SIGINT and SIGQUIT stop gracefully (SIGQUIT first dumps every thread's stack);
SIGHUP calls the reload hook; SIGUSR1 dumps every thread's stack; SIGUSR2 is logged and ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import faulthandler
import gc
import logging
import os
import resource
import signal
import socket
import ssl
import sys
import traceback
from asyncio import sslproto
from collections.abc import Callable
from typing import Any

from gpu_exporter.config import Settings
from gpu_exporter.http.accepted import open_accepted
from gpu_exporter.http.admission import Admission, Held, source
from gpu_exporter.http.auth import Credentials
from gpu_exporter.http.exchange import (
    MAX_HEADER_BYTES,
    ASGIApp,
    Exchange,
    _Connection,
    _looks_like_tls,
    _peer,
    _san_allowed,
)
from gpu_exporter.http.lifespan import Lifespan
from gpu_exporter.http.webconfig import WebConfigSource
from gpu_exporter.logs import LIMITED, flush_repeats

log = logging.getLogger(__name__)


SHUTDOWN_GRACE = 5.0
#: Accept errors (out of file descriptors, memory) are logged at most once per this many seconds.
ACCEPT_LOG_EVERY = 10.0
#: File descriptors kept free for everything but HTTP connections (GPU library, logs, threads).
FD_RESERVE = 64
#: Bytes a TLS connection reads at a time. asyncio allocates this buffer for every TLS connection as
#: it is accepted (256 KiB by default: 512 connections mid-handshake would hold 128 MiB); requests
#: here are at most 16 KiB of headers and 64 KiB of body, a TLS record at most 16 KiB.
TLS_READ_BUFFER = 32 * 1024
#: Connections accepted in a row before the other connections get a turn (asyncio's sock_accept does
#: not yield while the kernel has connections queued).
ACCEPT_BATCH = 64
#: The kernel's queue of connections not yet accepted (capped by net.core.somaxconn). Deep, so a burst
#: of reconnects is queued rather than dropped: a dropped SYN costs a fresh scrape a second or more.
BACKLOG = 4096
#: Seconds between two reloads by SIGHUP, or two stack dumps by SIGUSR1/SIGQUIT, however many come.
SIGNAL_EVERY = 1.0
#: Connections closed before the C heap's free memory is given back (see :func:`_trim`), at the next
#: housekeeping (every second with a web config file, else every few seconds).
TRIM_AFTER = 32
#: Seconds between looks for aggregated log lines to report, when no web config file is watched.
FLUSH_SECONDS = 5.0
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
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except OSError as err:
        sock.close()
        raise BindError(f"cannot listen on {settings.listen_address}: {err.strerror or err}") from None
    return sock


def bound_address(settings: Settings, sock: socket.socket) -> str:
    """The configured listen address with the port the kernel gave (the same unless it was 0)."""
    host = settings.listen_address.rpartition(":")[0]
    return f"{host}:{sock.getsockname()[1]}"


def connection_cap(wanted: int) -> int:
    """``wanted`` capped well below the soft file limit (raised to the hard one first, as Go does)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = min(hard, 1 << 20) if hard != resource.RLIM_INFINITY else 1 << 20
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return max(8, min(wanted, soft - FD_RESERVE - soft // 8))


class Server(Exchange):
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
        self.admission = Admission()
        self.refused: dict[str, int] = {}  # address → connections refused since the last report
        self.refused_reported = -ACCEPT_LOG_EVERY
        self.reloaded_at = self.dumped_at = -SIGNAL_EVERY
        self.hangups = 0  # SIGHUPs waiting to be taken together
        self.closed_since_trim = 0
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
        sslproto.SSLProtocol.max_size = TLS_READ_BUFFER  # see TLS_READ_BUFFER; only this server uses asyncio TLS
        lifespan = Lifespan(self.app, self.state)
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
        now = asyncio.get_running_loop().time()
        if now - self.dumped_at < SIGNAL_EVERY:  # a stack dump is long: a flood of signals must not repeat it
            log.info("received %s again within %gs: stacks not dumped again", signal.Signals(signum).name,
                     SIGNAL_EVERY, extra=LIMITED)  # fmt: skip
            return
        self.dumped_at = now
        log.info("received %s: stacks of every thread follow on standard error", signal.Signals(signum).name)
        faulthandler.dump_traceback(all_threads=True)

    def _ignore(self, signum: int) -> None:
        log.info("received %s: ignored (SIGHUP reloads, SIGTERM stops)", signal.Signals(signum).name, extra=LIMITED)

    def _hangup(self, _signum: int) -> None:
        """Reload now, or, within :data:`SIGNAL_EVERY` of the last reload, once that much time has
        passed: a flood of SIGHUPs costs a reload a second, not one each."""
        loop = asyncio.get_running_loop()
        wait = self.reloaded_at + SIGNAL_EVERY - loop.time()
        if wait > 0:
            self.hangups += 1
            if self.hangups == 1:
                loop.call_later(wait, self._reload)
            return
        self._reload()

    def _reload(self) -> None:
        more, self.hangups = self.hangups, 0
        self.reloaded_at = asyncio.get_running_loop().time()
        also = f" ({more} more SIGHUP(s) taken together)" if more > 1 else ""
        log.info("received SIGHUP: reloading the config and web config files%s", also, extra=LIMITED)
        if self.reload_hook is not None:
            self.reload_hook()
        else:
            self.web.reload()

    async def _housekeeping(self) -> None:
        """Notice changed web config files even without traffic (every second, with a config file), and
        report aggregated log lines whose minute-long window ended (every few seconds: a wake-up of an
        otherwise idle process costs CPU)."""
        while True:
            await asyncio.sleep(1.0 if self.web.path else FLUSH_SECONDS)
            self.web.current()
            flush_repeats()
            self._report_refused(asyncio.get_running_loop().time())
            if self.closed_since_trim >= TRIM_AFTER:
                self.closed_since_trim = 0
                _trim()

    # -- accepting -----------------------------------------------------------------------------

    async def _accept_loop(self) -> None:
        """Accept every connection the kernel has queued, a batch at a time, and decide its admission
        by its address (:mod:`gpu_exporter.http.admission`): the queue is never left to fill with one
        address's reconnects ahead of another's fresh scrape."""
        loop = asyncio.get_running_loop()
        pause = 0.01
        failures, reported = 0, -ACCEPT_LOG_EVERY
        wanted = self.settings.max_connections
        batch = 0
        while True:
            if self.settings.max_connections != wanted:  # changed by a SIGHUP reload
                wanted = self.settings.max_connections
                self.cap = connection_cap(wanted)
            batch += 1
            if batch >= ACCEPT_BATCH:  # sock_accept does not yield while connections are queued
                batch = 0
                await asyncio.sleep(0)
            try:
                client, address = await loop.sock_accept(self.sock)
            except OSError as err:
                if err.errno in _ACCEPT_PAUSE:
                    failures += 1
                    if loop.time() - reported >= ACCEPT_LOG_EVERY:
                        log.warning("accepting connections failed %d time(s) in %gs (%s); pausing with backoff",
                                    failures, ACCEPT_LOG_EVERY, err.strerror)  # fmt: skip
                        failures, reported = 0, loop.time()
                    victim = self.admission.biggest()  # out of descriptors below the cap: the biggest holder gives way
                    if victim is not None:
                        self._shed(victim, "out of file descriptors")
                        await asyncio.sleep(0)
                        continue
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, 1.0)
                    continue
                if err.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EINTR, errno.EAGAIN):
                    continue
                raise
            pause = 0.01
            now, peer = loop.time(), source(address)
            admitted, victim = self.admission.admit(peer, self.cap, now)
            if not admitted:  # cheap and counted: a reconnect flood comes here thousands of times a second
                client.close()
                self.refused[peer] = self.refused.get(peer, 0) + 1
                self._report_refused(now)
                continue
            client.setblocking(False)
            with contextlib.suppress(OSError):
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection = _Connection(None, now, peer)
            if victim is not None:
                why = "for a newer one of its own" if victim.source == connection.source else "the connection limit"
                self._shed(victim, why)
            self.connections.add(connection)
            self.admission.add(connection)
            connection.task = asyncio.create_task(self._serve(connection, client, address))

    def _report_refused(self, now: float) -> None:
        """One line for the connections refused (:meth:`Admission.admit`) since the last such line, at
        most every :data:`ACCEPT_LOG_EVERY` seconds."""
        if not self.refused or now - self.refused_reported < ACCEPT_LOG_EVERY:
            return
        worst = max(self.refused, key=self.refused.__getitem__)
        log.warning("refused %d new connection(s) from %d address(es) holding their share of %d connections, "
                    "none of them idle (most from %s: %d)", sum(self.refused.values()), len(self.refused),
                    self.cap, worst, self.refused[worst])  # fmt: skip
        self.refused, self.refused_reported = {}, now

    def _shed(self, victim: Held, why: str) -> None:
        """Close ``victim`` to make room (see :mod:`gpu_exporter.http.admission` for which one)."""
        assert isinstance(victim, _Connection)
        log.warning("closed a connection of %s, which holds %d of %d (%s)",
                    victim.source, self.admission.held(victim.source), self.cap, why)  # fmt: skip
        victim.close()
        self._discard(victim)

    def _discard(self, connection: _Connection) -> None:
        if connection in self.connections:
            self.closed_since_trim += 1
        self.connections.discard(connection)
        self.admission.discard(connection)

    # -- one connection ------------------------------------------------------------------------

    async def _serve(self, connection: _Connection, client: socket.socket, address: Any) -> None:
        loop = asyncio.get_running_loop()
        peer = _peer(address)
        owned: list[asyncio.Transport] = []  # the socket's own transport, once made: it closes the socket
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
                transport = await open_accepted(loop, client, protocol, config.tls, self.settings.header_timeout,
                                                owned.append)  # fmt: skip
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            connection.writer = writer
            if connection.closed:
                return
            if config.allowed_sans and not _san_allowed(writer, config.allowed_sans):
                log.warning("client certificate from %s has no allowed SAN: connection closed", peer)
                return
            await self._requests(connection, reader, writer, config, peer, deadline)
        except TimeoutError as err:
            log.warning("connection from %s closed: no complete request in time", peer)
            _forget(err)
        except ssl.SSLError as err:
            log.warning("TLS handshake with %s failed: %s", peer, err.reason or err.strerror)
            _forget(err)
        except (ConnectionError, OSError, asyncio.IncompleteReadError) as err:
            _forget(err)
        except Exception as err:  # one connection's bug must not end the server; logged with its traceback
            log.exception("connection from %s failed", peer)
            _forget(err)
        finally:
            if connection.writer is not None:
                connection.writer.transport.abort()
            if owned:  # never client.close() under a transport: see gpu_exporter.http.accepted
                owned[0].abort()
            else:
                client.close()
            self._discard(connection)


def _trim() -> None:
    """Give the C heap's free memory back to the operating system (glibc's malloc_trim): what closed
    connections held (TLS buffers above all, ~150 KiB each) is freed but stays in the process's heap,
    fragmented, until trimmed. Without glibc (musl), nothing to do."""
    global _LIBC
    gc.collect()  # closed connections' asyncio objects refer to each other: only a collection frees them
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL("libc.so.6")
            _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC:
        _LIBC.malloc_trim(0)


_LIBC: Any = None


def _forget(err: BaseException) -> None:
    """Drop what a connection's exception keeps alive. asyncio sets a failed TLS handshake's
    exception on a future that the exception's own traceback refers to (through the frame that
    awaited it): a reference cycle holding the connection's SSL protocol and its 256 KiB buffer
    until a full garbage collection, which a busy process rarely runs (300 aborted handshakes kept
    ~85 MB). Clearing the frames of the exception and of those it was raised from breaks the cycle."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        current.__traceback__ = None
        current = current.__cause__ or current.__context__
