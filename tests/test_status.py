"""The status page and its JSON, out of process on the fake NVML with a fake procfs: values exact
against the scenario, problems in words, processes with user and memory, Xid with its description,
every name escaped; then the page in headless Chromium (DOM after the script ran, and a screenshot).

Regenerate the screenshot of docs/status-page.md with ``UPDATE_SCREENSHOT=1 .venv/bin/pytest tests/test_status.py``.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import REPO, SCENARIOS, Exporter, start

GIB = 1024**3
HOSTILE = "<img src=x onerror=alert(1)>"
PROCESSES = """
gpu0.process.0.pid = 4242
gpu0.process.0.used_memory = 8589934592
gpu0.process.0.sm_util = 37
gpu0.process.1.pid = 4343
gpu0.process.1.used_memory = 1073741824
gpu3.process.0.pid = 5151
gpu3.process.0.used_memory = 4294967296
gpu3.process.1.pid = 6161
gpu3.process.1.used_memory = 2147483648
gpu3.xid = 13@0.2,79@2.5
"""
SCREENSHOT = REPO / "docs" / "status-page.png"


def _procfs(root: Path) -> Path:
    """4242 python3 (root, Slurm job 77), 5151 trainer (uid 4000, no user name), 6161 a hostile name (uid 0); 4343
    has no entry."""
    for pid, name, uid, cgroup in (
        (4242, "python3", 0, "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n"),
        (5151, "trainer", 4000, "0::/user.slice/user-1000.slice/session-3.scope\n"),
        (6161, HOSTILE, 0, "0::/user.slice/user-0.slice/session-4.scope\n"),
    ):
        entry = root / str(pid)
        entry.mkdir(parents=True)
        (entry / "cgroup").write_text(cgroup)
        (entry / "comm").write_text(name + "\n")
        (entry / "status").write_text(f"Name:\t{name}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
        (entry / "stat").write_text(f"{pid} ({name}) S " + " ".join(["1"] * 19) + " 123456 0 0\n")
    return root


@pytest.fixture(scope="module")
def exporter(fakenvml_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exporter]:
    tmp = tmp_path_factory.mktemp("status")
    scenario = tmp / "host.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + PROCESSES)
    running = start(
        fakenvml_dir, scenario, tmp, "--collect-interval", "1s", "--path.procfs", str(_procfs(tmp / "proc")),
        env={"NODE_NAME": "node-7"},
    )  # fmt: skip
    try:
        yield running
    finally:
        running.stop()


def _status(exporter: Exporter) -> dict[str, Any]:
    """The JSON once both Xids have arrived in separate cycles (the second at 2.5 s)."""
    deadline = time.monotonic() + 20
    while True:
        response = exporter.get("/api/v1/status")
        assert response.status_code == 200 and response.headers["content-type"] == "application/json"
        body: dict[str, Any] = response.json()
        if body["gpus"][3]["xid"]["total"] == 2 or time.monotonic() > deadline:
            return body
        time.sleep(0.2)


def test_json_values_exact_against_the_scenario(exporter: Exporter) -> None:
    body = _status(exporter)
    assert body["hostname"] == "node-7" and body["backend"] == "nvml" and body["backend_up"] is True
    assert body["driver_version"] == "550.54.15" and body["cuda_version"] == "12.4"
    assert [card["title"] for card in body["gpus"]] == ["GPU 0", "GPU 1", "GPU 2", "GPU 3"]
    gpu0 = body["gpus"][0]
    expected = {
        "uuid": "GPU-4a1e0c2d-0b7f-4c3a-9e21-5d8f6a0b1c00", "name": "NVIDIA H100 80GB HBM3", "state": "up",
        "utilization_ratio": 0.97, "memory_used_bytes": 10737418240, "memory_total_bytes": 85520809984,
        "temperature_celsius": 71, "temperature_slowdown_celsius": 90, "power_watts": 612.345,
        "power_limit_watts": 700, "sm_clock_hertz": 1980e6, "sm_clock_max_hertz": 1980e6,
        "memory_clock_hertz": 2619e6, "memory_clock_max_hertz": 2619e6, "pcie_generation": 5,
        "pcie_generation_max": 5, "pcie_width": 16, "pcie_width_max": 16, "clock_events": [], "ecc_enabled": 1,
        "ecc_uncorrected_volatile": 0, "problems": [], "allocations": ["job 77"],
    }  # fmt: skip
    assert {key: gpu0[key] for key in expected} == expected
    assert gpu0["xid"] == {"total": 0, "counts": {}, "last": None, "last_at": None, "description": ""}
    assert [(p["pid"], p["name"], p["user"], p["memory_used_bytes"], p["job"]) for p in gpu0["processes"]] == [
        ("4242", "python3", "root", 8 * GIB, "77"),
        ("4343", "", "", 1 * GIB, ""),  # no /proc entry: names absent, never guessed
    ]
    gpu3 = body["gpus"][3]
    assert gpu3["clock_events"] == ["power cap", "HW thermal slowdown"]
    assert gpu3["xid"]["counts"] == {"13": 1, "79": 1} and gpu3["xid"]["last"] == 79
    assert gpu3["xid"]["description"].startswith("GPU has fallen off the bus")
    assert gpu3["problems"] == [
        "hot: 83 °C, slowdown at 90 °C",
        "throttled: power cap, HW thermal slowdown",
        "degraded PCIe link: x8 of x16",
        "degraded PCIe link: Gen4 of Gen5 while busy",
        "health fail: memory has an unrepairable error; action: service",
        "Xid 79: " + gpu3["xid"]["description"],
    ]
    # the health model: the worst finding names the action; Xid 79 (pcie, reboot) and Xid 13 (sm) count too
    assert (gpu3["health"]["status"], gpu3["health"]["action"]) == ("fail", "service")
    assert {(f["subsystem"], f["action"]) for f in gpu3["health"]["findings"]} >= {
        ("pcie", "reboot"),
        ("sm", "restart_job"),
    }
    assert gpu0["health"]["status"] == "pass" and body["health"]["status"] == "fail"
    assert body["health"]["problems"] == [  # worst first
        "GPU 3: memory has an unrepairable error: service",
        "GPU 2: NVLink fabric unhealthy: drain",
    ]
    assert [(p["name"], p["user"]) for p in gpu3["processes"]] == [("trainer", "4000"), (HOSTILE, "root")]
    # GPU 2 idles at Gen1 (power saving): shown, not a problem; its only problem is its fabric's health
    problems = ["health fail: NVLink fabric unhealthy; action: drain"]
    assert body["gpus"][2]["pcie_generation"] == 1 and body["gpus"][2]["problems"] == problems
    assert body["cards_with_problems"] == 2


def test_history_is_kept_and_bounded(exporter: Exporter) -> None:
    history = _status(exporter)["gpus"][3]["history"]
    assert set(history) == {"utilization_ratio", "power_watts", "temperature_celsius"}
    assert 2 <= len(history["utilization_ratio"]) <= 120
    assert set(history["utilization_ratio"]) == {1.0} and set(history["temperature_celsius"]) == {83}


def test_page_without_javascript_has_every_card_and_escapes_names(exporter: Exporter) -> None:
    _status(exporter)
    response = exporter.get("/")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    text = response.text
    assert text.count("<section class='card") == 4 and text.count("<section class='card problem'") == 2
    assert "<img" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    for shown in ("97 %", "10.0 / 79.6 GiB", "71 °C (slowdown 90 °C)", "612 W / 700 W", "1980 / 1980 MHz",
                  "power cap, HW thermal slowdown", "Gen4/5 x8/16", "hot: 83 °C, slowdown at 90 °C",
                  "job 77", "python3", "8.0 GiB", "<polyline", "2 of 4 need a look",
                  "health fail, action service"):  # fmt: skip
        assert shown in text, shown
    assert "http://" not in text and "https://" not in text  # no external assets
    fragment = exporter.get("/?fragment=cards").text
    assert fragment.startswith("<section") and fragment.count("<section class='card") == 4


def _chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        pytest.fail("chromium not found: scripts/test installs Debian's chromium package", pytrace=False)
    return found


def _chromium_run(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        _chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}", *args,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=90, check=False)


def _first_pixel(path: Path) -> tuple[int, int, int]:
    """The colour of the top-left pixel of an 8-bit RGB or RGBA PNG (the page background)."""
    data = path.read_bytes()
    chunks, at = b"", 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind = data[at + 4 : at + 8]
        if kind == b"IHDR":
            depth, colour = data[at + 16], data[at + 17]
        elif kind == b"IDAT":
            chunks += data[at + 8 : at + 8 + length]
        at += 12 + length
    assert depth == 8 and colour in (2, 6), (depth, colour)
    row = zlib.decompressobj().decompress(chunks, 16)
    assert row[0] in (0, 1, 3, 4), row[0]  # no filter, Sub, Average or Paeth: the first pixel is as stored
    r, g, b = row[1], row[2], row[3]
    return (r, g, b)


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_chromium_renders_live_values_and_a_screenshot(exporter: Exporter, tmp_path: Path) -> None:
    _status(exporter)
    # --virtual-time-budget lets the page's timer fire, so the DOM shows cards swapped in by the script
    dom = _chromium_run(tmp_path / "profile-dom", "--virtual-time-budget=6000", "--dump-dom", exporter.url + "/")
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert "data-updated=" in html, "the page's script did not swap in fresh cards"
    assert html.count('class="card') == 4 and html.count('class="card problem"') == 2
    for shown in ("97 %", "612 W / 700 W", "Xid 79: GPU has fallen off the bus", "trainer", "Gen4/5 x8/16"):
        assert shown in html, shown
    assert "<img" not in html  # the hostile process name stayed text after the swap
    shot = tmp_path / "status.png"
    size = "--window-size=1600,1000"
    run = _chromium_run(tmp_path / "profile-shot", size, f"--screenshot={shot}", exporter.url + "/")
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    assert _png_size(shot) == (1600, 1000) and shot.stat().st_size > 30_000  # a blank page compresses to ~5 kB
    assert _first_pixel(shot) == (0xF6, 0xF7, 0xF9)  # the light scheme's background
    dark = tmp_path / "dark.png"
    run = _chromium_run(
        tmp_path / "profile-dark", size, "--force-dark-mode", f"--screenshot={dark}", exporter.url + "/"
    )
    assert run.returncode == 0 and dark.exists(), run.stderr[-2000:]
    assert _first_pixel(dark) == (0x12, 0x14, 0x16)  # prefers-color-scheme: dark
    if os.environ.get("UPDATE_SCREENSHOT") == "1":
        SCREENSHOT.parent.mkdir(exist_ok=True)
        shutil.copyfile(shot, SCREENSHOT)
    assert SCREENSHOT.exists(), f"{SCREENSHOT} missing: run UPDATE_SCREENSHOT=1 .venv/bin/pytest tests/test_status.py"
