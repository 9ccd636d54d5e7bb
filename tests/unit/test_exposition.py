"""The one-pass encoder writes exactly the bytes prometheus_client's two encoders write."""

from __future__ import annotations

import math

from prometheus_client import exposition as text_format
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.openmetrics import exposition as openmetrics_format
from prometheus_client.registry import Collector

from gpu_exporter import model
from gpu_exporter.backends.base import DeviceIdentity, HostIdentity, MigIdentity
from gpu_exporter.catalogue import METRICS
from gpu_exporter.exposition.encoder import choose, encode, render
from gpu_exporter.exposition.families import device_families, self_families
from gpu_exporter.sampling.events import XidTally
from gpu_exporter.sampling.snapshot import DeviceView, SelfStats


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:  # type: ignore[override]
        return self._families


def _families() -> list[Metric]:
    devices = []
    for index in range(4):
        identity = DeviceIdentity(
            index=index, uuid=f"GPU-{index}", name='Lab "H100" \\ rev\nB',
            migs=(MigIdentity(1, 0, "1g.5gb", "MIG-1", "x MIG 1g.5gb"),), nvlinks=(0, 1),
        )  # fmt: skip
        values = {spec.key: 1.5 * index + 0.1 for spec in METRICS if not spec.per_link}
        mig = model.mig(index, identity.uuid, 1, 0, "1g.5gb", "MIG-1", "x MIG 1g.5gb")
        samples = {
            model.gpu(index, identity.uuid): values,
            model.nvlink(index, identity.uuid, 0): {spec.key: 7.0 for spec in METRICS if spec.per_link},
            mig: {spec.key: 3.0 for spec in METRICS if spec.mig},
        }
        devices.append(DeviceView(identity, True, samples))
    stats = SelfStats("0.1.0", "nvml", True, "requested", 1.0, 0.01, 1.7e9, {"unknown": 2}, {"x": 1})
    events = {"GPU-1": XidTally({79: 1}, {}, 1.7e9, 79, ())}
    families = [*device_families(METRICS, HostIdentity("550.54.15"), devices, events), *self_families(stats, devices)]
    odd = GaugeMetricFamily("odd_metric", 'help with "quotes" \\ and\nnewline', labels=["a"])
    odd.add_metric(['v"\\\n'], math.nan)
    odd.add_metric(["b"], math.inf)
    odd.add_metric(["c"], 1e21)
    odd.add_metric(["d"], -math.inf)
    return [family for family in [*families, odd] if family.samples]


def test_encode_matches_prometheus_client_byte_for_byte() -> None:
    families = _families()
    text, openmetrics = encode(families)
    assert text == text_format.generate_latest(_Families(families))
    assert openmetrics == openmetrics_format.generate_latest(_Families(families))  # type: ignore[no-untyped-call]
    assert encode(families) == (text, openmetrics)  # the label cache changes nothing


def test_choose_by_accept_and_accept_encoding() -> None:
    rendered = render(_families())
    prometheus = (
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
        "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    )
    assert choose(rendered, prometheus, "gzip")[1:] == (
        "application/openmetrics-text; version=1.0.0; charset=utf-8",
        True,
    )
    assert choose(rendered, "*/*", "")[1:] == ("text/plain; version=0.0.4; charset=utf-8", False)
    assert choose(rendered, "application/openmetrics-text;q=0", "gzip;q=0")[1:] == (
        "text/plain; version=0.0.4; charset=utf-8",
        False,
    )
    assert choose(rendered, "", "deflate, gzip;q=0.5")[2] is True
