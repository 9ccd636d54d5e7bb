"""DCGM 4.x's base-unit fields (1600-1612) on the NVML backend, out of process on the fake: each is
its legacy twin's catalogue row in the row's own unit (bytes, hertz, joules, a 0-1 ratio), INT64
(the joules' fraction dropped, 123456789012 mJ is 123456789 J) except the fan ratio, a double."""

from __future__ import annotations

from pathlib import Path

from tests.harness import SCENARIOS, energy_in_range, samples, start, value

TWINS = {  # base-unit field → (legacy field, legacy unit in the base unit)
    "DCGM_FI_DEV_BAR1_CAPACITY_BYTES": ("DCGM_FI_DEV_BAR1_TOTAL", 2**20),
    "DCGM_FI_DEV_BAR1_USED_BYTES": ("DCGM_FI_DEV_BAR1_USED", 2**20),
    "DCGM_FI_DEV_BAR1_FREE_BYTES": ("DCGM_FI_DEV_BAR1_FREE", 2**20),
    "DCGM_FI_DEV_SM_CLOCK_HERTZ": ("DCGM_FI_DEV_SM_CLOCK", 10**6),
    "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ": ("DCGM_FI_DEV_MEM_CLOCK", 10**6),
    "DCGM_FI_DEV_VIDEO_CLOCK_HERTZ": ("DCGM_FI_DEV_VIDEO_CLOCK", 10**6),
    "DCGM_FI_DEV_SM_APP_CLOCK_HERTZ": ("DCGM_FI_DEV_APP_SM_CLOCK", 10**6),
    "DCGM_FI_DEV_MEMORY_APP_CLOCK_HERTZ": ("DCGM_FI_DEV_APP_MEM_CLOCK", 10**6),
    "DCGM_FI_DEV_SM_MAX_CLOCK_HERTZ": ("DCGM_FI_DEV_MAX_SM_CLOCK", 10**6),
    "DCGM_FI_DEV_MEMORY_MAX_CLOCK_HERTZ": ("DCGM_FI_DEV_MAX_MEM_CLOCK", 10**6),
    "DCGM_FI_DEV_VIDEO_MAX_CLOCK_HERTZ": ("DCGM_FI_DEV_MAX_VIDEO_CLOCK", 10**6),
}


def test_base_unit_fields_are_their_legacy_twins_in_base_units(fakenvml_dir: Path, tmp_path: Path) -> None:
    csv = tmp_path / "base-units.csv"
    names = [*TWINS, *(legacy for legacy, _ in TWINS.values())]
    names += ["DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", "DCGM_FI_DEV_FAN_SPEED_RATIO", "DCGM_FI_DEV_FAN_SPEED"]
    csv.write_text("".join(f"{name}, gauge, {name}.\n" for name in names))
    exporter = start(fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "-f", str(csv), "--collect-interval", "1h")
    try:
        exposition = exporter.metrics()
    finally:
        exporter.stop()
    parsed = samples(exposition)
    # The scenario's gpu0: BAR1 128 GiB with 5 MiB used, SM clock 1980 MHz, energy 123456789012 mJ, fan 30 %.
    assert value(parsed, "DCGM_FI_DEV_BAR1_CAPACITY_BYTES", gpu="0") == 137438953472
    assert value(parsed, "DCGM_FI_DEV_BAR1_USED_BYTES", gpu="0") == 5242880
    assert value(parsed, "DCGM_FI_DEV_SM_CLOCK_HERTZ", gpu="0") == 1980 * 10**6
    assert value(parsed, "DCGM_FI_DEV_SM_APP_CLOCK_HERTZ", gpu="0") == 1755 * 10**6
    for gpu in "0123":
        for twin, (legacy, factor) in TWINS.items():
            assert value(parsed, twin, gpu=gpu) == value(parsed, legacy, gpu=gpu) * factor, (twin, gpu)
    # whole joules, growing by the integral of 612.345 W since init (the fake's counter is exact)
    assert energy_in_range(value(parsed, "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", gpu="0"), 123456789, 612.345)
    assert value(parsed, "DCGM_FI_DEV_FAN_SPEED_RATIO", gpu="0") == 0.3
    assert value(parsed, "DCGM_FI_DEV_FAN_SPEED", gpu="0") == 30
    # INT64 fields print whole; the ratio prints as a double.
    assert 'DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL{gpu="0"' in exposition
    line = next(x for x in exposition.splitlines() if x.startswith('DCGM_FI_DEV_SM_CLOCK_HERTZ{gpu="0"'))
    assert line.endswith(" 1980000000"), line
