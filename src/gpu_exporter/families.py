"""Turn one cycle's device views and self-state into Prometheus metric families.

Pure functions: no vendor calls, no clocks. Families come out in catalogue order (identity first,
self-metrics last), each sample labelled ``gpu`` and ``uuid`` (and the MIG labels for MIG devices).
"""

from __future__ import annotations

import platform
from collections.abc import Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.samples import Sample

from gpu_exporter.backends.base import HostIdentity
from gpu_exporter.catalogue import DEVICE_LABELS, INFO_LABELS, MIG_INFO_LABELS, MIG_LABELS, MetricSpec
from gpu_exporter.snapshot import DeviceView, SelfStats


def _family(spec: MetricSpec) -> Metric:
    cls = CounterMetricFamily if spec.kind == "counter" else GaugeMetricFamily
    return cls(spec.name, spec.help, unit=spec.unit)


def _add(family: Metric, labels: dict[str, str], value: float) -> None:
    """Append a sample with exactly these labels (a whole-GPU sample of a MIG-capable metric has
    no MIG labels at all, rather than empty ones)."""
    suffix = "_total" if family.type == "counter" else ""
    family.samples.append(Sample(family.name + suffix, labels, value))


def device_families(specs: Sequence[MetricSpec], host: HostIdentity, devices: Sequence[DeviceView]) -> list[Metric]:
    """``gpu_info``, ``gpu_up``, ``gpu_mig_info`` and one family per catalogue spec."""
    info = GaugeMetricFamily(
        "gpu_info",
        "Identity of each GPU; value is always 1. Source: NVML device and system queries.",
        labels=INFO_LABELS,
    )
    up = GaugeMetricFamily(
        "gpu_up", "1 while the GPU answers, 0 after the driver reported it lost.", labels=DEVICE_LABELS
    )
    mig_info = GaugeMetricFamily(
        "gpu_mig_info",
        "Identity of each MIG device; value is always 1. Source: NVML MIG device handles.",
        labels=MIG_INFO_LABELS,
    )
    families: list[Metric] = [info, up, mig_info]
    by_spec = {spec.name: _family(spec) for spec in specs}
    for device in devices:
        ident = device.identity
        base = {"gpu": str(ident.index), "uuid": ident.uuid}
        info.add_metric(
            [
                *base.values(),
                ident.name,
                ident.pci_bus_id,
                ident.serial,
                host.driver_version,
                host.cuda_version,
                ident.vbios_version,
                ident.board_part_number,
                ident.minor_number,
                ident.mig_mode,
            ],
            1,
        )
        up.add_metric(list(base.values()), 1 if device.up else 0)
        for spec in specs:
            value = device.values.get(spec.name)
            if value is not None:
                _add(by_spec[spec.name], base, value)
        for slot, mig in enumerate(ident.migs):
            mig_labels = dict(
                zip(MIG_LABELS, (str(mig.gpu_instance), str(mig.compute_instance), mig.profile), strict=True)
            )
            mig_labels = {**base, **mig_labels}
            mig_info.add_metric([*mig_labels.values(), mig.uuid, mig.name], 1)
            values = device.mig_values.get(slot, {})
            for spec in specs:
                if spec.mig and spec.name in values:
                    _add(by_spec[spec.name], mig_labels, values[spec.name])
    families.extend(by_spec.values())
    return families


def self_families(stats: SelfStats, devices: Sequence[DeviceView]) -> list[Metric]:
    """``gpu_exporter_*``: build, backend, cycle timing and health, errors by kind, per-device reads."""
    build = GaugeMetricFamily(
        "gpu_exporter_build_info", "gpu-exporter build; value is always 1.", labels=["version", "python_version"]
    )
    build.add_metric([stats.version, platform.python_version()], 1)
    backend = GaugeMetricFamily(
        "gpu_exporter_backend_info",
        "Backend in use and why it was chosen; value is always 1.",
        labels=["backend", "reason"],
    )
    backend.add_metric([stats.backend, stats.backend_reason], 1)
    families: list[Metric] = [
        build,
        backend,
        GaugeMetricFamily(
            "gpu_exporter_backend_up",
            "1 while the backend is initialised and answering.",
            value=1 if stats.backend_up else 0,
        ),
        GaugeMetricFamily(
            "gpu_exporter_collect_interval_seconds",
            "Configured time between sampling cycles.",
            value=stats.interval_seconds,
            unit="seconds",
        ),
    ]
    if stats.cycle_seconds is not None:
        families.append(
            GaugeMetricFamily(
                "gpu_exporter_sample_duration_seconds",
                "Wall time of the last sampling cycle, all GPUs.",
                value=stats.cycle_seconds,
                unit="seconds",
            )
        )
    if stats.last_success_timestamp is not None:
        families.append(
            GaugeMetricFamily(
                "gpu_exporter_last_sample_timestamp_seconds",
                "Unix time of the last cycle in which at least one GPU was sampled.",
                value=stats.last_success_timestamp,
                unit="seconds",
            )
        )
    errors = CounterMetricFamily(
        "gpu_exporter_sample_errors",
        "Failed vendor calls by error kind since start (absent values, not unsupported).",
        labels=["kind"],
    )
    for kind in sorted(stats.errors):
        errors.add_metric([kind], stats.errors[kind])
    read = GaugeMetricFamily(
        "gpu_exporter_device_read_duration_seconds",
        "Wall time of the last completed read of each GPU.",
        labels=DEVICE_LABELS,
        unit="seconds",
    )
    stalled = GaugeMetricFamily(
        "gpu_exporter_device_stalled",
        "1 while a GPU's read has not returned within one interval (a hung driver call).",
        labels=DEVICE_LABELS,
    )
    for device in devices:
        labels = [str(device.identity.index), device.identity.uuid]
        if device.read_seconds is not None:
            read.add_metric(labels, device.read_seconds)
        stalled.add_metric(labels, 1 if device.stalled else 0)
    families.extend([errors, read, stalled])
    return families
