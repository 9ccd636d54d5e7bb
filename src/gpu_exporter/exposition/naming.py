"""Naming profiles: how one set of families is written out. The native profile writes Prometheus
conventions (sorted labels, ``_total`` on counters, OpenMetrics too); the dcgm-exporter profile
writes its names as they are, labels in its order, integers without a fraction and text only (its
counters lack ``_total``, which OpenMetrics requires). Both go through the one encoder
(:func:`gpu_exporter.exposition.encoder.encode`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client.utils import floatToGoString


def go_float(value: float) -> str:
    """Prometheus' own formatting (``1.0``, ``+Inf``, ``1e+21``), as prometheus_client writes it."""
    return str(floatToGoString(value))  # type: ignore[no-untyped-call]  # untyped upstream


def integer_or_exact(value: float) -> str:
    """Integers without a fraction (as dcgm-exporter prints them), other floats exactly (repr)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    value = float(value)
    if value.is_integer() and abs(value) < 2**63:
        return str(int(value))
    return repr(value)


@dataclass(frozen=True)
class Profile:
    """How families are written: ``sort_labels`` (else in the order given), ``value_text`` formats
    a sample value, ``counter_suffix`` appends ``_total`` to counter names in the text format,
    ``openmetrics`` also writes OpenMetrics."""

    sort_labels: bool
    value_text: Callable[[float], str]
    counter_suffix: bool
    openmetrics: bool


NATIVE = Profile(sort_labels=True, value_text=go_float, counter_suffix=True, openmetrics=True)
#: dcgm-exporter's DCGM_FI_* families.
DCGM_EXPORTER = Profile(sort_labels=False, value_text=integer_or_exact, counter_suffix=False, openmetrics=False)
#: gpu-exporter's own self-metrics inside a dcgm-exporter exposition: native names, its value style.
DCGM_EXPORTER_SELF = Profile(sort_labels=True, value_text=integer_or_exact, counter_suffix=True, openmetrics=False)
