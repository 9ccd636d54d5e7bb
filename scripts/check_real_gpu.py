#!/usr/bin/env python3
"""On a host with a real NVIDIA GPU: run gpu-exporter (NVML backend, profiling collector on, every row) and compare
its values with nvidia-smi --query-gpu, with nvidia-smi dmon --gpm-metrics (NVML's GPM, Hopper and later)
and with dcgmi dmon where DCGM is installed, under a short load when PyTorch or CuPy can use the GPU.
Prints one table of agreements and differences and exits within about two minutes.

    python scripts/check_real_gpu.py [--load-seconds 60] [--rounds 10] [--markdown]

Exit codes: 0 every compared value agrees within its tolerance, 1 some differ, 2 usage error,
3 this host cannot run the check (no nvidia-smi, or the exporter did not start). Needs only the
standard library and the installed gpu-exporter (run it with the venv's python). See
docs/real-gpu-check.md.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import select
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass

#: nvidia-smi --query-gpu field → (exporter metric, factor into nvidia-smi's unit, tolerance, label).
SMI: dict[str, tuple[str, float, float, str]] = {
    "utilization.gpu": ("gpu_utilization_ratio", 100, 10, "GPU-Util %"),
    "memory.used": ("gpu_memory_used_bytes", 1 / 2**20, 512, "memory used MiB"),
    "temperature.gpu": ("gpu_temperature_celsius", 1, 3, "temperature °C"),
    "power.draw": ("gpu_power_watts", 1, 40, "power W"),
    "clocks.sm": ("gpu_sm_clock_hertz", 1e-6, 150, "SM clock MHz"),
}
#: GPM metric id (nvidia-smi dmon --gpm-metrics, NVML's nvmlGpmMetricId_t) and DCGM field → exporter metric.
GPM: dict[int, tuple[int, str, str]] = {
    1: (1001, "gpu_graphics_engine_active_ratio", "GR engine active %"),
    2: (1002, "gpu_sm_active_ratio", "SM activity %"),
    3: (1003, "gpu_sm_occupancy_ratio", "SM occupancy %"),
    5: (1004, "gpu_tensor_pipe_active_ratio", "tensor active %"),
    10: (1005, "gpu_dram_active_ratio", "DRAM active %"),
}
GPM_TOLERANCE = 10.0  # percentage points: the tools sample different intervals of a moving load
LOAD = """
import sys, time
seconds = float(sys.argv[1])
try:
    import torch
    devices = [torch.device(f"cuda:{i}") for i in range(torch.cuda.device_count())]
    mats = [torch.randn(8192, 8192, device=d, dtype=torch.float16) for d in devices]
    print("ready", flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for m in mats:
            m @ m
        torch.cuda.synchronize()
except ImportError:
    import cupy
    mats = []
    for i in range(cupy.cuda.runtime.getDeviceCount()):
        with cupy.cuda.Device(i):
            mats.append((i, cupy.random.rand(8192, 8192, dtype=cupy.float32)))
    print("ready", flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for i, m in mats:
            with cupy.cuda.Device(i):
                m @ m
        cupy.cuda.runtime.deviceSynchronize()
"""


@dataclass
class Row:
    gpu: str
    quantity: str
    source: str
    exporter: float | None
    reference: float | None
    tolerance: float

    @property
    def verdict(self) -> str:
        if self.exporter is None or self.reference is None:
            return "missing" if self.reference is not None else "n/a"
        return "agree" if abs(self.exporter - self.reference) <= self.tolerance else "DIFFER"


def parse_metrics(text: str) -> dict[tuple[str, str], float]:
    """(metric, gpu) → value for every unlabelled-by-MIG GPU sample of a Prometheus text exposition."""
    found: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if line.startswith("#") or "{" not in line or 'gpu_instance="' in line:
            continue
        name, rest = line.split("{", 1)
        labels, _, value = rest.rpartition("} ")
        gpu = next((part.split('"')[1] for part in labels.split(",") if part.startswith("gpu=")), None)
        if gpu is not None:
            found[(name, gpu)] = float(value)
    return found


def parse_smi(text: str) -> dict[tuple[str, str], float]:
    """(field, gpu index) → value of ``nvidia-smi --query-gpu=index,<SMI> --format=csv,noheader,nounits``."""
    found: dict[tuple[str, str], float] = {}
    for row in csv.reader(io.StringIO(text), skipinitialspace=True):
        if not row:
            continue
        for field, cell in zip(SMI, row[1:], strict=False):
            with contextlib.suppress(ValueError):  # "[N/A]" or "[Not Supported]": nothing to compare
                found[(field, row[0].strip())] = float(cell)
    return found


def parse_dmon(text: str, ids: list[int], dcgm: bool = False) -> dict[tuple[int, str], list[float]]:
    """(metric id, gpu) → values of ``nvidia-smi dmon --gpm-metrics IDS`` (last columns in the order asked)
    or of ``dcgmi dmon -e FIELDS`` (``GPU N`` then the fields; ratios 0-1 are turned into percent)."""
    found: dict[tuple[int, str], list[float]] = {}
    for line in text.splitlines():
        tokens = line.split()
        if not tokens or tokens[0].startswith(("#", "ID", "Id")):
            continue
        if dcgm:
            if tokens[0] != "GPU" or len(tokens) < 2 + len(ids):
                continue
            gpu, cells = tokens[1], tokens[2 : 2 + len(ids)]
        else:
            if len(tokens) < 1 + len(ids):
                continue
            gpu, cells = tokens[0], tokens[-len(ids) :]
        for metric, cell in zip(ids, cells, strict=True):
            with contextlib.suppress(ValueError):  # "-" or "N/A"
                value = float(cell) * (100 if dcgm else 1)
                found.setdefault((metric, gpu), []).append(value)
    return found


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:  # loopback: our own exporter
        return str(response.read().decode())


def _start_exporter(port: int) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "gpu_exporter", "--backend", "nvml", "--metrics.detail=full",
               "--collect-interval", "1s", "--web.listen-address", f"127.0.0.1:{port}"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
        try:
            _get(f"http://127.0.0.1:{port}/readyz")
            return process
        except OSError:
            time.sleep(0.2)
    process.kill()
    _, err = process.communicate(timeout=10)
    raise RuntimeError(f"gpu-exporter did not become ready: {err.decode(errors='replace').strip()[-500:]}")


def _load_tool() -> str | None:
    probe = "import torch; assert torch.cuda.is_available()"
    for name, code in (("torch", probe), ("cupy", "import cupy; assert cupy.cuda.runtime.getDeviceCount() > 0")):
        if subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120).returncode == 0:
            return name
    return None


def run(load_seconds: float, rounds: int) -> list[Row]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise LookupError("no nvidia-smi on this host: run this on a host with an NVIDIA GPU and its driver")
    port = _free_port()
    exporter = _start_exporter(port)
    window = rounds * 2 + 4
    tool = _load_tool() if load_seconds > 0 else None
    load = subprocess.Popen([sys.executable, "-c", LOAD, str(load_seconds)], stdout=subprocess.PIPE) if tool else None
    if load is not None and load.stdout is not None:  # wait (at most a minute) until its matrices are on the GPUs
        select.select([load.stdout], [], [], 60)
    ids = list(GPM)
    dmon = subprocess.Popen([smi, "dmon", "--gpm-metrics", ",".join(map(str, ids)), "-d", "1", "-c", str(window)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    dcgmi_path = shutil.which("dcgmi")
    dcgmi = (
        subprocess.Popen(
            [dcgmi_path, "dmon", "-e", ",".join(str(GPM[i][0]) for i in ids), "-d", "1000", "-c", str(window)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        if dcgmi_path
        else None
    )
    ours: dict[tuple[str, str], list[float]] = {}
    theirs: dict[tuple[str, str], list[float]] = {}
    query = f"--query-gpu=index,{','.join(SMI)}"
    try:
        time.sleep(4)  # the load ramps up, and GPM needs two samples
        for _ in range(rounds):
            for key, value in parse_metrics(_get(f"http://127.0.0.1:{port}/metrics")).items():
                ours.setdefault(key, []).append(value)
            out = subprocess.run([smi, query, "--format=csv,noheader,nounits"], capture_output=True, text=True,
                                 timeout=30, check=False).stdout  # fmt: skip
            for key, value in parse_smi(out).items():
                theirs.setdefault(key, []).append(value)
            time.sleep(2)
        dmon_out = dmon.communicate(timeout=window + 30)[0]
        dcgmi_out = dcgmi.communicate(timeout=window + 30)[0] if dcgmi else ""
    finally:
        for process in (dmon, dcgmi, load, exporter):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(10)
    gpus = sorted({gpu for _, gpu in theirs}, key=int)
    rows: list[Row] = []
    for gpu in gpus:
        for field, (metric, factor, tolerance, label) in SMI.items():
            mine = _mean([v * factor for v in ours.get((metric, gpu), [])])
            rows.append(Row(gpu, label, "nvidia-smi", mine, _mean(theirs.get((field, gpu), [])), tolerance))
        for source, parsed in (("dmon --gpm-metrics", parse_dmon(dmon_out, ids)),
                               ("dcgmi dmon", parse_dmon(dcgmi_out, ids, dcgm=True) if dcgmi else {})):  # fmt: skip
            for metric_id, (_field, metric, label) in GPM.items():
                mine = _mean([100 * v for v in ours.get((metric, gpu), [])])
                if source == "dcgmi dmon" and not dcgmi:
                    continue
                rows.append(Row(gpu, label, source, mine, _mean(parsed.get((metric_id, gpu), [])), GPM_TOLERANCE))
    print(f"load: {tool or 'none (no PyTorch or CuPy with CUDA)'}; {rounds} rounds 2 s apart; means compared")
    return rows


def table(rows: list[Row], markdown: bool = False) -> str:
    def cell(value: float | None) -> str:
        return "—" if value is None else f"{value:.1f}"

    head = ("GPU", "quantity", "reference", "gpu-exporter", "reference value", "tolerance", "verdict")
    body = [(r.gpu, r.quantity, r.source, cell(r.exporter), cell(r.reference), f"±{r.tolerance:g}", r.verdict)
            for r in rows]  # fmt: skip
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body]) + "\n"
    widths = [max(len(str(row[i])) for row in (head, *body)) for i in range(len(head))]
    return (
        "\n".join("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)) for row in (head, *body)) + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--load-seconds", type=float, default=60.0, help="seconds of load, 0 for none (default 60)")
    parser.add_argument("--rounds", type=int, default=10, help="comparisons 2 s apart (default 10, at most 60)")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown (for BENCHMARKS.md)")
    args = parser.parse_args(argv)
    if not 1 <= args.rounds <= 60 or not 0 <= args.load_seconds <= 240:
        print("check_real_gpu: --rounds must be 1-60 and --load-seconds 0-240", file=sys.stderr)
        return 2
    try:
        rows = run(args.load_seconds, args.rounds)
    except (LookupError, RuntimeError) as err:
        print(f"check_real_gpu: {err}", file=sys.stderr)
        return 3
    sys.stdout.write(table(rows, args.markdown))
    differ = [row for row in rows if row.verdict in ("DIFFER", "missing")]
    print(f"{len(rows) - len(differ)} of {len(rows)} agree or have no reference; {len(differ)} differ or are missing")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
