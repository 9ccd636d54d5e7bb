"""Render metric families to bytes once per snapshot, and pick the right bytes for a scrape.

The encoder writes Prometheus text 0.0.4 and OpenMetrics 1.0.0 in one pass, byte for byte what
prometheus_client's two ``generate_latest`` encoders write for gpu-exporter's families (gauges and
counters, no timestamps or exemplars; a test holds them to the same bytes) at about a tenth of the
cost: each sample line is formatted once for both formats and the label part of a line, which
repeats every cycle, is cached. Rendering happens on the sampler thread; a scrape only chooses
among four pre-built byte strings (Prometheus text 0.0.4 or OpenMetrics 1.0.0, each plain or gzip)
by its ``Accept`` and ``Accept-Encoding`` headers.
"""

from __future__ import annotations

import gzip
from collections.abc import Sequence

from prometheus_client.core import Metric

from gpu_exporter.naming import NATIVE, Profile
from gpu_exporter.snapshot import Rendered

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
# Fast compression: the body is rebuilt every interval and served many times; level 1 keeps most
# of the size benefit at a fraction of the CPU.
_GZIP_LEVEL = 1


#: Formatted label sets, keyed by the sample's labels; bounded so label churn cannot grow it forever.
_LABEL_CACHE: dict[tuple[tuple[str, str], ...], str] = {}
_LABEL_CACHE_MAX = 200_000


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _escape_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _label_text(labels: dict[str, str], sort: bool = True) -> str:
    key = tuple(sorted(labels.items())) if sort else tuple(labels.items())
    text = _LABEL_CACHE.get(key)
    if text is None:
        text = "{" + ",".join(f'{name}="{_escape_value(value)}"' for name, value in key) + "}" if key else ""
        if len(_LABEL_CACHE) >= _LABEL_CACHE_MAX:
            _LABEL_CACHE.clear()
        _LABEL_CACHE[key] = text
    return text


def encode(families: Sequence[Metric], profile: Profile = NATIVE) -> tuple[bytes, bytes]:
    """(text format 0.0.4, OpenMetrics 1.0.0) bytes of ``families`` written the ``profile``'s way
    (the OpenMetrics bytes are empty when the profile has none)."""
    text: list[str] = []
    openmetrics: list[str] = []
    value_text, sort = profile.value_text, profile.sort_labels
    for family in families:
        name, kind, documentation = family.name, family.type, family.documentation
        text_name = name + "_total" if kind == "counter" and profile.counter_suffix else name
        text.append(f"# HELP {text_name} {_escape_help(documentation)}\n")
        text.append(f"# TYPE {text_name} {kind}\n")
        if profile.openmetrics:
            openmetrics.append(f"# HELP {name} {_escape_value(documentation)}\n# TYPE {name} {kind}\n")
            if family.unit:
                openmetrics.append(f"# UNIT {name} {family.unit}\n")
        for sample in family.samples:
            line = f"{sample.name}{_label_text(sample.labels, sort)} {value_text(sample.value)}\n"
            text.append(line)
            if profile.openmetrics:
                openmetrics.append(line)
    if profile.openmetrics:
        openmetrics.append("# EOF\n")
    return "".join(text).encode("utf-8"), "".join(openmetrics).encode("utf-8")


def render(families: Sequence[Metric]) -> Rendered:
    """Encode ``families`` natively in both formats and gzip each; families without samples are left out."""
    text, openmetrics = encode([family for family in families if family.samples])
    return Rendered(
        text=text,
        text_gzip=gzip.compress(text, _GZIP_LEVEL, mtime=0),
        openmetrics=openmetrics,
        openmetrics_gzip=gzip.compress(openmetrics, _GZIP_LEVEL, mtime=0),
    )


def render_text(text: bytes) -> Rendered:
    """Text-format bytes only (a profile without OpenMetrics), plain and gzip."""
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
