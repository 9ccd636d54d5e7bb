"""``gpu-exporter doctor``: why there is (or is no) GPU data, one check at a time, each with its fix.

In order: NVIDIA device nodes and their permissions, ``libnvidia-ml.so.1`` loadable, the kernel
driver loaded (``/proc/driver/nvidia/version``), NVML initialising through the exporter's own
backend (driver not loaded, library/driver mismatch, no permission), library and kernel module
versions equal, GPUs visible, each GPU answering a sampling cycle and whether GPM (SM activity from
NVML's own profiling counters) works on it, DCGM importable and its host
engine reachable, the profiling counters permitted to DCGM (the kernel module's
``RmProfilingAdminOnly`` against this user), and the kubelet's pod-resources socket when
``--kubernetes`` is on. ``--simulate`` is refused: doctor checks the real host.

Exit code: 0 when every check is ok (or skipped), 3 when the worst finding is a warning, 4 when
something failed; 2 for usage errors.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from gpu_exporter.assemble import bare_sampler
from gpu_exporter.assemble.backends import select
from gpu_exporter.backends.base import BackendUnavailable
from gpu_exporter.catalogue import enabled_specs, keys
from gpu_exporter.config import Settings
from gpu_exporter.sampling.sampler import Sampler
from gpu_exporter.sampling.snapshot import DeviceView

LEVELS = ("ok", "skip", "warn", "fail")
SM_ACTIVE = keys.SM_ACTIVE
EXIT = {"ok": 0, "skip": 0, "warn": 3, "fail": 4}
CONTAINER_FIX = (
    "this looks like a container started without GPU access: run it with the NVIDIA container toolkit "
    "(docker run --gpus all, or --runtime nvidia), or on Kubernetes request nvidia.com/gpu through the NVIDIA "
    "device plugin (or use runtimeClassName: nvidia)"
)


@dataclass(frozen=True)
class Finding:
    """One check: its name, ``ok``/``skip``/``warn``/``fail``, what was found and the fix."""

    check: str
    status: str
    found: str
    fix: str = ""


def in_container() -> bool:
    """Docker, Podman or a Kubernetes pod (by their marker files and variables)."""
    markers = (Path("/.dockerenv"), Path("/run/.containerenv"))
    return any(path.exists() for path in markers) or "KUBERNETES_SERVICE_HOST" in os.environ


def _device_nodes(dev: Path) -> list[Finding]:
    ctl = dev / "nvidiactl"
    gpus = sorted(
        (p for p in dev.glob("nvidia[0-9]*") if p.name[6:].isdigit()), key=lambda p: int(p.name[6:])
    )  # fmt: skip
    if not ctl.exists() or not gpus:
        missing = f"{ctl} missing" if not ctl.exists() else f"no {dev}/nvidiaN"
        fix = CONTAINER_FIX if in_container() else (
            "load the driver (modprobe nvidia) so the nodes are created, or run nvidia-modprobe / "
            "nvidia-persistenced; check 'dmesg | grep -i nvrm'"
        )  # fmt: skip
        return [Finding("device nodes", "fail", missing, fix), Finding("permissions", "skip", "no device nodes")]
    names = f"{ctl}, {', '.join(p.name for p in gpus)}"
    denied = [p for p in (ctl, *gpus) if not os.access(p, os.R_OK | os.W_OK)]
    if denied:
        permission = Finding(
            "permissions", "fail", f"no read/write access to {', '.join(str(p) for p in denied)}",
            "run as root or as a member of the group that owns the nodes (ls -l /dev/nvidia*); in a container "
            "pass the devices in (--gpus all or the NVIDIA device plugin)",
        )  # fmt: skip
    else:
        permission = Finding("permissions", "ok", "read/write on every node")
    return [Finding("device nodes", "ok", names), permission]


def _library() -> Finding:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as err:
        fix = CONTAINER_FIX if in_container() else (
            "install the NVIDIA driver (its user-space part ships libnvidia-ml.so.1), or add the folder holding "
            "it to the loader path (ldconfig, or LD_LIBRARY_PATH)"
        )  # fmt: skip
        return Finding("libnvidia-ml.so.1", "fail", f"not loadable: {' '.join(str(err).split())}", fix)
    loaded = ""
    try:
        for line in Path("/proc/self/maps").read_text().splitlines():
            if "libnvidia-ml.so" in line:
                loaded = line.split()[-1]
                break
    except OSError:
        pass
    return Finding("libnvidia-ml.so.1", "ok", f"loaded from {loaded}" if loaded else "loaded")


def _kernel_module(procfs: Path) -> tuple[Finding, str]:
    path = procfs / "driver" / "nvidia" / "version"
    try:
        text = path.read_text(errors="replace")
    except OSError:
        fix = CONTAINER_FIX if in_container() else "load it: modprobe nvidia (see dmesg if that fails), or reinstall"
        return Finding("kernel driver", "fail", f"{path} not readable: the nvidia module is not loaded", fix), ""
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
    version = match.group(1) if match else ""
    return Finding("kernel driver", "ok", f"loaded, version {version or 'unknown'}"), version


def _nvml(settings: Settings, module_version: str) -> tuple[list[Finding], Sampler | None]:
    """NVML through the exporter's backend: init (with the backend's own diagnosis), versions, GPUs."""
    nvml = replace(settings, backend="nvml")
    try:
        backend, reason = select(nvml)
        host, devices = backend.open(False)
    except BackendUnavailable as err:
        found, _, fix = str(err).partition(": ")  # what went wrong, in words: the fix
        return [Finding("NVML", "fail", found, fix or "see the exporter's log")], None
    backend.close()
    findings = [Finding("NVML", "ok", f"initialised, driver {host.driver_version}, NVML {host.nvml_version}")]
    if module_version and host.driver_version and module_version != host.driver_version:
        findings.append(
            Finding(
                "library/driver match", "warn",
                f"libnvidia-ml.so.1 is {host.driver_version}, the kernel module {module_version}",
                "reboot, or reload the nvidia kernel modules, so both are the same driver version",
            )
        )  # fmt: skip
    elif module_version:
        findings.append(Finding("library/driver match", "ok", f"both {module_version}"))
    else:
        findings.append(Finding("library/driver match", "skip", "kernel module version unknown"))
    if not devices:
        visible = os.environ.get("NVIDIA_VISIBLE_DEVICES") or os.environ.get("CUDA_VISIBLE_DEVICES")
        fix = "check nvidia-smi -L and dmesg for the GPUs" + (
            f"; NVIDIA_VISIBLE_DEVICES/CUDA_VISIBLE_DEVICES is {visible!r}" if visible else ""
        )
        findings.append(Finding("GPUs visible", "fail", "NVML reports no GPU", fix))
        return findings, None
    findings.append(Finding("GPUs visible", "ok", f"{len(devices)}: " + ", ".join(d.name for d in devices)))
    # The profiling collector too, so each GPU's GPM is tried (two samples) and reported.
    specs = enabled_specs(settings.collectors | {"profiling"})
    sampler = bare_sampler(backend, specs, 1.0, reason, watch_events=False)
    return findings, sampler


def _answering(sampler: Sampler, nodes: int) -> list[Finding]:
    """Each GPU after one sampling cycle; ``nodes`` (the /dev/nvidiaN count) tells which GPUs NVML
    could not even open (they are missing from its list)."""
    sampler.start()
    try:
        sampler.first_cycle_done.wait(15.0)
        # A first cycle can end before a slow first read returns (opening took the budget): give every
        # GPU a few cycles to answer before calling it hung.
        deadline = time.monotonic() + 5.0
        snapshot = sampler.snapshot
        while time.monotonic() < deadline and not all(d.values or not d.up for d in snapshot.devices):
            time.sleep(0.1)
            snapshot = sampler.snapshot
        # GPM needs two samples: wait for the GPUs that may have it to show SM activity (bounded).
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline and not all(_gpm_settled(d) for d in snapshot.devices):
            time.sleep(0.1)
            snapshot = sampler.snapshot
    finally:
        sampler.stop()
    findings = []
    seen = {device.identity.index for device in snapshot.devices}
    expected = max(nodes, max(seen, default=-1) + 1)
    for index in sorted(set(range(expected)) - seen):
        findings.append(Finding(f"GPU {index}", "fail", "could not be opened: NVML lists it as lost or unusable",
                                "check dmesg for Xid 79 or 'fallen off the bus'; drain the node and reset the GPU "
                                "(nvidia-smi -r -i N) or power-cycle the host"))  # fmt: skip
    for device in snapshot.devices:
        name = f"GPU {device.identity.index}"
        if not device.up:
            findings.append(Finding(name, "fail", "lost: it stopped answering (fallen off the bus?)",
                                    "check dmesg for Xid 79; drain the node and reset the GPU (nvidia-smi -r) or "
                                    "power-cycle the host"))  # fmt: skip
        elif device.stalled or not device.values:
            findings.append(Finding(name, "warn", "did not answer within the sampling interval",
                                    "check dmesg and nvidia-smi -q -i N; a hung GPU needs a reset"))  # fmt: skip
        else:
            findings.append(Finding(name, "ok", f"answering ({device.identity.name}, {device.identity.uuid})"))
            findings.append(gpm(device, snapshot.stats.errors))
    return sorted(findings, key=lambda f: int(f.check.split()[1]))


def _gpm_settled(device: DeviceView) -> bool:
    return not device.up or device.identity.gpm_supported is False or SM_ACTIVE in device.values


def gpm(device: DeviceView, errors: Mapping[str, int]) -> Finding:
    """Whether GPM (NVML's own profiling counters, Hopper and later) works on this GPU: SM activity read
    from two samples, or why not."""
    name = f"GPU {device.identity.index} GPM"
    if device.identity.gpm_supported is False:
        return Finding(name, "skip", "not offered by the driver for this GPU (Hopper or later needed): no SM "
                       "activity, occupancy, tensor or DRAM activity without DCGM's profiling module")  # fmt: skip
    values = device.values
    if SM_ACTIVE in values:
        return Finding(name, "ok", f"works: SM activity {100 * values[SM_ACTIVE]:.0f} % over the last interval")
    if errors.get("in_use"):
        return Finding(name, "warn", "the counters are held by another profiler (Nsight, DCGM's profiling module)",
                       "stop the other profiler, or pause DCGM's (dcgmi profile --pause) while gpu-exporter reads "
                       "GPM")  # fmt: skip
    if errors.get("no_permission"):
        return Finding(name, "warn", "profiling counters are restricted to administrators",
                       "run as root, or load the module with NVreg_RestrictProfilingToAdminUsers=0 and "
                       "reboot")  # fmt: skip
    return Finding(name, "warn", "no SM activity after two samples (the driver answered without GPM values)",
                   "check nvidia-smi dmon --gpm-metrics 2 -i N; a driver before R520 has no GPM")  # fmt: skip


def _dcgm(settings: Settings) -> Finding:
    try:
        backend, reason = select(replace(settings, backend="dcgm"))
    except BackendUnavailable as err:
        text = " ".join(str(err).split())
        if "not found" in text or "no module" in text.lower():
            return Finding("DCGM", "skip", f"not installed (optional): {text}")
        return Finding(
            "DCGM", "warn", text, "start the host engine (systemctl start nvidia-dcgm) or fix --dcgm.address"
        )
    backend.close()
    return Finding("DCGM", "ok", f"host engine reachable ({reason})")


def profiling(procfs: Path, dcgm: Finding) -> Finding:
    """Whether the profiling counters behind DCGM's profiling fields (SM activity and occupancy,
    tensor and DRAM activity, PCIe and NVLink bytes) may be read: the kernel module's
    ``RmProfilingAdminOnly`` (``NVreg_RestrictProfilingToAdminUsers``) in
    ``/proc/driver/nvidia/params`` against this process's effective uid. Only DCGM reads them here,
    so without DCGM there is nothing to check."""
    if dcgm.status == "skip":
        return Finding("profiling", "skip", "no DCGM: its profiling module is not used (GPM on NVML: GPU N GPM)")
    path = procfs / "driver" / "nvidia" / "params"
    try:
        text = path.read_text(errors="replace")
    except OSError as err:
        return Finding(
            "profiling", "skip", f"{path} not readable ({err.strerror or err}): the module's setting is unknown"
        )
    lines = [line for line in text.splitlines() if line.startswith("RmProfilingAdminOnly:")]
    setting = lines[0].split(":", 1)[1].strip() if lines else ""
    if setting == "0":
        return Finding("profiling", "ok", "open to every user (RmProfilingAdminOnly: 0)")
    if setting != "1":
        return Finding("profiling", "skip", f"{path} has no RmProfilingAdminOnly setting")
    if os.geteuid() == 0:
        return Finding("profiling", "ok", "restricted to admin users (RmProfilingAdminOnly: 1); this runs as root")
    return Finding(
        "profiling", "warn",
        "restricted to admin users (RmProfilingAdminOnly: 1) and this runs as an ordinary user: an embedded DCGM "
        "gets no profiling metrics (a root nv-hostengine still does)",
        "run nv-hostengine as root (--dcgm.address), or load the module with "
        "NVreg_RestrictProfilingToAdminUsers=0 (options nvidia in /etc/modprobe.d) and reboot",
    )  # fmt: skip


def _pod_resources(settings: Settings) -> Finding:
    if not settings.kubernetes:
        return Finding("pod-resources socket", "skip", "--kubernetes is off")
    path = settings.pod_resources_socket
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(3)
            sock.connect(path)
    except OSError as err:
        fix = "mount /var/lib/kubelet/pod-resources into the pod (hostPath) and run with access to it"
        return Finding("pod-resources socket", "fail", f"{path}: {err.strerror or err}", fix)
    return Finding("pod-resources socket", "ok", f"{path} accepts connections")


def diagnose(settings: Settings, dev: Path = Path("/dev")) -> list[Finding]:
    """Every check, in order."""
    findings = _device_nodes(dev)
    findings.append(_library())
    module, version = _kernel_module(Path(settings.procfs))
    findings.append(module)
    nvml, sampler = _nvml(settings, version)
    findings.extend(nvml)
    if sampler is not None:
        nodes = sum(1 for p in dev.glob("nvidia[0-9]*") if p.name[6:].isdigit())
        findings.extend(_answering(sampler, nodes))
    findings.append(_dcgm(settings))
    findings.append(profiling(Path(settings.procfs), findings[-1]))
    findings.append(_pod_resources(settings))
    return findings


def worst(findings: Sequence[Finding]) -> str:
    return max((f.status for f in findings), key=LEVELS.index, default="ok")


def report(findings: Sequence[Finding], as_json: bool) -> str:
    """Text (one line per check, its fix indented below) or JSON."""
    if as_json:
        level = worst(findings)
        body = {"healthy": EXIT[level] == 0, "worst": level, "checks": [asdict(f) for f in findings]}
        return json.dumps(body, indent=2) + "\n"
    lines = []
    shown: dict[str, str] = {}  # fix text → the first check it was printed for
    for finding in findings:
        lines.append(f"{finding.status.upper():4}  {finding.check:22} {finding.found}")
        if finding.fix and finding.status in ("warn", "fail"):
            first = shown.get(finding.fix)
            if first is None and CONTAINER_FIX in shown and "container" in finding.fix:
                first = shown[CONTAINER_FIX]  # the library's own wording of the same container advice
            if first is None:
                shown[finding.fix] = finding.check
                lines.append(f"{'':28}fix: {finding.fix}")
            else:  # one piece of advice, printed once
                lines.append(f"{'':28}fix: the same as for {first}")
    return "\n".join(lines) + "\n"


def main(settings: Settings, as_json: bool, dev: Path) -> int:
    findings = diagnose(settings, dev)
    sys.stdout.write(report(findings, as_json))
    return EXIT[worst(findings)]
