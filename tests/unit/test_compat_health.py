"""dcgm-exporter's DCGM_EXP_GPU_HEALTH_STATUS from the health model, in process: a counters row that asks
for it gets one series per judged health watch and one for ALL per GPU, valued by DCGM's health result
(0, 10, 20) with the worst incident's DCGM_FR_* name; a lost GPU keeps its series."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from gpu_exporter import model
from gpu_exporter.backends.base import DeviceIdentity, HostIdentity
from gpu_exporter.catalogue import METRICS, keys
from gpu_exporter.compat.counters import Counter
from gpu_exporter.compat.plan import plan
from gpu_exporter.compat.render import compat_renderer
from gpu_exporter.sampling.health import HealthModel
from gpu_exporter.sampling.snapshot import DeviceView, Frame, SelfStats

ROW = Counter("DCGM_EXP_GPU_HEALTH_STATUS", "gauge", "GPU health by DCGM health watch", 1)


def _device(index: int, values: dict[str, float], up: bool = True) -> DeviceView:
    uuid = f"GPU-{index}"
    identity = DeviceIdentity(index, uuid, "NVIDIA H100", f"00000000:1{index}:00.0")
    return DeviceView(identity, up, {model.gpu(index, uuid): values}, down_reason="" if up else "lost")


def _series(devices: list[DeviceView]) -> dict[tuple[str, str, str], float]:
    compat = plan([ROW], METRICS, "nvml", True, "node-7", "Hostname")
    health = HealthModel().assess(devices, None, 1.0)
    stats = SelfStats("1", "nvml", True, "", 1.0)
    frame = Frame(HostIdentity("550.54.15", "12.4"), tuple(devices), None, {}, stats, 1.0, health=health)
    text = compat_renderer(compat)(frame).text.decode()
    (family,) = [f for f in text_string_to_metric_families(text) if f.name == ROW.field]
    return {(s.labels["gpu"], s.labels["health_watch"], s.labels["health_error_code"]): s.value for s in family.samples}


def test_one_series_per_judged_watch_and_all_valued_by_dcgms_result() -> None:
    series = _series(
        [_device(0, {keys.INFOROM_VALID: 1}), _device(1, {keys.RECOVERY_ACTION: 1, keys.INFOROM_VALID: 0})]
    )
    assert series == {
        ("0", "INFOROM", "DCGM_FR_OK"): 0.0,
        ("0", "ALL", "DCGM_FR_OK"): 0.0,
        ("1", "INFOROM", "DCGM_FR_CORRUPT_INFOROM"): 10.0,
        ("1", "DRIVER", "DCGM_FR_GPU_RECOVERY_RESET"): 20.0,
        ("1", "ALL", "DCGM_FR_GPU_RECOVERY_RESET"): 20.0,
    }


def test_a_lost_gpu_keeps_its_series_and_fails() -> None:
    series = _series([_device(0, {}), _device(1, {}, up=False)])
    assert series[("1", "ALL", "DCGM_FR_FALLEN_OFF_BUS")] == 20.0
    assert series[("1", "DRIVER", "DCGM_FR_FALLEN_OFF_BUS")] == 20.0
    assert series[("0", "ALL", "DCGM_FR_OK")] == 0.0


def test_served_on_the_dcgm_backend_from_what_dcgm_reads() -> None:
    """The DCGM backend (on the in-process DCGM double, tests/dcgmfake.py) feeds the same model: the
    4-GPU scenario's GPU 3 has unrepairable memory and GPU 2 an unhealthy fabric."""
    from gpu_exporter.assemble import bare_sampler
    from gpu_exporter.backends.dcgm import DcgmBackend
    from gpu_exporter.catalogue import DEFAULT_COLLECTORS, enabled_specs
    from tests.dcgmfake import from_scenario
    from tests.harness import SCENARIOS

    specs = enabled_specs(DEFAULT_COLLECTORS)
    compat = plan([ROW], specs, "dcgm", True, "node-7", "Hostname")
    fake = from_scenario((SCENARIOS / "h100x4.scn").read_text())
    sampler = bare_sampler(DcgmBackend(lambda: fake, specs, 3600.0), specs, 3600.0, "test", compat=compat)
    try:
        text = sampler.run_cycle().rendered.text.decode()
    finally:
        sampler.stop()
    (family,) = [f for f in text_string_to_metric_families(text) if f.name == ROW.field]
    series = {
        (s.labels["gpu"], s.labels["health_watch"]): (s.labels["health_error_code"], s.value) for s in family.samples
    }
    assert series[("3", "MEM")] == ("DCGM_FR_UNCORRECTABLE_ROW_REMAP_LIMIT", 20.0)
    assert series[("2", "NVLINK")] == ("DCGM_FR_FABRIC_PROBE_STATE", 20.0)
    assert series[("0", "ALL")] == ("DCGM_FR_OK", 0.0)
    assert {watch for gpu, watch in series if gpu == "0"} >= {"PCIE", "NVLINK", "MEM", "SM", "DRIVER", "ALL"}
