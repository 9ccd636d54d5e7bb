"""The health model as a pure stage: device views and Xid tallies in, per GPU and subsystem pass, warn
or fail with the reason and action out, on a fake wall clock (Xids held for an hour, counters judged
over a minute)."""

from __future__ import annotations

from gpu_exporter import model
from gpu_exporter.backends.base import DeviceIdentity
from gpu_exporter.catalogue import key_of, keys
from gpu_exporter.sampling.events import XidTally
from gpu_exporter.sampling.health import FAIL, PASS, WARN, XID_HOLD_SECONDS, HealthModel
from gpu_exporter.sampling.snapshot import DeviceView

UNCORRECTED = key_of(keys.ECC_ERRORS, (("type", "uncorrected"), ("counter", "volatile")))
CRC = key_of(keys.NVLINK_ERRORS, (("type", "crc_data"),))


def _view(index: int, values: dict[str, float], *, up: bool = True, reason: str = "") -> DeviceView:
    uuid = f"GPU-{index}"
    return DeviceView(DeviceIdentity(index, uuid), up, {model.gpu(index, uuid): values}, down_reason=reason)


def test_a_healthy_gpu_passes_every_subsystem_it_was_judged_on() -> None:
    health = HealthModel().assess([_view(0, {keys.RECOVERY_ACTION: 0, keys.INFOROM_VALID: 1})], None, 100.0)
    (gpu,) = health.gpus
    assert gpu.checked == ("inforom", "driver")  # nothing else was read: absent, not passed
    assert (gpu.status, gpu.action, health.status, health.problems()) == (PASS, "none", PASS, [])


def test_a_recovery_action_of_reset_fails_the_driver_with_reset_gpu() -> None:
    health = HealthModel().assess([_view(0, {keys.RECOVERY_ACTION: 1})], None, 100.0)
    finding = health.gpus[0].status_of("driver")
    assert finding is not None and (finding.status, finding.action) == (FAIL, "reset_gpu")
    assert finding.code == "DCGM_FR_GPU_RECOVERY_RESET"
    assert health.problems() == ["GPU 0: the driver asks for recovery action 1: reset_gpu"]


def test_memory_rules_take_the_most_drastic_action() -> None:
    values = {keys.ROW_REMAP_PENDING: 1, keys.MEMORY_UNREPAIRABLE: 1, UNCORRECTED: 2, keys.ROW_REMAP_FAILED: 0}
    gpu = HealthModel().assess([_view(0, values)], None, 1.0).gpus[0]
    assert (gpu.status, gpu.action, gpu.reason) == (FAIL, "service", "memory has an unrepairable error")
    assert {f.code for f in gpu.findings} == {
        "DCGM_FR_PENDING_ROW_REMAP", "DCGM_FR_UNCORRECTABLE_ROW_REMAP_LIMIT", "DCGM_FR_VOLATILE_DBE_DETECTED",
    }  # fmt: skip


def test_a_lost_gpu_fails_with_reboot() -> None:
    health = HealthModel().assess([_view(0, {}), _view(1, {}, up=False, reason="lost")], {}, 5.0)
    assert [gpu.status for gpu in health.gpus] == [PASS, FAIL]
    assert health.problems() == ["GPU 1: GPU is down (lost): reboot"]
    assert (health.status, health.action) == (FAIL, "reboot")


def test_an_expected_gpu_not_listed_is_missing() -> None:
    health = HealthModel(expected=2).assess([_view(0, {})], None, 5.0)
    assert (health.present, health.missing, health.status, health.action) == (1, 1, FAIL, "reboot")
    assert health.problems() == ["1 of 2 GPUs missing: reboot"]
    assert HealthModel(expected=1).assess([_view(0, {})], None, 5.0).status == PASS


def test_an_xid_counts_by_its_bucket_and_is_held_for_an_hour() -> None:
    health = HealthModel()
    view = _view(0, {})
    assert health.assess([view], {"GPU-0": XidTally()}, 0.0).gpus[0].checked[0] == "pcie"  # Xids judge all
    tally = XidTally(xid={48: 1, 13: 2})
    gpu = health.assess([view], {"GPU-0": tally}, 10.0).gpus[0]
    memory, sm = gpu.status_of("mem"), gpu.status_of("sm")
    assert memory is not None and (memory.status, memory.action) == (FAIL, "reset_gpu")
    assert sm is not None and (sm.status, sm.action) == (WARN, "restart_job")
    assert health.assess([view], {"GPU-0": tally}, 10.0 + XID_HOLD_SECONDS - 1).gpus[0].status == FAIL
    assert health.assess([view], {"GPU-0": tally}, 11.0 + XID_HOLD_SECONDS).gpus[0].findings == ()
    again = XidTally(xid={48: 2, 13: 2})  # a new 48 only
    gpu = health.assess([view], {"GPU-0": again}, 20.0 + XID_HOLD_SECONDS).gpus[0]
    assert [f.reason.split(" (")[0] for f in gpu.findings] == ["Xid 48"]


def test_xid_79_is_pcie_and_an_info_xid_is_nothing() -> None:
    gpu = HealthModel().assess([_view(0, {})], {"GPU-0": XidTally(xid={79: 1, 63: 1})}, 1.0).gpus[0]
    assert [(f.subsystem, f.status, f.action) for f in gpu.findings] == [("pcie", FAIL, "reboot")]


def test_pcie_replays_warn_above_eight_a_minute() -> None:
    health = HealthModel()
    for at, replays, expected in ((0.0, 100.0, PASS), (30.0, 105.0, PASS), (55.0, 109.0, WARN), (130.0, 110.0, PASS)):
        gpu = health.assess([_view(0, {keys.PCIE_REPLAYS: replays})], None, at).gpus[0]
        assert gpu.status == expected, at


def test_nvlink_errors_in_the_last_minute_warn_and_fabric_health_fails() -> None:
    uuid = "GPU-0"
    link = model.nvlink(0, uuid, 0)
    health = HealthModel()

    def view(crc: float, fabric: float) -> DeviceView:
        return DeviceView(
            DeviceIdentity(0, uuid), True, {model.gpu(0, uuid): {keys.FABRIC_HEALTH: fabric}, link: {CRC: crc}}
        )

    assert health.assess([view(3, 1)], None, 0.0).gpus[0].status == PASS
    gpu = health.assess([view(4, 1)], None, 5.0).gpus[0]
    assert (gpu.status, gpu.checked) == (WARN, ("nvlink",))
    gpu = health.assess([view(4, 2)], None, 100.0).gpus[0]
    assert (gpu.status, gpu.action, gpu.reason) == (FAIL, "drain", "NVLink fabric unhealthy")


def test_slowdowns_warn_and_a_corrupt_inforom_warns_for_service() -> None:
    thermal = key_of(keys.CLOCK_EVENT_ACTIVE, (("reason", "hw_thermal"),))
    gpu = HealthModel().assess([_view(0, {thermal: 1, keys.INFOROM_VALID: 0})], None, 1.0).gpus[0]
    assert [(f.subsystem, f.status, f.action) for f in gpu.findings] == [
        ("thermal", WARN, "none"), ("inforom", WARN, "service"),
    ]  # fmt: skip


def test_nothing_is_known_before_the_backend_answers() -> None:
    assert not HealthModel().assess([], None, 1.0, known=False).known


def test_the_families_serve_all_by_default_and_every_judged_subsystem_in_full_detail() -> None:
    from gpu_exporter.exposition.families import health_families, self_families
    from gpu_exporter.sampling.snapshot import SelfStats

    health = HealthModel(expected=3).assess([_view(0, {keys.RECOVERY_ACTION: 2, keys.INFOROM_VALID: 1})], None, 1.0)
    lean = {
        f.name: [(s.labels.get("subsystem"), s.value) for s in f.samples]
        for f in health_families(health, subsystems=False)
    }
    full = {f.name: [(s.labels.get("subsystem"), s.value) for s in f.samples] for f in health_families(health)}
    assert lean == {"gpu_health_status": [("all", 2.0)], "gpu_health_action": [(None, 4.0)]}  # reboot
    assert full["gpu_health_status"] == [("inforom", 0.0), ("driver", 2.0), ("all", 2.0)]
    assert all(not f.samples for f in health_families(HealthModel().assess([], None, 1.0, known=False)))
    stats = SelfStats("1", "nvml", True, "", 5.0)
    own = {f.name: [s.value for s in f.samples] for f in self_families(stats, [], health)}
    assert (own["gpu_exporter_gpus_present"], own["gpu_exporter_gpus_expected"]) == ([1.0], [3.0])
    assert not {f.name: f for f in self_families(stats, [], HealthModel().assess([], None, 1.0))}[
        "gpu_exporter_gpus_expected"
    ].samples  # not set: absent, not 0
