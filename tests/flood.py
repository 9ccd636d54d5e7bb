"""Connection floods from chosen loopback source addresses (127.0.0.x models distinct peers), and a
fresh honest scrape from another address: shared by the fairness tests and bench.hostile.

A :class:`Flood` keeps ``count`` connections open from one address in a background thread (one
selector, non-blocking sockets), reopening each as soon as the exporter closes it: silent (sending
``hello`` once, nothing more: a request or a TLS handshake that never completes) or looping
(sending ``request`` again as each answer arrives, as a keep-alive client hammering ``/healthz``).
"""

from __future__ import annotations

import contextlib
import resource
import selectors
import socket
import ssl
import threading
import time

import httpx

HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


def raise_file_limit() -> None:
    """This process's soft file limit up to the hard one: a flood holds thousands of sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Flood(threading.Thread):
    """``count`` connections from ``source`` to 127.0.0.1:``port``, reopened when closed."""

    def __init__(self, port: int, count: int, source: str = "127.0.0.1", hello: bytes = b"",
                 loop: bool = False) -> None:  # fmt: skip
        super().__init__(daemon=True)
        self.port = port
        self.count = count
        self.source = source
        self.hello = hello
        self.loop = loop
        self.opened = 0  # connections the exporter accepted or queued (connect completed)
        self.closed = 0  # connections the exporter closed
        self.answers = 0  # responses read (looping floods)
        self.done = threading.Event()

    def __enter__(self) -> Flood:
        raise_file_limit()
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        self.join(30)

    def wait_for(self, what: str, at_least: int, seconds: float = 60.0) -> None:
        """Until the counter ``what`` (opened, closed, answers) reaches ``at_least``; fails otherwise."""
        deadline = time.monotonic() + seconds
        while getattr(self, what) < at_least:
            if time.monotonic() > deadline:
                raise AssertionError(f"flood from {self.source}: {what} {getattr(self, what)} < {at_least} "
                                     f"in {seconds:g} s")  # fmt: skip
            time.sleep(0.05)

    def _open(self, selector: selectors.BaseSelector) -> None:
        sock = socket.socket()
        sock.setblocking(False)
        try:
            sock.bind((self.source, 0))
            sock.connect_ex(("127.0.0.1", self.port))
        except OSError:
            sock.close()
            return
        selector.register(sock, selectors.EVENT_WRITE, "connecting")

    def run(self) -> None:
        selector = selectors.DefaultSelector()
        for _ in range(self.count):
            self._open(selector)
        while not self.done.is_set():
            for key, _ in selector.select(0.1):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if key.data == "connecting":
                    if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                        self.opened += 1
                        with contextlib.suppress(OSError):
                            sock.send(self.hello)
                        selector.modify(sock, selectors.EVENT_READ, "open")
                        continue
                    data = b""
                else:
                    try:
                        data = sock.recv(65536)
                    except OSError:
                        data = b""
                if data:
                    answers = data.count(b"HTTP/1.1 ")
                    self.answers += answers
                    if self.loop and answers:
                        with contextlib.suppress(OSError):
                            sock.send(self.hello * answers)
                    continue
                self.closed += 1
                selector.unregister(sock)
                sock.close()
                self._open(selector)
        for key in list(selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        selector.close()


def fresh_scrape(url: str, source: str, verify: ssl.SSLContext | bool = False, timeout: float = 10.0,
                 **kwargs: object) -> httpx.Response:  # fmt: skip
    """One request on a new connection from ``source`` (a loopback address other than the flood's)."""
    transport = httpx.HTTPTransport(local_address=source, verify=verify, retries=0)
    with httpx.Client(transport=transport, timeout=timeout) as client:
        return client.get(url, **kwargs)  # type: ignore[arg-type]
