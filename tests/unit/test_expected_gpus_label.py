"""The expected GPU count from a label on this Kubernetes node (``--kubernetes.expected-gpus-label``,
issue 38): read by the same node reader as the pause label; a plain whole number sets the inventory
the health model judges each cycle, a relabel takes effect at the next read (no restart), removing it
takes the inventory away, ``--expected-gpus`` wins over it, and a value that is no count is logged once
and counted (kind ``invalid_label``) and ignored; the node not answering keeps what was last seen."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gpu_exporter import model
from gpu_exporter.backends.base import DeviceIdentity
from gpu_exporter.control.nodelabel import NodeLabels
from gpu_exporter.options import OPTIONS
from gpu_exporter.sampling.health import FAIL, PASS, HealthModel
from gpu_exporter.sampling.inventory import DEFAULT_LABEL, ExpectedGpus
from gpu_exporter.sampling.snapshot import DeviceView

LABEL = DEFAULT_LABEL


class _Node:
    """The API server's answer for this node, as the test sets it (an exception: the request fails)."""

    def __init__(self) -> None:
        self.labels: dict[str, str] = {"kubernetes.io/hostname": "gpu-7"}
        self.failure: Exception | None = None

    def __call__(self) -> dict[str, Any]:
        if self.failure is not None:
            raise self.failure
        return {"kind": "Node", "metadata": {"name": "gpu-7", "labels": dict(self.labels)}}


def _reader(inventory: ExpectedGpus, node: _Node) -> NodeLabels:
    return NodeLabels(node, [lambda labels, _annotations: inventory.label_seen(labels.get(LABEL))], wall=lambda: 5.0)


def _two_gpus() -> list[DeviceView]:
    return [DeviceView(DeviceIdentity(i, f"GPU-{i}"), True, {model.gpu(i, f"GPU-{i}"): {}}) for i in range(2)]


def test_the_label_sets_the_inventory_the_health_model_judges_and_a_relabel_acts_without_restart() -> None:
    node, inventory = _Node(), ExpectedGpus(None, LABEL)
    reader, health = _reader(inventory, node), HealthModel(inventory)
    reader.check()
    assert inventory.current() is None and health.assess(_two_gpus(), None, 1.0).status == PASS
    node.labels[LABEL] = "3"
    reader.check()
    judged = health.assess(_two_gpus(), None, 2.0)
    assert (judged.expected, judged.missing, judged.status, judged.action) == (3, 1, FAIL, "reboot")
    assert judged.problems() == ["1 of 3 GPUs missing: reboot"]
    node.labels[LABEL] = "2"  # relabelled: the next read's count, the next cycle's verdict
    reader.check()
    assert health.assess(_two_gpus(), None, 3.0).status == PASS
    node.labels[LABEL] = "0"  # as --expected-gpus 0: whatever the driver lists
    reader.check()
    assert inventory.current() is None
    node.labels[LABEL] = "4"
    reader.check()
    del node.labels[LABEL]
    reader.check()
    assert inventory.current() is None and health.assess(_two_gpus(), None, 4.0).expected is None
    assert reader.current().up and dict(reader.current().failures) == {}


@pytest.mark.parametrize("value", ["eight", "-1", "+2", "2.0", " 2", "1025", "0x8", "８"])
def test_a_value_that_is_no_count_is_logged_once_counted_and_ignored(
    value: str, caplog: pytest.LogCaptureFixture
) -> None:
    node, inventory = _Node(), ExpectedGpus(None, LABEL)
    reader = _reader(inventory, node)
    node.labels[LABEL] = "8"
    reader.check()
    assert inventory.current() == 8
    caplog.set_level(logging.WARNING)
    node.labels[LABEL] = value
    for _ in range(3):
        reader.check()
    assert inventory.current() is None  # ignored: no count, not the last good one
    assert caplog.text.count("is not a whole number from 0 to 1024: ignored") == 1
    assert dict(reader.current().failures) == {"invalid_label": 1}  # once per value, not per read


def test_the_flag_wins_over_the_label() -> None:
    node, inventory = _Node(), ExpectedGpus(4, LABEL)
    reader = _reader(inventory, node)
    node.labels[LABEL] = "8"
    reader.check()
    assert inventory.current() == 4
    node.labels[LABEL] = "many"
    reader.check()
    assert inventory.current() == 4 and dict(reader.current().failures) == {}


def test_a_node_that_cannot_be_read_keeps_the_last_count_and_is_counted() -> None:
    node, inventory = _Node(), ExpectedGpus(None, LABEL)
    reader = _reader(inventory, node)
    node.labels[LABEL] = "8"
    reader.check()
    node.failure = RuntimeError("HTTP 403: nodes is forbidden")
    reader.check()
    state = reader.current()
    assert inventory.current() == 8 and not state.up and dict(state.failures) == {"error": 1}
    assert (state.calls, state.fetched_at) == (2, 5.0)


def test_the_label_option_takes_kubernetes_label_keys_only() -> None:
    option = next(o for o in OPTIONS if o.flag == "--kubernetes.expected-gpus-label")
    for good in ("", LABEL, "nvidia.com/gpu.count", "expected", "a.b-c/x_y.z"):
        assert option.parse(good) == good
    for bad in ("/x", "Gpu-Exporter.io/x", "x/", "gpu exporter", "a/b/c", "-x", "x" * 64):
        with pytest.raises(ValueError, match="a Kubernetes label key"):
            option.parse(bad)
