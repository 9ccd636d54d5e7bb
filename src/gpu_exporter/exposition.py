"""Render metric families to bytes once per snapshot, and pick the right bytes for a scrape.

Rendering happens on the sampler thread; a scrape only chooses among four pre-built byte strings
(Prometheus text 0.0.4 or OpenMetrics 1.0.0, each plain or gzip) by its ``Accept`` and
``Accept-Encoding`` headers.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable, Sequence

from prometheus_client import exposition as text_format
from prometheus_client.openmetrics import exposition as openmetrics_format
from prometheus_client.registry import Collector

from gpu_exporter.snapshot import Rendered

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
# Fast compression: the body is rebuilt every interval and served many times; level 1 keeps most
# of the size benefit at a fraction of the CPU.
_GZIP_LEVEL = 1


class _Families(Collector):
    """Adapts a ready list of families to what prometheus_client's encoders iterate over."""

    def __init__(self, families: Sequence[object]) -> None:
        self._families = families

    def collect(self) -> Iterable[object]:  # type: ignore[override]  # encoders only iterate
        return self._families


def render(families: Sequence[object]) -> Rendered:
    """Encode ``families`` in both formats and gzip each; families without samples are left out."""
    collector = _Families([family for family in families if family.samples])  # type: ignore[attr-defined]
    text = text_format.generate_latest(collector)
    openmetrics = openmetrics_format.generate_latest(collector)  # type: ignore[no-untyped-call]  # untyped upstream
    return Rendered(
        text=text,
        text_gzip=gzip.compress(text, _GZIP_LEVEL, mtime=0),
        openmetrics=openmetrics,
        openmetrics_gzip=gzip.compress(openmetrics, _GZIP_LEVEL, mtime=0),
    )


def render_text(text: bytes) -> Rendered:
    """Text-format bytes already encoded elsewhere (compatibility mode), plain and gzip."""
    return Rendered(text=text, text_gzip=gzip.compress(text, _GZIP_LEVEL, mtime=0))


def _accepted(header: str) -> dict[str, float]:
    """Media types or codings of an Accept-style header with their q values (default 1)."""
    accepted: dict[str, float] = {}
    for part in header.split(","):
        name, *params = (piece.strip() for piece in part.split(";"))
        if not name:
            continue
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        accepted[name.lower()] = max(q, accepted.get(name.lower(), 0.0))
    return accepted


def choose(rendered: Rendered, accept: str, accept_encoding: str) -> tuple[bytes, str, bool]:
    """The body, its content type and whether it is gzip-encoded, for these request headers.

    OpenMetrics only when the client asks for it at least as strongly as for plain text (as
    Prometheus does); gzip only when ``Accept-Encoding`` lists it with a non-zero q.
    """
    media = _accepted(accept)
    openmetrics_q = media.get("application/openmetrics-text", 0.0)
    text_q = max(media.get("text/plain", 0.0), media.get("*/*", 0.0))
    use_openmetrics = openmetrics_q > 0 and openmetrics_q >= text_q
    use_gzip = _accepted(accept_encoding).get("gzip", 0.0) > 0
    if use_openmetrics and rendered.openmetrics is not None and rendered.openmetrics_gzip is not None:
        return (rendered.openmetrics_gzip if use_gzip else rendered.openmetrics), OPENMETRICS_CONTENT_TYPE, use_gzip
    return (rendered.text_gzip if use_gzip else rendered.text), TEXT_CONTENT_TYPE, use_gzip
