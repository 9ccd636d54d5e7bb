"""Enumerating GPUs again (every --gpu.rediscover-interval, to pick up MIG devices created at run time)
reads only what can change: a known GPU keeps its identity, its P2P status is read again only when
the set of GPUs changes, and a known MIG device keeps its name and instance ids. And DCGM 74, the
system's confidential-compute feature (nvmlSystemGetConfComputeState), read once per enumeration,
and DCGM 69, the GPU's MIG slots while MIG is on (0 while off)."""

from __future__ import annotations

import collections
import time
from pathlib import Path

from tests.harness import REPO, SCENARIOS, samples, start, value

COUNTERS = REPO / "tests" / "fixtures" / "default-counters.csv"

#: Identity calls a first look makes for each GPU, which must not be made again for a known one.
IDENTITY_ONLY = (
    "nvmlDeviceGetName", "nvmlDeviceGetSerial", "nvmlDeviceGetVbiosVersion", "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetPlatformInfo", "nvmlGpmQueryDeviceSupport", "nvmlDeviceGetP2PStatus", "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetInforomImageVersion", "nvmlDeviceGetBrand", "nvmlDeviceGetGpuInstanceId",
)  # fmt: skip


def _symbols(lines: list[str]) -> collections.Counter[str]:
    return collections.Counter(line.partition(" ")[0] for line in lines)


def test_enumerating_again_reads_only_what_can_change(fakenvml_dir: Path, tmp_path: Path) -> None:
    # under dcgm-exporter's names (a counters list), where the first look reads P2P status and placement too
    for name in ("h100x4", "mig"):
        exporter = start(
            fakenvml_dir, SCENARIOS / f"{name}.scn", tmp_path, "--collect-interval", "0.5s",
            "--gpu.rediscover-interval", "1s", "-f", str(COUNTERS), trace=True, wait_for="/readyz",
        )  # fmt: skip
        try:
            assert exporter.trace_path is not None
            first = _symbols(exporter.trace_path.read_text().splitlines())
            looked = ("nvmlDeviceGetName", "nvmlDeviceGetP2PStatus") if name == "h100x4" else ("nvmlDeviceGetName",)
            assert all(first[symbol] for symbol in looked), sorted(first)  # the first look read them
            exporter.trace_path.write_bytes(b"")  # the fake appends: later calls land in the empty file
            time.sleep(3.6)  # about three enumerations
            again = _symbols(exporter.trace_path.read_text().splitlines())
        finally:
            exporter.stop()
        assert again["nvmlDeviceGetCount_v2"] + again["nvmlDeviceGetCount"] >= 2, again  # it did enumerate
        assert not {symbol: again[symbol] for symbol in IDENTITY_ONLY if again[symbol]}, (name, again)


def test_confidential_compute_mode_is_served_on_every_gpu(fakenvml_dir: Path, tmp_path: Path) -> None:
    csv = tmp_path / "cc.csv"
    csv.write_text("DCGM_FI_DEV_CC_MODE, gauge, Confidential compute mode.\n")
    without = tmp_path / "without.scn"
    without.write_text((SCENARIOS / "h100x4.scn").read_text().replace("conf_compute.cc_feature = 1\n", ""))
    for scenario, want in ((SCENARIOS / "h100x4.scn", 1.0), (without, 0.0)):  # 0: not supported, as DCGM
        for simulate in (False, True):
            flags = ("--simulate", str(scenario)) if simulate else ()
            exporter = start(
                fakenvml_dir, scenario, tmp_path, "-f", str(csv), "--collect-interval", "1h", *flags,
            )  # fmt: skip
            try:
                parsed = samples(exporter.metrics())
            finally:
                exporter.stop()
            got = {gpu: value(parsed, "DCGM_FI_DEV_CC_MODE", gpu=gpu) for gpu in "0123"}
            assert got == dict.fromkeys("0123", want), (scenario.name, simulate, got)


def test_mig_max_slices(fakenvml_dir: Path, tmp_path: Path) -> None:
    csv = tmp_path / "slices.csv"
    csv.write_text("DCGM_FI_DEV_MIG_MAX_SLICES, gauge, MIG slices.\n")
    # mig: GPU 0 in MIG mode (the fake's seven slots); h100x4: MIG off everywhere (0, as DCGM has it)
    for name, want in (("mig", {"0": {7.0}}), ("h100x4", {gpu: {0.0} for gpu in "0123"})):
        exporter = start(fakenvml_dir, SCENARIOS / f"{name}.scn", tmp_path, "-f", str(csv), "--collect-interval", "1h")
        try:
            parsed = samples(exporter.metrics())
        finally:
            exporter.stop()
        by_gpu: dict[str, set[float]] = {}
        for labels, got in parsed["DCGM_FI_DEV_MIG_MAX_SLICES"].items():  # a MIG GPU's are per instance (-d f)
            by_gpu.setdefault(dict(labels)["gpu"], set()).add(got)
        assert by_gpu == want, (name, by_gpu)


def test_a_value_called_unsupported_is_asked_again_only_when_the_devices_change(
    fakenvml_dir: Path, tmp_path: Path
) -> None:
    # GPU 3 of h100x4 has no temperature.margin: nvmlDeviceGetMarginTemperature is NOT_SUPPORTED there
    # (a row read every 5 cycles). Enumerations finding the same GPUs must not ask it again (the retry
    # interval is an hour here); one that finds a GPU added must.
    text = (SCENARIOS / "h100x4.scn").read_text()
    scenario = tmp_path / "h100x4.scn"
    scenario.write_text(text)
    exporter = start(
        fakenvml_dir, scenario, tmp_path, "--collect-interval", "0.5s", "--gpu.rediscover-interval", "1s",
        "--unsupported.retry-interval", "1h", trace=True, wait_for="/readyz",
    )  # fmt: skip
    asked = "nvmlDeviceGetMarginTemperature gpu3"
    try:
        trace = exporter.trace_path
        assert trace is not None
        assert asked in trace.read_text().splitlines()  # the first read asked it
        trace.write_bytes(b"")
        time.sleep(3.6)  # about three enumerations finding the same GPUs, the row due about once a 2.5 s
        again = trace.read_text().splitlines()
        counted = _symbols(again)
        assert counted["nvmlDeviceGetCount_v2"] + counted["nvmlDeviceGetCount"] >= 2  # it did enumerate
        assert asked not in again
        added = (line.replace("gpu3.", "gpu4.", 1) for line in text.splitlines() if line.startswith("gpu3."))
        gpu4 = "\n".join(added).replace("5d8f6a0b1c33", "5d8f6a0b1c34").replace("1652323003473", "1652323003474")
        grown = text.replace("device_count = 4\n", "device_count = 5\n")
        scenario.write_text(grown + "\n" + gpu4.replace("00000000:78:00.0", "00000000:79:00.0") + "\n")
        deadline = time.monotonic() + 15
        while asked not in trace.read_text().splitlines():
            assert time.monotonic() < deadline, "not asked again after a GPU was added"
            time.sleep(0.2)
        assert value(samples(exporter.metrics()), "gpu_up", gpu="4") == 1
    finally:
        exporter.stop()
