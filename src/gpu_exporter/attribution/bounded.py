"""Reading an API server's answer within a byte bound that holds before anything is buffered: the
body is read raw (as sent), decompressed here at most :data:`PIECE` bytes at a time (so a small
gzip body that expands to gigabytes costs at most the bound), and either counted against a whole
answer's bound (:func:`body`) or split into lines, each bounded as it grows (:func:`lines`)."""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from typing import Any

from gpu_exporter.attribution.refresh import Failure

PIECE = 64 * 1024


def decoded(response: Any) -> Iterator[bytes]:
    """The body of an ``httpx2`` streamed ``response``, decoded as its ``Content-Encoding`` says
    (none, ``gzip`` or ``deflate``), in pieces of at most :data:`PIECE` bytes."""
    encoding = str(response.headers.get("content-encoding", "")).strip().lower()
    if encoding in ("", "identity"):
        for raw in response.iter_raw():
            yield from _split(raw)
        return
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise Failure("malformed", f"Content-Encoding {encoding[:40]!r} is not gzip or deflate")
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib header, detected
    try:
        for raw in response.iter_raw():
            data = raw
            while data:
                piece = inflater.decompress(data, PIECE)
                data = inflater.unconsumed_tail
                if piece:
                    yield piece
                if inflater.eof:
                    return
    except zlib.error as exc:
        raise Failure("malformed", f"the {encoding} body does not decompress: {exc}") from None


def _split(raw: bytes) -> Iterator[bytes]:
    for start in range(0, len(raw), PIECE):
        yield raw[start : start + PIECE]


def body(pieces: Iterable[bytes], limit: int, what: str) -> bytes:
    """The whole body, refused (``too_large``) as soon as it passes ``limit`` bytes, decompressed."""
    out = bytearray()
    for piece in pieces:
        out += piece
        if len(out) > limit:
            raise Failure("too_large", f"{what} is over {limit} bytes (decompressed)")
    return bytes(out)


def lines(pieces: Iterable[bytes], limit: int, what: str) -> Iterator[bytes]:
    """Each line of the body, without its newline; a line refused (``too_large``) as soon as it
    passes ``limit`` bytes, before its end arrives."""
    buffer = bytearray()
    searched = 0
    for piece in pieces:
        buffer += piece
        start = 0
        while (end := buffer.find(b"\n", max(start, searched))) >= 0:
            yield bytes(buffer[start:end])
            start = end + 1
        del buffer[:start]
        searched = len(buffer)  # the rest holds no newline: the next search starts after it
        if len(buffer) > limit:
            raise Failure("too_large", f"{what} of more than {limit} bytes")
    if buffer.strip():
        yield bytes(buffer)
