"""The node condition the health asks for (``--kubernetes.node-condition``), in process: True while
healthy, False with a CamelCase reason by the action and the problems as the message, Unknown before
anything was judged."""

from __future__ import annotations

from gpu_exporter import model
from gpu_exporter.attribution.nodecondition import MAX_MESSAGE, Wanted, wanted
from gpu_exporter.backends.base import DeviceIdentity
from gpu_exporter.catalogue import keys
from gpu_exporter.sampling.health import HealthModel
from gpu_exporter.sampling.snapshot import DeviceView


def _view(index: int, values: dict[str, float], up: bool = True) -> DeviceView:
    uuid = f"GPU-{index}"
    return DeviceView(DeviceIdentity(index, uuid), up, {model.gpu(index, uuid): values}, down_reason="lost")


def test_healthy_is_true_and_names_warnings() -> None:
    assert wanted(HealthModel().assess([_view(0, {}), _view(1, {})], None, 1.0)) == Wanted(
        "True", "GPUsHealthy", "2 GPUs healthy"
    )
    thermal = keys.CLOCK_EVENT_ACTIVE + "{reason=hw_thermal}"
    warned = wanted(HealthModel().assess([_view(0, {thermal: 1})], None, 1.0))
    assert warned == Wanted("True", "GPUsHealthy", "1 GPU healthy; warnings: GPU 0: hardware thermal slowdown: none")


def test_action_needed_is_false_with_the_reason_of_the_worst_action() -> None:
    health = HealthModel(expected=3).assess([_view(0, {keys.RECOVERY_ACTION: 1}), _view(1, {})], None, 1.0)
    assert wanted(health) == Wanted(
        "False",
        "GPUNodeRebootNeeded",
        "1 of 3 GPUs missing: reboot; GPU 0: the driver asks for recovery action 1: reset_gpu",  # worst first,
    )
    lost = wanted(HealthModel().assess([_view(0, {}, up=False)] * 200, None, 1.0))
    assert lost.reason == "GPUNodeRebootNeeded" and len(lost.message) == MAX_MESSAGE


def test_not_judged_is_unknown() -> None:
    assert wanted(HealthModel().assess([], None, 1.0, known=False)).status == "Unknown"
