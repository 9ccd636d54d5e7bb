"""The native renderer: a frame's families under gpu-exporter's own names, built and encoded when
a scrape first asks for a format (never on the sampler thread)."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client.core import Metric

from gpu_exporter.catalogue import FULL, Detail, MetricSpec, detailed
from gpu_exporter.exposition.cache import Rendered
from gpu_exporter.exposition.encoder import lazily
from gpu_exporter.exposition.families import device_families, fabric_families, health_families, self_families
from gpu_exporter.sampling.snapshot import Frame, Renderer


def native_renderer(specs: Sequence[MetricSpec], detail: Detail = FULL) -> Renderer:
    """Render frames under gpu-exporter's own names (NVSwitch families only when a fabric row is
    enabled, i.e. the nvswitch collector is on), at ``detail``: ``lean`` leaves out the rows marked
    full detail and pre-creates no Xid code (the frame still holds their values: the status page
    reads them)."""
    fabric = any(spec.root == "fabric" for spec in specs)
    specs = detailed(specs, detail)
    precreate = detail == FULL

    def render_native(frame: Frame) -> Rendered:
        def families() -> list[Metric]:
            return [
                *device_families(specs, frame.host, frame.devices, frame.events, precreate_xids=precreate),
                *health_families(frame.health, subsystems=precreate),
                *(fabric_families(specs, frame.fabric) if fabric else ()),
                *self_families(frame.stats, frame.devices, frame.health),
            ]

        return lazily(families)

    return render_native
