"""What a new user meets in the first minutes, out of process: counters that exist from the start,
the top-level help, flags before a subcommand, the snapshot's and doctor's words. Each test takes
a few seconds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.harness import SCENARIOS, samples, start, value
from tests.process.test_faults import wait_for


def test_error_and_invalid_value_counters_start_at_zero(fakenvml_dir: Path, tmp_path: Path) -> None:
    """Their dashboard panels said "No data" until the first event: counters exist at 0 from the start."""
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path)
    try:
        parsed = samples(exporter.metrics())
    finally:
        exporter.stop()
    for kind in ("exception", "timeout", "unknown"):
        assert value(parsed, "gpu_exporter_sample_errors_total", kind=kind) == 0, kind
    for field in ("gpu_temperature_celsius", "gpu_utilization_ratio", "gpu_memory_used_bytes", "gpu_power_watts"):
        assert value(parsed, "gpu_exporter_invalid_values_total", field=field) == 0, field


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LD_LIBRARY_PATH": ""}
    command = [sys.executable, "-m", "gpu_exporter", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


def test_help_names_the_subcommands() -> None:
    out = _run("--help").stdout
    assert "gpu-exporter snapshot" in out and "gpu-exporter doctor" in out


def test_flags_may_come_before_the_subcommand() -> None:
    """``gpu-exporter --simulate mig snapshot`` failed with "unrecognized arguments"."""
    before = _run("--simulate", "mig", "--no-collector.processes", "snapshot", "--no-color")
    after = _run("snapshot", "--simulate", "mig", "--no-collector.processes", "--no-color")
    assert before.returncode == 0, before.stderr
    assert "SIMULATED host: --simulate mig" in before.stdout and "A100" in before.stdout
    assert after.returncode == 0 and "A100" in after.stdout, after.stderr
    bare = _run("--simulate", "snapshot", "--no-color")  # an optional value never takes a subcommand's name
    assert bare.returncode == 0 and "SIMULATED host: --simulate default" in bare.stdout, bare.stderr


def test_status_page_words(fakenvml_dir: Path, tmp_path: Path) -> None:
    """No driver: a pointer to doctor, not "0 cards, no problems"; one healthy GPU: "1 card", in the
    all-clear colour, not the warning one; a lost GPU's clock events are unknown, not "none"."""
    exporter = start(None, None, tmp_path, "--backend", "nvml", env={"LD_LIBRARY_PATH": str(tmp_path)})
    try:
        page = exporter.get("/").text
    finally:
        exporter.stop()
    assert "0 cards" not in page and "no GPU data: run gpu-exporter doctor" in page
    assert "run gpu-exporter doctor on this host" in page
    one = tmp_path / "one.scn"
    one.write_text("gpu0.name = One GPU\ngpu0.temperature.gpu = 40\n")
    exporter = start(fakenvml_dir, one, tmp_path)
    try:
        page = exporter.get("/").text
    finally:
        exporter.stop()
    assert "<span class='allclear'>1 card, no problems</span>" in page
    lost = tmp_path / "lost.scn"
    lost.write_text((SCENARIOS / "h100x4.scn").read_text() + "gpu2.lost_after = 0.5\n")
    exporter = start(fakenvml_dir, lost, tmp_path, "--collect-interval", "200ms")
    try:
        wait_for(exporter, lambda p: value(p, "gpu_up", gpu="2") == 0)
        cards = exporter.get("/api/v1/status").json()["gpus"]
        page = exporter.get("/").text
    finally:
        exporter.stop()
    events = {card["index"]: card["clock_events"] for card in cards if card["kind"] == "gpu"}
    assert events[2] is None and events[3] == ["power cap", "HW thermal slowdown"]
    assert ">unknown<" in page


def test_doctor_prints_each_fix_once(tmp_path: Path) -> None:
    """No device nodes, no library, no module: the container advice was printed four times."""
    (tmp_path / "dev").mkdir()
    (tmp_path / "proc").mkdir()
    env = {**os.environ, "LD_LIBRARY_PATH": str(tmp_path)}
    command = [sys.executable, "-m", "gpu_exporter", "doctor", "--path.dev", str(tmp_path / "dev"),
               "--path.procfs", str(tmp_path / "proc"), "--backend", "nvml"]  # fmt: skip
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False).stdout
    fixes = [line.split("fix: ", 1)[1] for line in out.splitlines() if "fix: " in line]
    repeated = [fix for fix in fixes if not fix.startswith("the same as for ")]
    assert len(fixes) >= 3 and len(repeated) == len(set(repeated)), out
    assert sum("container" in fix for fix in repeated) <= 1, out
