"""Encode metric families on demand, at most once per snapshot and format, and pick the format a
scrape asks for.

The encoder writes Prometheus text 0.0.4 or OpenMetrics 1.0.0, byte for byte what
prometheus_client's two ``generate_latest`` encoders write for gpu-exporter's families (gauges and
counters, no timestamps or exemplars; a test holds them to the same bytes) at about a tenth of the
cost: the label part of a line, which repeats every cycle, is cached. Nothing is encoded on the
sampler thread: a snapshot carries a :class:`~gpu_exporter.exposition.cache.Rendered` that builds the
families and encodes a format (Prometheus text 0.0.4 or OpenMetrics 1.0.0, plain or gzip) when a
scrape first asks for it by its ``Accept`` and ``Accept-Encoding`` headers, and keeps the bytes for
the scrapes after it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from prometheus_client.core import Metric

from gpu_exporter.exposition.cache import Rendered
from gpu_exporter.exposition.naming import NATIVE, Profile
from gpu_exporter.sampling.snapshot import Exposition

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
_CONTENT_TYPES = {"text": TEXT_CONTENT_TYPE, "openmetrics": OPENMETRICS_CONTENT_TYPE}


#: Formatted label sets by (whether sorted, the sample's labels in their own order), in two
#: generations: an encode finds a label set in the young one, or moves it there from the old one;
#: every :data:`_ROTATE_EVERY` encodes the young becomes the old and the old is dropped. So the cache
#: holds what the last few encodes used (about twice one exposition's label sets), not every label
#: set process churn has ever made (a fixed 200,000-entry cap held ~170 MB under churn).
_LABEL_CACHE: dict[tuple[bool, tuple[tuple[str, str], ...]], str] = {}
_OLD_LABELS: dict[tuple[bool, tuple[tuple[str, str], ...]], str] = {}
_ROTATE_EVERY = 4
_encodes = [0]


def _rotate() -> None:
    """Start a new generation every :data:`_ROTATE_EVERY` encodes (called as an encode starts)."""
    _encodes[0] += 1
    if _encodes[0] % _ROTATE_EVERY == 0:
        _OLD_LABELS.clear()
        _OLD_LABELS.update(_LABEL_CACHE)
        _LABEL_CACHE.clear()


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _escape_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _label_text(key: tuple[bool, tuple[tuple[str, str], ...]]) -> str:
    """``{name="value",...}`` of a label set (sorted by name when ``key[0]``; empty for none), cached."""
    sort, pairs = key
    ordered = sorted(pairs) if sort else pairs
    text = _OLD_LABELS.get(key)
    if text is None:
        text = "{" + ",".join(f'{name}="{_escape_value(value)}"' for name, value in ordered) + "}" if pairs else ""
    _LABEL_CACHE[key] = text
    return text


def encode_format(families: Sequence[Metric], name: str, profile: Profile = NATIVE) -> bytes:
    """``families`` in one format, ``"text"`` (0.0.4) or ``"openmetrics"`` (1.0.0), written the
    ``profile``'s way."""
    openmetrics = name == "openmetrics"
    out: list[str] = []
    append = out.append
    value_text, sort, suffix = profile.value_text, profile.sort_labels, profile.counter_suffix
    _rotate()
    labels = _LABEL_CACHE
    for family in families:
        metric, kind, documentation = family.name, family.type, family.documentation
        if openmetrics:
            append(f"# HELP {metric} {_escape_value(documentation)}\n# TYPE {metric} {kind}\n")
            if family.unit:
                append(f"# UNIT {metric} {family.unit}\n")
        else:
            text_name = metric + "_total" if kind == "counter" and suffix else metric
            append(f"# HELP {text_name} {_escape_help(documentation)}\n# TYPE {text_name} {kind}\n")
        for sample in family.samples:
            key = (sort, tuple(sample.labels.items()))
            label_text = labels.get(key) or _label_text(key)
            append(f"{sample.name}{label_text} {value_text(sample.value)}\n")
    if openmetrics:
        append("# EOF\n")
    return "".join(out).encode("utf-8")


def encode(families: Sequence[Metric], profile: Profile = NATIVE) -> tuple[bytes, bytes]:
    """(text format 0.0.4, OpenMetrics 1.0.0) bytes of ``families`` written the ``profile``'s way
    (the OpenMetrics bytes are empty when the profile has none)."""
    text = encode_format(families, "text", profile)
    return text, encode_format(families, "openmetrics", profile) if profile.openmetrics else b""


def lazily(build: Callable[[], Sequence[Metric]]) -> Rendered:
    """A snapshot's exposition whose families are built (once, by ``build``) and encoded natively
    only when a scrape first asks for a format; families without samples are left out."""
    built: list[Sequence[Metric]] = []

    def encoder(name: str) -> bytes:
        if not built:  # Rendered calls its encoder under its lock: built once per snapshot
            built.append([family for family in build() if family.samples])
        return encode_format(built[0], name)

    return Rendered(encoder)


def render(families: Sequence[Metric]) -> Rendered:
    """``families`` natively, each format encoded (and gzip-compressed) when first asked for."""
    return lazily(lambda: families)


def render_text(text: Callable[[], bytes]) -> Rendered:
    """Text-format bytes only (a profile without OpenMetrics), made by ``text`` when first asked for."""
    return Rendered(lambda name: text() if name == "text" else None)


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


def negotiate(accept: str, accept_encoding: str) -> tuple[str, bool]:
    """The format a scrape asks for (``"openmetrics"`` or ``"text"``) and whether it takes gzip.

    OpenMetrics only when the client asks for it at least as strongly as for plain text (as
    Prometheus does); gzip only when ``Accept-Encoding`` lists it with a non-zero q.
    """
    media = _accepted(accept)
    openmetrics_q = media.get("application/openmetrics-text", 0.0)
    text_q = max(media.get("text/plain", 0.0), media.get("*/*", 0.0))
    use_openmetrics = openmetrics_q > 0 and openmetrics_q >= text_q
    return "openmetrics" if use_openmetrics else "text", _accepted(accept_encoding).get("gzip", 0.0) > 0


def pick(rendered: Exposition, name: str, gzipped: bool) -> tuple[bytes, str]:
    """The body and content type of format ``name`` (text where the snapshot has no such format),
    encoding it first if no scrape has asked for it yet."""
    body = rendered.get(name, gzipped)
    if body is None:
        name, body = "text", rendered.get("text", gzipped)
    return body or b"", _CONTENT_TYPES[name]


def is_ready(rendered: Exposition, name: str, gzipped: bool) -> bool:
    """True when :func:`pick` would not encode anything (the bytes are made already)."""
    if not rendered.ready(name, gzipped):
        return False
    return rendered.get(name, gzipped) is not None or rendered.ready("text", gzipped)


def choose(rendered: Exposition, accept: str, accept_encoding: str) -> tuple[bytes, str, bool]:
    """The body, its content type and whether it is gzip-encoded, for these request headers."""
    name, gzipped = negotiate(accept, accept_encoding)
    body, content_type = pick(rendered, name, gzipped)
    return body, content_type, gzipped
