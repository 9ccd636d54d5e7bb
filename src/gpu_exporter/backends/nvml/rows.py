"""A due catalogue row as the NVML backend reads it."""

from __future__ import annotations

from typing import NamedTuple

from gpu_exporter.catalogue import MetricSpec, NvmlSource


class Row(NamedTuple):
    """A due catalogue row with its key and NVML source, each worked out once (both are properties
    that build their answer)."""

    spec: MetricSpec
    key: str
    source: NvmlSource
