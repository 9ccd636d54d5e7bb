"""DCGM's own health watches through the real ``gpu-exporter`` on NVIDIA's real, unmodified DCGM Python
bindings of 3.3.9, 4.4.2 and 4.6.0, out of process (the stand-in libdcgm under them, as in
tests/system/test_dcgm_releases_exporter.py; its scenario keys in tests/dcgmstandin_engine.py):

- a memory FAIL staged in the engine's health module on GPU 1 (``DCGM_FR_VOLATILE_DBE_DETECTED``) is
  served natively (``gpu_health_status``, ``gpu_health_action``: reset_gpu) and, in dcgm-exporter mode,
  as ``DCGM_EXP_GPU_HEALTH_STATUS`` with dcgm-exporter's labels and values; ``gpu-exporter check --url``
  against either exits 1 naming GPU 1. The host's fields show nothing wrong, so only the watches can
  fail it;
- a ``dcgmHealthCheck`` that does not return is counted once as
  ``gpu_exporter_sample_errors_total{kind="health_check_stalled"}`` (10 s after it started; checks
  start every 15 s, docs/health.md) while cycles keep publishing every GPU's values.

Skipped, saying why, where the bindings are not found (tests/dcgmbindings.py).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dcgmbindings import RELEASES, bindings, present, process_env
from tests.harness import Exporter, Labels, samples, scrape_until, start, value, wait_cycles

GPUS = 4
#: A host whose fields show nothing wrong (no ECC, remapping, fabric or Xid finding): whatever fails
#: comes from DCGM's health watches.
GPU = """\
gpu{i}.name = NVIDIA H100 80GB HBM3
gpu{i}.uuid = GPU-00000000-0000-0000-0000-00000000000{i}
gpu{i}.pci_bus_id = 00000000:1{i}:00.0
gpu{i}.temperature.gpu = 4{i}
"""
HOST = f"driver_version = 550.54.15\ndevice_count = {GPUS}\n" + "".join(GPU.format(i=i) for i in range(GPUS))
#: DCGM_HEALTH_WATCH_MEM, DCGM_HEALTH_RESULT_FAIL, DCGM_FR_VOLATILE_DBE_DETECTED (4).
INCIDENT = "dcgm.gpu1.health_incident = mem fail 4\n"
STALL = "dcgm.health_check_stall = 1\n"
COUNTERS = """\
# DCGM field, Prometheus type, help
DCGM_EXP_GPU_HEALTH_STATUS, gauge, GPU health by DCGM health watch.
DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
"""
ROW = "DCGM_EXP_GPU_HEALTH_STATUS"
#: A label's name in an exposition line (values here hold no quote).
LABEL = re.compile(r'(?:^|,)(\w+)="')
Parsed = dict[str, dict[Labels, float]]


class Hosts:
    """Per release, an exporter in native mode and one in dcgm-exporter mode, each on its own scenario
    file with the incident staged; :meth:`stall` stalls the native ones' checks."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.native: dict[str, Exporter] = {}
        self.compat: dict[str, Exporter] = {}
        self.scenarios: dict[str, Path] = {}
        self.stalled_at: float | None = None

    def stall(self) -> float:
        """Once, for every release at once (their waits run together): checks stall from now on."""
        if self.stalled_at is None:
            for path in self.scenarios.values():
                path.write_text(HOST + INCIDENT + STALL)
            self.stalled_at = time.monotonic()
        return self.stalled_at


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hosts]:
    state = Hosts(tmp_path_factory.mktemp("healthwatch"))
    counters = state.root / "counters.csv"
    counters.write_text(COUNTERS)
    try:
        for release in RELEASES:
            if not present(release):
                continue
            native = state.scenarios[release] = state.root / f"{release}-native.scn"
            native.write_text(HOST + INCIDENT)
            compat = state.root / f"{release}-compat.scn"
            compat.write_text(HOST + INCIDENT)
            state.native[release] = start(None, None, state.root, "--backend", "dcgm", env=process_env(release, native))
            state.compat[release] = start(
                None, None, state.root, "--backend", "dcgm", "-f", str(counters), env=process_env(release, compat)
            )
        yield state
    finally:
        for path in state.scenarios.values():
            path.write_text(HOST)  # a stalled check returns, so the exporters stop promptly
        for exporter in [*state.native.values(), *state.compat.values()]:
            exporter.stop()


def check(url: str) -> tuple[int, str]:
    """``gpu-exporter check --url``: its exit code and its one line (Node Problem Detector's protocol)."""
    done = subprocess.run([sys.executable, "-m", "gpu_exporter", "check", "--url", url, "--timeout", "5"],
                          capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    assert done.stdout.count("\n") == 1 and len(done.stdout.rstrip("\n")) <= 80, done.stdout
    return done.returncode, done.stdout.rstrip("\n")


def first_lines(text: str, gpu: str) -> dict[str, str]:
    """The first exposition line of each family for GPU ``gpu``, by metric name."""
    lines: dict[str, str] = {}
    for line in text.splitlines():
        name, _, rest = line.partition("{")
        if rest and f'gpu="{gpu}"' in rest:
            lines.setdefault(name, rest)
    return lines


def why(exporter: Exporter) -> str:
    lines = [line for line in exporter.log().splitlines() if "level=error" in line or "level=warn" in line]
    return "log:\n" + "\n".join(lines[:8])


def health_rows(parsed: Parsed, gpu: str) -> dict[str, tuple[str, float, dict[str, str]]]:
    """GPU ``gpu``'s DCGM_EXP_GPU_HEALTH_STATUS series by ``health_watch``: (code, value, labels)."""
    rows = {}
    for key, v in parsed.get(ROW, {}).items():
        labels = dict(key)
        if labels.get("gpu") == gpu:
            rows[labels["health_watch"]] = (labels["health_error_code"], v, labels)
    return rows


@pytest.mark.parametrize("release", RELEASES)
def test_a_memory_failure_the_watches_report_is_served_and_checked(hosts: Hosts, release: str) -> None:
    bindings(release)
    native, compat = hosts.native[release], hosts.compat[release]

    def failed(parsed: Parsed) -> bool:
        return value(parsed, "gpu_health_status", gpu="1", subsystem="all") == 2

    parsed = scrape_until(native, failed, timeout=30)
    assert value(parsed, "gpu_health_action", gpu="1") == 3, why(native)  # reset_gpu (health_codes.py)
    for gpu in ("0", "2", "3"):  # the incident is GPU 1's alone
        assert value(parsed, "gpu_health_status", gpu=gpu, subsystem="all") == 0, gpu
        assert value(parsed, "gpu_health_action", gpu=gpu) == 0, gpu

    def compat_failed(parsed: Parsed) -> bool:
        return health_rows(parsed, "1").get("MEM", ("", 0.0))[1] == 20

    parsed = scrape_until(compat, compat_failed, timeout=30)
    rows = health_rows(parsed, "1")
    assert rows["MEM"][:2] == ("DCGM_FR_VOLATILE_DBE_DETECTED", 20)  # DCGM_HEALTH_RESULT_FAIL
    assert rows["ALL"][:2] == ("DCGM_FR_VOLATILE_DBE_DETECTED", 20)
    assert {watch: row[:2] for watch, row in rows.items() if watch not in ("MEM", "ALL")} == {
        watch: ("DCGM_FR_OK", 0) for watch in rows if watch not in ("MEM", "ALL")
    }
    # dcgm-exporter's labels, as this exporter serves them on the GPU's other rows, then the two of the row
    temperature = next(dict(k) for k in parsed["DCGM_FI_DEV_GPU_TEMP"] if dict(k).get("gpu") == "1")
    own = {"health_error_code": "DCGM_FR_VOLATILE_DBE_DETECTED", "health_watch": "MEM"}
    assert rows["MEM"][2] == {**temperature, **own}
    text = compat.metrics()  # and in its order: the GPU's labels, then health_error_code, health_watch
    order = {name: LABEL.findall(line) for name, line in first_lines(text, "1").items()}
    assert order[ROW] == [*order["DCGM_FI_DEV_GPU_TEMP"], "health_error_code", "health_watch"], order
    assert {row[:2] for row in health_rows(parsed, "0").values()} == {("DCGM_FR_OK", 0)}

    for exporter in (native, compat):
        code, line = check(exporter.url)
        assert code == 1, line
        assert line.startswith("GPU 1: ") and "mem" in line and line.endswith("reset_gpu"), line


@pytest.mark.parametrize("release", RELEASES)
def test_a_stalled_health_check_is_counted_while_sampling_goes_on(hosts: Hosts, release: str) -> None:
    bindings(release)
    exporter = hosts.native[release]
    stalled_at = hosts.stall()

    def counted(parsed: Parsed) -> bool:
        return (value(parsed, "gpu_exporter_sample_errors_total", kind="health_check_stalled") or 0) >= 1

    # the next check starts at most 15 s after the last, and is a stall 10 s later
    scrape_until(exporter, counted, timeout=round(max(1.0, stalled_at + 60 - time.monotonic())))
    # still stalled: cycles keep publishing every GPU's values, and the one stall is counted once
    parsed = samples(wait_cycles(exporter, 3, timeout=30))
    for gpu in range(GPUS):
        assert value(parsed, "gpu_up", gpu=str(gpu)) == 1, f"GPU {gpu}: " + why(exporter)
        assert value(parsed, "gpu_temperature_celsius", gpu=str(gpu)) == 40 + gpu
    assert value(parsed, "gpu_exporter_sample_errors_total", kind="health_check_stalled") == 1
    assert "dcgmHealthCheck has not returned" in exporter.log()
