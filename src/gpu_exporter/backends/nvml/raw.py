"""Raw values within one read: a per-NVLink source's, a link's counter from the read's one PRM answer,
a value from the entity's one GPM sample, and calls made at most once per read (answer or error kept)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pynvml

from gpu_exporter.backends.nvml.gpm import link_selector
from gpu_exporter.backends.nvml.readers import LINK_READERS, Handle, Raw
from gpu_exporter.catalogue import NvmlSource


def link_raw(handle: Handle, link: int, source: NvmlSource) -> float:
    """One raw value of a per-NVLink source."""
    return float(LINK_READERS[source.call](handle, link, source.selector))


def prm_raw(prm: Callable[[Handle], Any], handle: Handle, link: int, source: NvmlSource) -> float:
    """One link's PRM counter from the GPU's one ``nvmlDeviceReadPRMCounters_v1`` of this read."""
    outcome = prm(handle)[(link, source.selector)]
    if isinstance(outcome, Exception):
        raise outcome
    return float(outcome)


def gpm_raw(gpm: Callable[[], dict[str, Any]], source: NvmlSource, link: int | None = None) -> float | None:
    """One GPM value from the entity's one sample of this read (of NVLink ``link`` when given); None at a
    first sample (no interval yet)."""
    outcome = gpm().get(source.selector if link is None else link_selector(source.selector, link))
    if isinstance(outcome, Exception):
        raise outcome
    return None if outcome is None else float(outcome)


def once_only(call: Callable[[], Any]) -> Callable[[], Any]:
    """``call`` made at most once (its answer or its error kept)."""
    made = once(lambda _handle: call())
    return lambda: made(None)


def once(call: Callable[[Handle], Any]) -> Callable[[Handle], Any]:
    """``call`` made at most once (its answer or its error kept), for one handle in one read."""
    kept: list[Any] = []

    def once(handle: Handle) -> Any:
        if not kept:
            try:
                kept.append(call(handle))
            except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError) as err:
                kept.append(err)
        if isinstance(kept[0], Exception):
            raise kept[0]
        return kept[0]

    return once


def list_length(call: Callable[[Handle], Any], handle: Handle) -> Raw:
    return {"": len(call(handle))}
