"""dcgm-exporter compatibility: the same frames rendered under dcgm-exporter's names, units and labels.

A :class:`~gpu_exporter.compat.plan.CompatPlan` (:mod:`.plan`) is built once from a counters list
(dcgm-exporter's CSV) and the catalogue's compatibility columns: each row becomes a value item (a
catalogue metric × its ``compat_scale``), a label field, the last-Xid gauge or one of
dcgm-exporter's windowed counts; rows the active backend cannot supply are logged once and skipped.
Each frame is then rendered as Prometheus text with dcgm-exporter's label order (``gpu``, ``UUID``,
``pci_bus_id``, ``device``, ``modelName``, MIG's ``GPU_I_PROFILE`` and ``GPU_I_ID``, ``Hostname``,
label fields, then per-metric labels; one GPU's series: :mod:`.series`).
Unlike dcgm-exporter, label values are escaped, floats printed exactly, and a missing value is
simply absent. Values are scaled once from the vendor's raw value into dcgm-exporter's unit (no
base-unit value is scaled back). The families go through the one encoder with the dcgm-exporter
naming profile (:mod:`gpu_exporter.exposition.naming`): labels in that order, integers without a fraction,
text format only (dcgm-exporter's counter names lack ``_total``, which OpenMetrics would require).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from prometheus_client.core import Metric
from prometheus_client.samples import Sample

from gpu_exporter.catalogue.fixed import BUILD_INFO
from gpu_exporter.compat.devices import monitored, unmatched_ids
from gpu_exporter.compat.fields import LINK_BANDWIDTHS, RATE_FIELDS
from gpu_exporter.compat.health import HEALTH_STATUS
from gpu_exporter.compat.plan import _CLOCK_TOTAL, _XID_FIELDS, CompatPlan, _Item
from gpu_exporter.compat.pods import attributed, first_wins, hpc_jobs
from gpu_exporter.compat.pods import pod_labels as _pods
from gpu_exporter.compat.releases import BY_NAME
from gpu_exporter.compat.series import Labels, _device_samples
from gpu_exporter.exposition.cache import Rendered
from gpu_exporter.exposition.encoder import encode_format, render_text
from gpu_exporter.exposition.families import self_families
from gpu_exporter.exposition.naming import DCGM_EXPORTER, DCGM_EXPORTER_SELF
from gpu_exporter.sampling.snapshot import Frame

log = logging.getLogger(__name__)


def compat_renderer(compat: CompatPlan) -> Callable[[Frame], Rendered]:
    """Render frames in dcgm-exporter's names (text format only), self-metrics appended natively,
    both through the one encoder with their naming profiles."""

    unchecked = [True]
    clock_totals = any(item.field_id == _CLOCK_TOTAL for item in compat.items)
    bandwidth = any(
        (item.field_id in RATE_FIELDS or item.field_id in LINK_BANDWIDTHS) and item.spec is None
        for item in compat.items
    )

    def render_compat(frame: Frame) -> Rendered:
        if unchecked[0] and any(device.up for device in frame.devices):
            unchecked[0] = False
            for missing in unmatched_ids(compat.options.devices, frame):
                log.warning("-d: %s is not on this host; nothing is reported for it", missing)
        if clock_totals:  # once per frame, not per scrape: the clock events that began since the last frame
            for device in frame.devices:
                compat.clock_totals.update(device.identity.uuid, frame.windows.get(device.identity.uuid, ()))
        if bandwidth:  # once per frame, not per scrape: the rate between this frame's counters and the last's
            for device in frame.devices:
                if device.up:
                    compat.bandwidth.update(device.identity.uuid, device.entity, device.samples, frame.wall_time)

        def text() -> bytes:  # built when a scrape first asks for it
            families = [family for family in (_family(item, compat, frame) for item in compat.items) if family.samples]
            own = [family for family in self_families(frame.stats, frame.devices) if family.samples]
            for family in own:  # the build info says which dcgm-exporter release this is a drop-in for
                if family.name == BUILD_INFO.name:
                    release = ("dcgm_exporter_release", compat.release)
                    family.samples = [s._replace(labels={**s.labels, release[0]: release[1]}) for s in family.samples]
            return encode_format(families, "text", DCGM_EXPORTER) + encode_format(own, "text", DCGM_EXPORTER_SELF)

        return render_text(text)

    return render_compat


def _profiling_collected(item: _Item, compat: CompatPlan, frame: Frame) -> bool:
    """Whether dcgm-exporter collects profiling row ``item`` at all on this node (its other rows: always).
    It asks the GPUs' profiling support once, and on a node whose GPUs differ the release's rule decides
    (:attr:`.releases.Release.profiling_gpus`): up to 4.9 GPU 0's support, so a field GPU 0 lacks is served
    by no GPU; from 4.10 every selected GPU's, so a field one of them lacks is served by none. A GPU lacks
    a field once its backend said so (the unsupported memo); a GPU that lacks it where the field is
    collected simply has no series, as dcgm-exporter's DCGM leaves it blank. The memo names families, so a
    GPU lacks the row when its family is among those it lacks and the row itself has no value."""
    spec = item.spec
    if spec is None or spec.collector != "profiling" or compat.release not in BY_NAME:
        return True
    selected = [device for device in frame.devices if device.up and any(monitored(device, compat.options.devices))]
    if BY_NAME[compat.release].profiling_gpus == "first":
        selected = sorted(selected, key=lambda device: device.identity.index)[:1]
    return not any(
        spec.name in {name.split(" (")[0] for name in device.unsupported} and spec.key not in device.values
        for device in selected
    )


def _family(item: _Item, compat: CompatPlan, frame: Frame) -> Metric:
    counter = item.counter
    options = compat.options
    samples: list[tuple[Labels, float]] = []
    if not _profiling_collected(item, compat, frame):
        return Metric(counter.field, counter.help, counter.type)
    for device in frame.devices:
        if not device.up and item.field_id not in _XID_FIELDS and item.field_id != HEALTH_STATUS:
            continue  # a lost GPU keeps its Xid and health series (its Xid 79 comes just before the loss), no others
        pods, jobs = _pods(device, options), hpc_jobs(device)
        for uid, found in _device_samples(item, compat, frame, device):
            samples += attributed(found, pods.get(uid, []), jobs.get(uid, ()))
    family = Metric(counter.field, counter.help, counter.type)
    family.samples = [Sample(counter.field, first_wins(labels), value) for labels, value in samples]
    return family
