"""Scenario files for the fake NVML: an H100-PCIe-like host of N GPUs, optionally with MIG.

Every GPU gets distinct values (so a benchmark renders as many distinct series as a real host).
The keys follow ``src/gpu_exporter/simulate/SCENARIO.md`` and mirror ``tests/scenarios/h100x4.scn``.
One compute process per GPU is listed, with a pid that does not exist on the host: gpu-exporter
counts it; nvitop-exporter still exports its per-process series (as a terminated process, values
NaN) after asking psutil about it. No NVLink keys: a PCIe host.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: MIG profiles of an H100 80GB split into seven 1g.10gb instances (GPU instance ids 7–13 on real hosts).
_MIG_PROFILE = "1g.10gb"
_MIG_SLOTS = 7
_MIG_MEMORY = 10_468_982_784
_GIB = 1 << 30
#: Pids just below the kernel's largest pid_max (4194304), so no process on the host has them.
_ABSENT_PID_BASE = 4_100_000


@dataclass(frozen=True)
class Size:
    """One host shape: ``gpus`` GPUs, each split into ``mig`` MIG instances (0: MIG off)."""

    gpus: int
    mig: int = 0

    @property
    def label(self) -> str:
        return f"{self.gpus} GPU" + ("s" if self.gpus != 1 else "") + (f" × {self.mig} MIG" if self.mig else "")

    @property
    def key(self) -> str:
        return f"{self.gpus}gpu" + (f"-mig{self.mig}" if self.mig else "")


def _gpu_lines(i: int, mig: int) -> list[str]:
    """All keys of GPU ``i``; values vary with ``i`` so no two GPUs render the same series."""
    total = 85_520_809_984
    reserved = 562_036_736 + i
    used = ((i * 7 + 3) % 70 + 1) * _GIB
    util = (i * 37 + 11) % 101
    temp = 32 + (i * 13) % 55
    power = 60_000 + (i * 9_973) % 640_000
    sm_clock = 345 + (i * 97) % 1636
    reasons = (0x0, 0x1, 0x4, 0x44, 0x20)[i % 5]
    p = f"gpu{i}."
    lines = [
        f"{p}name = NVIDIA H100 80GB HBM3",
        f"{p}uuid = {gpu_uuid(i)}",
        f"{p}serial = {1652323000000 + i}",
        f"{p}vbios_version = 96.00.89.00.{i % 100:02d}",
        f"{p}board_part_number = 692-2G520-0200-{i:03d}",
        f"{p}pci_bus_id = {i // 64:08x}:{0x11 + (i % 64) * 3:02x}:00.0",
        f"{p}memory.total = {total}",
        f"{p}memory.reserved = {reserved}",
        f"{p}memory.used = {used}",
        f"{p}memory.free = {total - used - reserved}",
        f"{p}bar1.total = 137438953472",
        f"{p}bar1.used = {(i + 1) * 5_242_880}",
        f"{p}utilization.gpu = {util}",
        f"{p}utilization.memory = {util * 2 // 3}",
        f"{p}utilization.encoder = {i % 7}",
        f"{p}utilization.decoder = {(i * 3) % 11}",
        f"{p}temperature.gpu = {temp}",
        f"{p}temperature.memory = {temp + 6}",
        f"{p}temperature.slowdown = 90",
        f"{p}temperature.shutdown = 92",
        f"{p}temperature.max_operating = 87",
        f"{p}power.usage = {power}",
        f"{p}power.limit = 700000",
        f"{p}power.default_limit = 700000",
        f"{p}power.enforced_limit = {700_000 - (i % 3) * 50_000}",
        f"{p}energy = {123_456_789_012 + i * 987_654_321}",
        f"{p}clock.sm = {sm_clock}",
        f"{p}clock.memory = 2619",
        f"{p}clock.graphics = {sm_clock}",
        f"{p}clock.video = {1200 + i % 345}",
        f"{p}max_clock.sm = 1980",
        f"{p}max_clock.memory = 2619",
        f"{p}max_clock.graphics = 1980",
        f"{p}max_clock.video = 1545",
        f"{p}fan_speed = {20 + (i * 11) % 81}",
        f"{p}pstate = {(0, 0, 2, 8)[i % 4]}",
        f"{p}clock_event_reasons = {reasons:#x}",
        f"{p}violation.power = {i * 1_500_000_000}",
        f"{p}violation.thermal = {(i % 4) * 250_000_000}",
        f"{p}violation.sync_boost = 0",
        f"{p}violation.board_limit = 0",
        f"{p}violation.low_util = {(i % 2) * 7_200_000_000_000}",
        f"{p}violation.reliability = 0",
        f"{p}pcie.tx = {(i * 12_345) % 1_000_000}",
        f"{p}pcie.rx = {(i * 54_321) % 1_000_000}",
        f"{p}pcie.link_gen = {5 - (i % 7 == 6)}",
        f"{p}pcie.max_link_gen = 5",
        f"{p}pcie.link_width = {16 if i % 9 else 8}",
        f"{p}pcie.max_link_width = 16",
        f"{p}pcie.replay_counter = {i % 13}",
        f"{p}ecc.mode = 1",
        f"{p}ecc.volatile.corrected = {i % 3}",
        f"{p}ecc.volatile.uncorrected = 0",
        f"{p}ecc.aggregate.corrected = {i % 5}",
        f"{p}ecc.aggregate.uncorrected = 0",
        f"{p}remapped_rows.correctable = {i % 2}",
        f"{p}remapped_rows.uncorrectable = 0",
        f"{p}remapped_rows.pending = 0",
        f"{p}remapped_rows.failure = 0",
        f"{p}persistence_mode = 1",
        f"{p}compute_mode = 0",
        f"{p}process.0.pid = {_ABSENT_PID_BASE + i}",
        f"{p}process.0.used_memory = {used // 2}",
        f"{p}process.0.name = python3",
        f"{p}process.0.sm_util = {util}",
        f"{p}process.0.mem_util = {util // 2}",
        f"{p}mig.mode = {1 if mig else 0}",
    ]
    for k in range(mig):
        m = f"{p}mig.{k}."
        lines += [
            f"{m}gpu_instance_id = {7 + k}",
            f"{m}compute_instance_id = 0",
            f"{m}profile = {_MIG_PROFILE}",
            f"{m}uuid = MIG-5a1b2c3d-{i:04x}-5a6b-8c7d-9e0f1a2b{k:04x}",
            f"{m}memory.total = {_MIG_MEMORY}",
            f"{m}memory.used = {((i + k) % 9 + 1) * _GIB}",
        ]
    return lines


def render(size: Size) -> str:
    """The scenario text for ``size``."""
    if size.mig > _MIG_SLOTS:
        raise ValueError(f"at most {_MIG_SLOTS} MIG instances per GPU, not {size.mig}")
    lines = [
        f"# Generated by bench/scenarios.py: {size.label}, H100-PCIe-like, distinct values per GPU.",
        "driver_version = 550.54.15",
        "nvml_version = 12.550.54.15",
        "cuda_driver_version = 12040",
        f"device_count = {size.gpus}",
    ]
    for i in range(size.gpus):
        lines.append("")
        lines += _gpu_lines(i, size.mig)
    return "\n".join(lines) + "\n"


def write(directory: Path, size: Size) -> Path:
    """Write the scenario for ``size`` into ``directory`` atomically and return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{size.key}.scn"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(render(size))
    os.replace(tmp, path)
    return path


def gpu_uuid(i: int) -> str:
    """The UUID :func:`render` gives GPU ``i`` (a marker that the last GPU is being served)."""
    return f"GPU-4a1e0c2d-{i:04x}-4c3a-9e21-5d8f6a0b{i:04x}"
