"""The NVLink port transmit-wait counter (nvmlDeviceReadPRMCounters_v1 counter 201, DCGM 1509) out of
process on the C fake and the simulator: per link natively as gpu_nvlink_port_transmit_wait_total
(nvlink collector), and as the link-entity field DCGM_FI_DEV_NVLINK_PPCNT_IBPC_PORT_XMIT_WAIT with a
counters CSV (and the nvlink collector on, as the other link-entity fields); read with one call per
GPU for all its links; a link without the counter is absent, and a GPU whose driver answers
NOT_SUPPORTED for the call is asked once, never again."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from tests.harness import SCENARIOS, samples, start, value

CSV = "DCGM_FI_DEV_NVLINK_PPCNT_IBPC_PORT_XMIT_WAIT, counter, NVLink port transmit wait.\n"
NAME = "gpu_nvlink_port_transmit_wait_total"
COMPAT = "DCGM_FI_DEV_NVLINK_PPCNT_IBPC_PORT_XMIT_WAIT"


@pytest.mark.parametrize("backend", ["fake", "simulate"])
def test_native_and_link_entity_values(backend: str, fakenvml_dir: Path, tmp_path: Path) -> None:
    scenario = SCENARIOS / "h100x4.scn"
    csv = tmp_path / "fields.csv"
    csv.write_text(CSV)
    args = ("--collect-interval", "1h")
    if backend == "fake":
        native = start(fakenvml_dir, scenario, tmp_path, "--collector.nvlink", *args)
        compat = start(fakenvml_dir, scenario, tmp_path, "-f", str(csv), "--collector.nvlink", *args)
    else:
        env = {"LD_LIBRARY_PATH": ""}
        native = start(None, None, tmp_path, "--simulate", str(scenario), "--collector.nvlink", *args, env=env)
        compat = start(
            None, None, tmp_path, "--simulate", str(scenario), "-f", str(csv), "--collector.nvlink", *args, env=env
        )
    try:
        parsed, exposition = samples(native.metrics()), compat.metrics()
    finally:
        native.stop()
        compat.stop()
    assert value(parsed, NAME, gpu="0", nvlink="0") == 4096
    assert value(parsed, NAME, gpu="0", nvlink="1") is None  # the entry's NOT_SUPPORTED: absent, never 0
    assert value(parsed, NAME, gpu="1", nvlink="0") is None  # the call's NOT_SUPPORTED
    dcgm = samples(exposition)
    links = {(dict(key)["gpu"], dict(key)["nvlink"]): number for key, number in dcgm[f"{COMPAT}_total"].items()}
    assert links == {("0", "0"): 4096}  # one series per link, as DCGM's link entities
    assert any(line.startswith(COMPAT + "{") and line.endswith(" 4096") for line in exposition.splitlines())


def test_one_call_per_gpu_and_unsupported_asked_once(fakenvml_dir: Path, tmp_path: Path) -> None:
    exporter = start(
        fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "--collect-interval", "1s", "--collector.nvlink",
        trace=True, wait_for="/readyz",
    )  # fmt: skip
    try:
        time.sleep(3.5)
        assert exporter.trace_path is not None
        lines = exporter.trace_path.read_text().splitlines()
    finally:
        exporter.stop()
    prm = Counter(line.split()[-1] for line in lines if "nvmlDeviceReadPRMCounters_v1" in line)
    cycles = sum("nvmlDeviceGetMemoryInfo_v2" in line and line.split()[-1] == "gpu0" for line in lines)
    assert cycles >= 3, lines[-5:]
    assert prm.get("gpu1") == 1, prm  # NOT_SUPPORTED once, then remembered for both its links
    assert prm["gpu0"] == 1, (prm, cycles)  # one call for both links of GPU 0, every 10 cycles
    assert "gpu2" not in prm and "gpu3" not in prm, prm  # no NVLinks
