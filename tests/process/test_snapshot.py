"""``gpu-exporter snapshot``, out of process on the fake NVML: the text view and the JSON exact against
the scenario, exit codes 0 / 1 (no library, with the reason) / 2 (usage), and ``--watch``."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.harness import SCENARIOS
from tests.system.test_status import PROCESSES, _procfs

EXPECTED = """\
health fail: GPU 3: memory has an unrepairable error: service; GPU 2: NVLink fabric unhealthy: drain
[0] NVIDIA H100 80GB HBM3 |  71°C,  97 %, SM  35 % |  10240 /  81559 MiB |  612 /  700 W | python3/4242(root,8192M,job 77) ?/4343(?,1024M)
    ! busy but under-using its SMs: GPU-Util 97 %, SM activity 35 % (kernels that occupy few SMs, or a serial stage)
[1] NVIDIA H100 80GB HBM3 |  64°C,  64 % |  20480 /  81559 MiB |  455 /  700 W
[2] NVIDIA H100 80GB HBM3 |  38°C,  12 % |  30720 /  81559 MiB |   98 /  650 W
    ! health fail: NVLink fabric unhealthy; action: drain
[3] NVIDIA H100 80GB HBM3 |  83°C, 100 % |  40960 /  81559 MiB |  700 /  700 W | trainer/5151(4000,4096M) <img src=x onerror=alert(1)>/6161(root,2048M)
    ! hot: 83 °C, slowdown at 90 °C
    ! throttled: power cap, HW thermal slowdown
    ! degraded PCIe link: x8 of x16
    ! degraded PCIe link: Gen4 of Gen5 while busy
    ! health fail: memory has an unrepairable error; action: service
"""  # noqa: E501  (the lines are what a person sees)


def _env(fakenvml_dir: Path | None, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPU_EXPORTER_", "FAKE_NVML_", "NO_COLOR"))}
    scenario = tmp_path / "host.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + PROCESSES.replace("gpu3.xid", "# gpu3.xid"))
    env.update(FAKE_NVML_SCENARIO=str(scenario), NODE_NAME="node-7", LD_LIBRARY_PATH=str(fakenvml_dir or ""))
    return env


def _run(env: dict[str, str], tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    procfs = tmp_path / "proc"
    if not procfs.exists():
        _procfs(procfs)
    command = [sys.executable, "-m", "gpu_exporter", "snapshot", "--path.procfs", str(procfs), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path)


def test_text_view_exact(fakenvml_dir: Path, tmp_path: Path) -> None:
    done = _run(_env(fakenvml_dir, tmp_path), tmp_path)
    assert done.returncode == 0, done.stderr
    host, rest = done.stdout.split("\n", 1)
    assert host.startswith("node-7  ") and host.endswith("  driver 550.54.15  CUDA 12.4  backend nvml")
    usage = [line for line in rest.splitlines() if line.startswith("    = ")]
    # what job 77 used in the one interval a one-shot look waits for: its process's memory exact, the rest timed
    assert len(usage) == 1 and re.fullmatch(r"    = job 77: \d\.\d GPU-s, busy 0\.\d s, 0\.\d kJ, 8192 MiB", usage[0])
    assert rest.replace(usage[0] + "\n", "") == EXPECTED
    assert "\x1b[" not in done.stdout  # not a terminal: no colours


def test_json_exact(fakenvml_dir: Path, tmp_path: Path) -> None:
    done = _run(_env(fakenvml_dir, tmp_path), tmp_path, "--json")
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["hostname"] == "node-7" and body["driver_version"] == "550.54.15"
    gpu3 = body["gpus"][3]
    assert (gpu3["utilization_ratio"], gpu3["memory_used_bytes"], gpu3["power_watts"]) == (1.0, 42949676032, 699.999)
    assert gpu3["clock_events"] == ["power cap", "HW thermal slowdown"]
    [job] = body["gpus"][0]["usage"]  # the ledger after the second read: job 77 got its process's SM share
    assert job["allocation"] == "job 77" and job["memory_used_bytes"] == 8589934592
    assert 0 < job["busy_seconds"] < job["gpu_seconds"] and job["energy_joules"] > 0
    assert body["gpus"][0]["unattributed"]["busy_seconds"] > 0  # the other process's cgroups name no job
    assert body["gpus"][1]["usage"] == [] and body["gpus"][1]["unattributed"]["busy_seconds"] is None
    assert [(p["pid"], p["user"], p["memory_used_bytes"]) for p in gpu3["processes"]] == [
        (5151, "4000", 4294967296), (6161, "root", 2147483648),
    ]  # fmt: skip


def test_no_library_exits_1_with_the_reason(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    env = _env(None, tmp_path)
    env["LD_LIBRARY_PATH"] = str(empty)
    done = _run(env, tmp_path, "--backend", "nvml")
    assert done.returncode == 1 and done.stdout == ""
    assert "no GPU data: nvml backend down: libnvidia-ml.so.1 not found: " in done.stderr
    assert "library_not_found" not in done.stderr  # the reason label's word, not for a person


def test_usage_errors_exit_2(fakenvml_dir: Path, tmp_path: Path) -> None:
    env = _env(fakenvml_dir, tmp_path)
    cases = ((("--watch", "0"), "--watch 0: give seconds from 0.1 to 86400"), (("--bogus",), "arguments: --bogus"))
    for args, message in cases:
        done = _run(env, tmp_path, *args)
        assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_watch_prints_until_interrupted(fakenvml_dir: Path, tmp_path: Path) -> None:
    _procfs(tmp_path / "proc")
    command = [sys.executable, "-m", "gpu_exporter", "snapshot", "--watch", "0.3", "--no-color"]
    env = _env(fakenvml_dir, tmp_path)
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        seen, deadline = "", time.monotonic() + 30
        while seen.count("[3] NVIDIA H100 80GB HBM3") < 3:  # the event: three screens printed
            assert time.monotonic() < deadline and child.poll() is None, seen
            if select.select([child.stdout], [], [], 1.0)[0]:
                seen += child.stdout.readline()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=20)
    assert child.returncode == 0, err
    assert (seen + out).count("[3] NVIDIA H100 80GB HBM3") >= 3


def test_mig_instances_are_cards_of_their_own(fakenvml_dir: Path, tmp_path: Path) -> None:
    env = _env(fakenvml_dir, tmp_path)
    env["FAKE_NVML_SCENARIO"] = str(SCENARIOS / "mig.scn")
    body = json.loads(_run(env, tmp_path, "--json").stdout)
    cards = [
        (c["kind"], c["title"], c.get("mig_uuid"), c["memory_used_bytes"], c["memory_total_bytes"])
        for c in body["gpus"]
    ]
    assert cards == [
        ("gpu", "GPU 0", None, 13958643712, 42949672960),
        ("mig", "GPU 0 MIG 3g.20gb (GI 1, CI 0)", "MIG-5a1b2c3d-4e5f-5a6b-8c7d-9e0f1a2b3c4d", 8589934592, 20937965568),
        ("mig", "GPU 0 MIG 2g.10gb (GI 5, CI 0)", "MIG-6b2c3d4e-5f6a-5b7c-9d8e-0f1a2b3c4d5e", 4294967296, 10468982784),
        ("mig", "GPU 0 MIG 1g.5gb (GI 13, CI 0)", "MIG-7c3d4e5f-6a7b-5c8d-ae9f-1a2b3c4d5e6f", 1073741824, 4823449600),
    ]
    text = _run(env, tmp_path, "--no-color").stdout.splitlines()
    assert (
        text[2].startswith(" └ MIG 3g.20gb (GI 1, CI 0) NVIDIA A100-SXM4-40GB MIG 3g.20gb |")
        and "8192 /  19968 MiB" in text[2]
    )


def test_a_lost_gpu_is_marked(fakenvml_dir: Path, tmp_path: Path) -> None:
    env = _env(fakenvml_dir, tmp_path)
    scenario = Path(env["FAKE_NVML_SCENARIO"])
    scenario.write_text(scenario.read_text() + "gpu2.lost_after = 1\n")
    command = [sys.executable, "-m", "gpu_exporter", "snapshot", "--watch", "0.5", "--json"]
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True, cwd=tmp_path) as child:
        assert child.stdout is not None
        deadline = time.monotonic() + 20
        card: dict[str, object] = {}
        while time.monotonic() < deadline:
            card = json.loads(child.stdout.readline())["gpus"][2]
            if card["state"] == "lost":
                break
        child.send_signal(signal.SIGINT)
        child.communicate(timeout=20)
    health = ["health fail: GPU is down (lost); action: reboot"]  # the health model's verdict on a lost GPU
    assert card["state"] == "lost" and card["problems"] == ["lost: the GPU stopped answering", *health]


def test_the_collect_interval_flag_sets_the_sampling_interval(fakenvml_dir: Path, tmp_path: Path) -> None:
    """-c / --collect-interval is the snapshot's sampling interval too (it was capped at 1 s: -c 3s
    sampled every second), and ``--watch`` without a number prints at that interval."""
    env = _env(fakenvml_dir, tmp_path)
    for flag, expected in ((("-c", "3s"), 3.0), (("--collect-interval", "250ms"), 0.25), ((), 1.0)):
        done = _run(env, tmp_path, "--json", *flag)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["interval_seconds"] == expected, flag
    _procfs(tmp_path / "proc2")
    command = [sys.executable, "-m", "gpu_exporter", "snapshot", "-c", "300ms", "--watch", "--json"]
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        first = json.loads(child.stdout.readline())  # the event: one JSON view printed
        child.send_signal(signal.SIGINT)
        child.communicate(timeout=20)
    assert first["interval_seconds"] == 0.3
