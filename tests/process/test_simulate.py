"""``--simulate``: the real exporter as a process with no fake library anywhere (empty
LD_LIBRARY_PATH, no FAKE_NVML_* variables), scraped over HTTP: each built-in scenario serves what it
promises, a scenario file (re-read when it changes), bad input, the simulated marks on every output,
and parity with the C fake: the same time-independent scenario gives the same exposition through
both (this is what keeps the two implementations of the scenario format in step)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness import REPO, SCENARIOS, Exporter, samples, scrape_until, stable, start, value

NO_FAKE = {"LD_LIBRARY_PATH": ""}
COUNTERS = str(REPO / "tests" / "fixtures" / "default-counters.csv")
BUILTIN = REPO / "src" / "gpu_exporter" / "simulate" / "scenarios"


def simulate(tmp_path: Path, scenario: str, *args: str) -> Exporter:
    return start(None, None, tmp_path, "--simulate", scenario, *args, env=NO_FAKE)


def _gpus(parsed: dict[str, dict[frozenset[tuple[str, str]], float]], metric: str) -> dict[str, float]:
    return {
        dict(labels)["gpu"]: v for labels, v in parsed.get(metric, {}).items() if "gpu_instance" not in dict(labels)
    }


def test_default_is_eight_busy_h100s_marked_simulated(tmp_path: Path) -> None:
    exporter = start(None, None, tmp_path, "--simulate", env=NO_FAKE)  # the flag alone: default
    try:
        first = samples(exporter.metrics())
        time.sleep(2.5)
        second = samples(exporter.metrics())
        page = exporter.get("/").text
        api = exporter.get("/api/v1/status").json()
    finally:
        exporter.stop()
    assert _gpus(first, "gpu_up") == {str(i): 1.0 for i in range(8)}
    [(labels, _)] = first["gpu_exporter_backend_info"].items()
    assert dict(labels)["reason"].startswith("simulated: --simulate default; no GPU is read")
    # the load moves: GPU 5 seesaws every second (92, 4, 88, 3, 95, 6 %), so reads 1.5 s or more apart differ
    assert _gpus(first, "gpu_utilization_ratio")["5"] != _gpus(second, "gpu_utilization_ratio")["5"]
    # GPU 3 is hot and throttled (power cap and HW thermal slowdown)
    assert value(first, "gpu_temperature_celsius", gpu="3") >= 86  # type: ignore[operator]
    assert value(first, "gpu_clock_event_active", gpu="3", reason="power_cap") == 1
    assert value(first, "gpu_clock_event_active", gpu="3", reason="hw_thermal") == 1
    # GPU 2 is shared by processes of two users (the simulated /proc shipped with the scenario)
    shared = [dict(labels) for labels in first["gpu_processes"] if dict(labels)["gpu"] == "2"]
    assert {p["process"] for p in shared} == {"python3", "ipykernel"}
    assert {p["user"] for p in shared} == {"asha", "bruno"}  # named by the built-in's passwd, not this host's
    assert "SIMULATED host: --simulate default" in page
    assert api["simulated"].startswith("--simulate default") and len(api["gpus"]) == 8


def test_default_sends_an_xid_every_four_minutes_and_the_library_delivers_it(tmp_path: Path) -> None:
    """Waiting minutes is not a test: the scenario's Xid list is checked, and the simulated library
    (the same code the exporter runs) delivers the first one once its time has come."""
    text = (BUILTIN / "default.scn").read_text()
    [line] = [line for line in text.splitlines() if ".xid = " in line]
    assert line.startswith("gpu6.xid = ")
    times = [float(item.split("@")[1]) for item in line.split("=", 1)[1].split(",")]
    assert times[0] < 60 and {round(b - a) for a, b in zip(times, times[1:], strict=False)} == {240}
    code = """
import time, pynvml as n
from gpu_exporter.simulate import install
from gpu_exporter.simulate.builtins import resolve
lib = install(resolve("default")); n.nvmlInit()
lib.t0 -= 50  # 50 s since init
s = n.nvmlEventSetCreate(); h = n.nvmlDeviceGetHandleByIndex(6)
n.nvmlDeviceRegisterEvents(h, n.nvmlEventTypeXidCriticalError, s)
e = n.nvmlEventSetWait_v2(s, 1000)
print(e.eventData, n.nvmlDeviceGetIndex(e.device))
"""
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **NO_FAKE}, capture_output=True,
                         text=True, timeout=30, check=True)  # fmt: skip
    assert out.stdout.split() == ["13", "6"]


def test_mig_and_old_gpu_builtins(tmp_path: Path) -> None:
    exporter = simulate(tmp_path, "mig")
    try:
        mig = samples(exporter.metrics())
    finally:
        exporter.stop()
    assert {dict(labels)["profile"] for labels in mig["gpu_mig_info"]} == {"3g.20gb", "2g.10gb", "1g.5gb"}
    assert {dict(labels)["gpu_instance"] for labels in mig["gpu_processes"]} == {"1", "5"}
    exporter = simulate(tmp_path, "old-gpu")
    try:
        old = samples(exporter.metrics())
    finally:
        exporter.stop()
    assert _gpus(old, "gpu_up") == {"0": 1.0}
    assert "gpu_energy_joules_total" not in old  # not supported on that driver: absent, not 0
    [(labels, _)] = old["gpu_info"].items()
    assert dict(labels)["name"] == "Tesla K80"


def test_lost_gpu_builtin_loses_gpu_2_with_an_xid_79(tmp_path: Path) -> None:
    """The built-in with its loss (and the Xid 79 at that instant) moved from 30 s to 1 s, so the test
    need not wait half a minute: the Xid is counted although the GPU already answers as lost."""
    text = (BUILTIN / "lost-gpu.scn").read_text()
    assert "gpu2.xid = 79@30" in text and "gpu2.lost_after = 30" in text
    scenario = tmp_path / "lost.scn"
    scenario.write_text(text.replace("79@30", "79@1").replace("lost_after = 30", "lost_after = 1"))
    exporter = simulate(tmp_path, str(scenario), "--collect-interval", "200ms")
    try:
        deadline = time.monotonic() + 15
        parsed = samples(exporter.metrics())
        while _gpus(parsed, "gpu_up").get("2") != 0 or value(parsed, "gpu_xid_errors_total", gpu="2", xid="79") != 1:
            assert time.monotonic() < deadline, parsed.get("gpu_xid_errors_total")
            time.sleep(0.1)
            parsed = samples(exporter.metrics())
    finally:
        exporter.stop()
    assert _gpus(parsed, "gpu_up") == {"0": 1.0, "1": 1.0, "2": 0.0, "3": 1.0}
    assert value(parsed, "gpu_xid_errors_total", gpu="2", xid="79") == 1  # counted, and kept while it is lost
    assert value(parsed, "gpu_power_watts", gpu="2") is None  # its measured values go


def test_scenario_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    scenario = tmp_path / "host.scn"
    scenario.write_text("gpu0.name = Simulated GPU\ngpu0.temperature.gpu = 40\n")
    exporter = simulate(tmp_path, str(scenario), "--collect-interval", "200ms")
    try:
        assert value(samples(exporter.metrics()), "gpu_temperature_celsius", gpu="0") == 40
        (tmp_path / "next.scn").write_text("gpu0.name = Simulated GPU\ngpu0.temperature.gpu = 77\n")
        os.replace(tmp_path / "next.scn", scenario)
        deadline = time.monotonic() + 10
        while value(samples(exporter.metrics()), "gpu_temperature_celsius", gpu="0") != 77:
            assert time.monotonic() < deadline, "the rewritten scenario was not read again"
            time.sleep(0.2)
    finally:
        exporter.stop()


def test_start_up_log_has_at_most_one_short_unsupported_line_per_gpu(tmp_path: Path) -> None:
    """The default host's H100s lack many values (fans, power smoothing, ...): the log says so in one
    short line per GPU, plus a few general lines, and nothing more over the next cycles (it printed 29
    lines and 25 KB: a 3.9 KB list per GPU, 16 lines about sample buffers); which values: the status
    page (and the debug log). A few seconds."""
    exporter = start(None, None, tmp_path, "--simulate", "--collect-interval", "200ms", env=NO_FAKE)
    try:
        deadline = time.monotonic() + 15
        while exporter.log().count("not supported here") < 8:  # the event: every GPU's first read
            assert time.monotonic() < deadline, exporter.log()
            time.sleep(0.1)
        stamps: set[float | None] = set()
        while len(stamps) < 4:  # three more cycles
            stamps.add(value(samples(exporter.metrics()), "gpu_exporter_last_sample_timestamp_seconds"))
            assert time.monotonic() < deadline + 10
            time.sleep(0.05)
        status = exporter.get("/api/v1/status").json()
    finally:
        exporter.stop()
    log = [line for line in exporter.log().splitlines() if "shutting down" not in line and "exiting" not in line]
    lines = [line for line in log if "not supported" in line]
    assert len(lines) == 8, lines
    assert {line.split("GPU ")[1].split(" ")[0] for line in lines} == {str(i) for i in range(8)}
    assert len(log) <= 8 + 4 and all(len(line) <= 300 for line in log), log  # with its ts=, level= and logger=
    assert "gpu_fan_speed_ratio" not in exporter.log()  # the names are on the page
    assert all("gpu_fan_speed_ratio" in card["unsupported"] for card in status["gpus"])


def test_scenario_file_processes_are_the_scenarios_never_this_hosts(tmp_path: Path) -> None:
    """pid 1 (this host's init, whatever runs it) and this test's own pid: the scenario's names only,
    no owner, on /metrics, the status API and a snapshot; a pid the scenario names nothing for has an
    empty name, not this host's. A few seconds."""
    own = os.getpid()  # a live process of this host, owned by the user running the test
    scenario = tmp_path / "host.scn"
    scenario.write_text(
        "gpu0.name = Simulated GPU\ngpu0.process.0.pid = 1\ngpu0.process.0.name = scenario-init\n"
        f"gpu0.process.0.used_memory = 1048576\ngpu1.name = Simulated GPU\ngpu1.process.0.pid = {own}\n"
    )
    exporter = simulate(tmp_path, str(scenario), "--collect-interval", "200ms")
    try:  # both GPUs read, with their processes
        parsed = scrape_until(exporter, lambda p: len(p.get("gpu_processes", {})) == 2)
        api = exporter.get("/api/v1/status").text
    finally:
        exporter.stop()
    processes = {dict(labels)["pid"]: dict(labels) for labels in parsed["gpu_processes"]}
    assert (processes["1"]["process"], processes["1"]["user"]) == ("scenario-init", "")
    assert (processes[str(own)]["process"], processes[str(own)]["user"]) == ("", "")
    host_names = {Path(f"/proc/{pid}/comm").read_text().strip() for pid in (1, own)}
    assert not [name for name in host_names if f'"{name}"' in api], api  # a JSON string of its own
    command = [sys.executable, "-m", "gpu_exporter", "snapshot", "--simulate", str(scenario)]
    snap = subprocess.run(
        command, env={**os.environ, **NO_FAKE}, capture_output=True, text=True, timeout=30, check=True
    )
    assert "scenario-init" in snap.stdout
    assert not [name for name in host_names if f"{name}/" in snap.stdout], snap.stdout  # name/pid(user,memory)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--simulate", "nope"], "--simulate='nope' is not allowed: use a built-in scenario (default, mig, "),
        (["--simulate", "/etc/hostname"], "line 1 has no '='"),
        (["--simulate", "--backend", "dcgm"], "--simulate and --backend=dcgm exclude each other"),
        (["snapshot", "--simulate", "nope"], "is not allowed: use a built-in scenario"),
        (["doctor", "--simulate"], "run it without --simulate"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "gpu_exporter", *args], env={**os.environ, **NO_FAKE},
                          capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_snapshot_says_simulated(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "gpu_exporter", "snapshot", "--simulate", "--no-color"]
    env = {**os.environ, **NO_FAKE}
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "SIMULATED host: --simulate default; no GPU is read, every value comes from the scenario"
    assert sum(1 for line in lines if re.match(r"\[\d\] NVIDIA H100 80GB HBM3 ", line)) == 8
    assert "! throttled: power cap, HW thermal slowdown" in proc.stdout


PARITY = {
    "h100x4": ("h100x4", ()),
    "h100x4-dcgm-exporter": ("h100x4", ("-f", COUNTERS)),
    "mig": ("mig", ()),
    "old_gpu": ("old_gpu", ()),
}
_REASON = re.compile(r'^(gpu_exporter_backend_info\{backend="nvml",reason=")[^"]*(".*)$', re.MULTILINE)


def _one_cycle(fakenvml_dir: Path | None, tmp_path: Path, scenario: Path, flags: tuple[str, ...]) -> str:
    if fakenvml_dir is None:
        exporter = start(None, None, tmp_path, "--simulate", str(scenario), "--collect-interval", "1h", *flags,
                         env={**NO_FAKE, "NODE_NAME": "parity-node"})  # fmt: skip
    else:
        exporter = start(fakenvml_dir, scenario, tmp_path, "--backend", "nvml", "--collect-interval", "1h", *flags,
                         env={"NODE_NAME": "parity-node"})  # fmt: skip
    try:
        return _REASON.sub(r"\1<reason>\2", stable(exporter.metrics()))
    finally:
        exporter.stop()


@pytest.mark.parametrize("name", tuple(PARITY))
def test_parity_with_the_c_fake(fakenvml_dir: Path, tmp_path: Path, name: str) -> None:
    scenario, flags = PARITY[name]
    fake = _one_cycle(fakenvml_dir, tmp_path, SCENARIOS / f"{scenario}.scn", flags)
    simulated = _one_cycle(None, tmp_path, SCENARIOS / f"{scenario}.scn", flags)
    assert simulated == fake


def test_wheel_ships_the_builtin_scenarios(tmp_path: Path) -> None:
    """pyproject's package data: every built-in and its /proc tree is in the wheel."""
    try:
        import setuptools  # noqa: F401  # the build backend, needed to build the wheel here
    except ImportError:
        pytest.skip("setuptools is not installed in this environment")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path)]
    proc = subprocess.run([*command, str(REPO)], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    [wheel] = tmp_path.glob("gpu_exporter-*.whl")
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    for scenario in ("default", "mig", "old-gpu", "lost-gpu"):
        assert f"gpu_exporter/simulate/scenarios/{scenario}.scn" in names
    assert "gpu_exporter/simulate/scenarios/default.proc/5202/status" in names


def test_status_page_banner_names_the_scenario_escaped(tmp_path: Path) -> None:
    scenario = tmp_path / "<b>host.scn"
    scenario.write_text("gpu0.name = Simulated GPU\n")
    exporter = simulate(tmp_path, str(scenario))
    try:
        page = exporter.get("/").text
        fragment = exporter.get("/?fragment=cards")
    finally:
        exporter.stop()
    assert f"<p class='simulated' role='alert'>SIMULATED host: --simulate {tmp_path}/&lt;b&gt;host.scn; no GPU" in page
    assert "<b>host" not in page and fragment.status_code == 200
