"""The encoded-bytes cache of one snapshot: each encoding a scrape may ask for is made at most once."""

from __future__ import annotations

import gzip
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

#: Turns a snapshot into one exposition format, ``"text"`` (Prometheus text 0.0.4) or
#: ``"openmetrics"`` (OpenMetrics 1.0.0): the bytes, or None where the renderer has no such format.
Encoder = Callable[[str], bytes | None]
FORMATS = ("text", "openmetrics")
#: Fast compression: a body is compressed at most once per snapshot and may be served many times;
#: level 1 keeps most of the size benefit at a fraction of the CPU.
GZIP_LEVEL = 1


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


class Rendered:
    """The exposition of one snapshot, encoded on demand: each encoding a scrape may ask for (text
    or OpenMetrics, plain or gzip) is made at most once, by the first caller that asks for it, and
    kept; concurrent callers wait for that one encoding (one lock per snapshot). A snapshot nobody
    asks for is never encoded. OpenMetrics is None where the names cannot be valid OpenMetrics, as
    in dcgm-exporter compatibility mode. ``encodings`` counts the encoder's calls."""

    def __init__(self, encoder: Encoder) -> None:
        self._encoder = encoder
        self._lock = threading.Lock()
        self._made: dict[tuple[str, bool], bytes | None] = {}
        self.encodings = 0

    @classmethod
    def of(cls, text: bytes, openmetrics: bytes | None = None) -> Rendered:
        """Fixed bytes (encoded already)."""
        return cls({"text": text, "openmetrics": openmetrics}.get)

    def ready(self, name: str, gzipped: bool) -> bool:
        """True when this encoding is made already (getting it costs nothing)."""
        return (name, gzipped) in self._made

    def get(self, name: str, gzipped: bool = False) -> bytes | None:
        """The bytes of format ``name`` (one of :data:`FORMATS`), gzip-compressed if asked."""
        key = (name, gzipped)
        if key in self._made:
            return self._made[key]
        with self._lock:
            if (name, False) not in self._made:
                started = time.perf_counter()
                self.encodings += 1
                plain = self._made[(name, False)] = self._encoder(name)
                if plain is not None:
                    log.debug("encoded %s for a snapshot: %d bytes in %.2f ms", name, len(plain), _ms(started))
            if key not in self._made:
                started = time.perf_counter()
                plain = self._made[(name, False)]
                self._made[key] = None if plain is None else gzip.compress(plain, GZIP_LEVEL, mtime=0)
                if plain is not None:
                    log.debug(
                        "compressed %s for a snapshot: %d bytes in %.2f ms",
                        name,
                        len(self._made[key] or b""),
                        _ms(started),
                    )
            return self._made[key]

    @property
    def text(self) -> bytes:
        return self.get("text") or b""

    @property
    def text_gzip(self) -> bytes:
        return self.get("text", True) or b""

    @property
    def openmetrics(self) -> bytes | None:
        return self.get("openmetrics")

    @property
    def openmetrics_gzip(self) -> bytes | None:
        return self.get("openmetrics", True)
