"""dcgm-exporter's own flags and environment variables (its 4.x ``--help``), for a drop-in.

dcgm-exporter flags that are the same setting as one of ours (``-a``, ``-c``, ``-f``, ``-k``,
``-r``, ``--web-config-file``, ``--log-format``, ...) are aliases in :data:`gpu_exporter.config.OPTIONS`
(:data:`ALIASES` lists them for the README). The rest are rows of :data:`FLAGS`: each is accepted
under dcgm-exporter's spellings and environment variable, and either sets a dcgm-exporter-mode
option (:class:`DcgmOptions`), changes one of our settings, or, where its meaning cannot apply
here, is accepted with one warning saying why. A value dcgm-exporter would reject exits 2.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

#: Longest window gpu-exporter keeps Xids and clock events for (the pipeline keeps one hour).
MAX_WINDOW_MS = 3_600_000
_IDS = r"\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*"
_DEVICES = re.compile(rf"^(?:f|g(?::{_IDS})?|i(?::{_IDS})?|g(?::{_IDS})?\+i(?::{_IDS})?)$")


@dataclass(frozen=True)
class Devices:
    """``-d``: which entities are reported in dcgm-exporter mode. ``flex`` (``f``): each GPU, or
    its GPU instances when it is in MIG mode; else ``gpus``/``instances`` as asked, each with an
    optional id set (GPU index; DCGM's host-wide GPU-instance entity id)."""

    flex: bool = True
    gpus: bool = False
    gpu_ids: frozenset[int] | None = None
    instances: bool = False
    instance_ids: frozenset[int] | None = None


@dataclass(frozen=True)
class DcgmOptions:
    """What dcgm-exporter's own flags ask for in dcgm-exporter mode, and the warnings to log once
    the logger is set up."""

    no_hostname: bool = False
    old_namespace: bool = False
    devices: Devices = Devices()
    xid_window_ms: int = 300_000
    clock_window_ms: int = 300_000
    replace_blanks: bool = False
    configmap: str = ""
    remote_host: str = ""
    pod_uid: bool = False
    pod_labels: bool = False
    pod_label_allowlist: str = ""
    warnings: tuple[str, ...] = field(default=(), compare=False)


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on", "t"):
        return True
    if lowered in ("0", "false", "no", "off", "f"):
        return False
    raise ValueError("true or false")


def _ids(text: str) -> frozenset[int]:
    ids: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        ids.update(range(int(low), int(high or low) + 1))
    return frozenset(ids)


def parse_devices(value: str) -> Devices:
    """``f``, ``g[:ids]``, ``i[:ids]`` or ``g[:ids]+i[:ids]`` (ids like ``0,2-4``)."""
    text = value.strip()
    if not _DEVICES.match(text):
        raise ValueError("f, g[:ids], i[:ids] or g[:ids]+i[:ids] with ids such as 0,2-4")
    if text == "f":
        return Devices()
    devices = Devices(flex=False)
    for part in text.split("+"):
        kind, _, ids = part.partition(":")
        if kind == "g":
            devices = replace(devices, gpus=True, gpu_ids=_ids(ids) if ids else None)
        else:
            devices = replace(devices, instances=True, instance_ids=_ids(ids) if ids else None)
    return devices


def _window(value: str) -> int:
    if not (value.strip().isascii() and value.strip().isdigit()) or not 1 <= int(value) <= MAX_WINDOW_MS:
        raise ValueError(f"a number of milliseconds from 1 to {MAX_WINDOW_MS} (gpu-exporter keeps one hour)")
    return int(value)


def _configmap(value: str) -> str:
    if value in ("", "none"):
        return ""
    namespace, sep, name = value.partition(":")
    if not sep or not namespace or not name:
        raise ValueError("NAMESPACE:NAME of a ConfigMap, or none")
    return value


def _text(value: str) -> str:
    return value


def _allowlist(value: str) -> str:
    for pattern in (p.strip() for p in value.split(",") if p.strip()):
        try:
            re.compile(pattern)
        except re.error as err:
            raise ValueError(f"comma-separated regular expressions ({pattern!r}: {err})") from None
    return value


@dataclass(frozen=True)
class DcgmFlag:
    """One dcgm-exporter flag: its spellings (long first), its variable, whether it is a switch,
    what it does here (README), and its effect: ``option`` (a :class:`DcgmOptions` field),
    ``setting`` (one of our Settings fields, set to ``value`` when the switch is on) or, with
    neither, ``warn`` (logged when the flag is given with a value other than ``default``)."""

    names: tuple[str, ...]
    env: str
    switch: bool
    does: str
    parse: Callable[[str], Any] = _text
    option: str = ""
    setting: str = ""
    value: Any = None
    warn: str = ""
    default: str = ""

    @property
    def dest(self) -> str:
        return "dcgmx_" + self.names[0].lstrip("-").replace("-", "_")


FLAGS: tuple[DcgmFlag, ...] = (
    DcgmFlag(("--no-hostname", "-n"), "DCGM_EXPORTER_NO_HOSTNAME", True,
             "Omit the Hostname label from every series.", _bool, option="no_hostname"),
    DcgmFlag(("--use-old-namespace", "-o"), "DCGM_EXPORTER_USE_OLD_NAMESPACE", True,
             "dcgm-exporter 1.x labels: `uuid` instead of `UUID`, and with `-k` `pod_name`, `pod_namespace`, "
             "`container_name` (use it with a 1.x counters file of lowercase names such as `dcgm_sm_clock`).",
             _bool, option="old_namespace"),
    DcgmFlag(("--devices", "-d"), "DCGM_EXPORTER_DEVICES_STR", False,
             "Which entities are reported: `f` (default: each GPU, or only its GPU instances when it is in "
             "MIG mode), `g[:ids]` (whole GPUs, by index, MIG or not), `i[:ids]` (GPU instances only, by "
             "DCGM's host-wide GPU-instance entity id: GPU index × 8 + the instance's place on its GPU), "
             "or `g[:ids]+i[:ids]`.", parse_devices, option="devices"),
    DcgmFlag(("--xid-count-window-size", "-x"), "DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE", False,
             "Window of DCGM_EXP_XID_ERRORS_COUNT in milliseconds (default 300000, at most 3600000).",
             _window, option="xid_window_ms"),
    DcgmFlag(("--clock-events-count-window-size",), "DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE", False,
             "Window of DCGM_EXP_CLOCK_EVENTS_COUNT in milliseconds (default 300000, at most 3600000).",
             _window, option="clock_window_ms"),
    DcgmFlag(("--replace-blanks-in-model-name", "--rbmn"), "DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME", True,
             "Write `modelName` with dashes for blanks.", _bool, option="replace_blanks"),
    DcgmFlag(("--configmap-data", "-m"), "DCGM_EXPORTER_CONFIGMAP_DATA", False,
             "`NAMESPACE:NAME`: the counters CSV is the `metrics` key of that ConfigMap, read once at start "
             "through the in-cluster API with the service-account token (needs `get` on it); wins over `-f`, "
             "switches to dcgm-exporter names. `none` (default): not used.", _configmap, option="configmap"),
    DcgmFlag(("--debug",), "DCGM_EXPORTER_DEBUG", True, "Same as `--log.level debug`.", _bool,
             setting="log_level", value="debug"),
    DcgmFlag(("--collect-dcp",), "DCGM_EXPORTER_COLLECT_DCP", True,
             "dcgm-exporter 2.x: enables the profiling collector (DCGM_FI_PROF_*: DCGM, or GPM on NVML).",
             _bool, setting="collectors+", value="profiling"),
    DcgmFlag(("--kubernetes-gpu-id-type",), "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE", False,
             "`uid` or `device-name`; accepted: gpu-exporter matches the kubelet's device ids against both "
             "GPU UUIDs and MIG device names.", lambda v: _choice(v, "uid", "device-name")),
    DcgmFlag(("--kubernetes-enable-pod-labels",), "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS", True,
             "With `-k`: series of a GPU or MIG instance allocated to one pod also carry that pod's Kubernetes "
             "labels (names with characters other than letters, digits and `_` turned to `_`), from this "
             "node's pods in the API server (`--kubernetes.api-url`; needs `list` on pods); the first 32 by "
             "name within 4 KiB, the rest counted in a warning.", _bool, option="pod_labels"),
    DcgmFlag(("--kubernetes-enable-pod-uid",), "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID", True,
             "With `-k`: series of a GPU or MIG instance allocated to one pod also carry its `pod_uid` (from this "
             "node's pods in the API server).", _bool, option="pod_uid"),
    DcgmFlag(("--kubernetes-pod-label-allowlist-regex",), "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX", False,
             "Only pod labels whose name matches one of these comma-separated regular expressions (whole "
             "name) are added (default: all, up to 32).", _allowlist, option="pod_label_allowlist"),
    DcgmFlag(("--kubernetes-virtual-gpus",), "KUBERNETES_VIRTUAL_GPUS", True,
             "Accepted with a warning: a GPU shared by several pods gets no pod labels (its values would be "
             "counted once per pod); gpu_allocation_info lists every pod.", _bool,
             warn="--kubernetes-virtual-gpus: a GPU shared by several pods gets no pod labels here; "
             "gpu_allocation_info lists each pod", default="false"),
    DcgmFlag(("--kubernetes-enable-dra",), "KUBERNETES_ENABLE_DRA", True,
             "Accepted: with `-k`, GPUs allocated through DRA claims are always attributed where the API "
             "server lists this node's ResourceSlices (`--kubernetes.api-url`).", _bool),
    DcgmFlag(("--switch-devices", "-s"), "DCGM_EXPORTER_OTHER_DEVICES_STR", False,
             "Accepted; NVSwitches are chosen with `--collector.nvswitch` (a value other than `f` warns).",
             parse_devices, warn="--switch-devices: NVSwitches are all reported with --collector.nvswitch; "
             "the selection is ignored", default="f"),
    DcgmFlag(("--cpu-devices", "-p"), "DCGM_EXPORTER_CPU_DEVICES_STR", False,
             "Accepted; gpu-exporter reports no CPUs (a value other than `f` warns).", parse_devices,
             warn="--cpu-devices: gpu-exporter reports no CPU entities", default="f"),
    DcgmFlag(("--fake-gpus",), "DCGM_EXPORTER_USE_FAKE_GPUS", True,
             "Accepted with a warning: DCGM's fake GPUs are not used.", _bool,
             warn="--fake-gpus: DCGM's injected fake GPUs are not used by gpu-exporter", default="false"),
    DcgmFlag(("--web-systemd-socket",), "DCGM_EXPORTER_SYSTEMD_SOCKET", True,
             "Accepted with a warning: gpu-exporter binds its own socket (`--web.listen-address`).", _bool,
             warn="--web-systemd-socket: socket activation is not supported; listening on --web.listen-address",
             default="false"),
    DcgmFlag(("--web-read-timeout",), "DCGM_EXPORTER_WEB_READ_TIMEOUT", False,
             "Accepted with a warning: use `--web.read-header-timeout`.",
             warn="--web-read-timeout is ignored: gpu-exporter bounds handshake and headers with "
             "--web.read-header-timeout", default="10s"),
    DcgmFlag(("--web-write-timeout",), "DCGM_EXPORTER_WEB_WRITE_TIMEOUT", False,
             "Accepted with a warning: responses are prepared before a scrape, so there is no write timeout.",
             warn="--web-write-timeout is ignored: metrics are rendered before the scrape arrives", default="15s"),
    DcgmFlag(("--enable-dcgm-log",), "DCGM_EXPORTER_ENABLE_DCGM_LOG", True,
             "Accepted with a warning: DCGM's own log is not forwarded.", _bool,
             warn="--enable-dcgm-log: DCGM's own log is not forwarded to standard output", default="false"),
    DcgmFlag(("--dcgm-log-level",), "DCGM_EXPORTER_DCGM_LOG_LEVEL", False,
             "Accepted with a warning (see `--enable-dcgm-log`).",
             warn="--dcgm-log-level: DCGM's own log is not forwarded", default="NONE"),
    DcgmFlag(("--container-labels",), "DCGM_EXPORTER_CONTAINER_LABELS", True,
             "Accepted with a warning: container runtime labels are not read.", _bool,
             warn="--container-labels: container runtime labels are not read", default="false"),
    DcgmFlag(("--container-runtime-socket",), "DCGM_CONTAINER_RUNTIME_SOCKET", False,
             "Accepted with a warning (see `--container-labels`).",
             warn="--container-runtime-socket: container runtime labels are not read", default=""),
    DcgmFlag(("--config-file",), "DCGM_EXPORTER_CONFIG_FILE", False,
             "Accepted with a warning: dcgm-exporter's YAML is not read; gpu-exporter's is `--config.file`.",
             warn="--config-file (dcgm-exporter's YAML) is not read: give its settings as flags, or use "
             "gpu-exporter's --config.file", default=""),
    DcgmFlag(("--dump-enabled",), "DCGM_EXPORTER_DUMP_ENABLED", True,
             "Accepted with a warning: debugging dumps are dcgm-exporter's internals.", _bool,
             warn="--dump-enabled: gpu-exporter writes no debugging dumps (see /, /readyz and the log)",
             default="false"),
    DcgmFlag(("--dump-directory",), "DCGM_EXPORTER_DUMP_DIRECTORY", False, "Accepted with a warning (no dumps).",
             warn="--dump-directory: gpu-exporter writes no debugging dumps", default="/tmp/dcgm-exporter-debug"),
    DcgmFlag(("--dump-retention",), "DCGM_EXPORTER_DUMP_RETENTION", False, "Accepted with a warning (no dumps).",
             warn="--dump-retention: gpu-exporter writes no debugging dumps", default="24"),
    DcgmFlag(("--dump-compression",), "DCGM_EXPORTER_DUMP_COMPRESSION", True, "Accepted with a warning (no dumps).",
             _bool, warn="--dump-compression: gpu-exporter writes no debugging dumps", default="true"),
    DcgmFlag(("--disable-startup-validate",), "DISABLE_STARTUP_VALIDATE", True,
             "Accepted; gpu-exporter has no start-up prerequisite check to skip.", _bool),
    DcgmFlag(("--enable-gpu-bind-unbind-watch",), "DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH", True,
             "Accepted; gpu-exporter always notices GPUs leaving and joining.", _bool),
    DcgmFlag(("--gpu-bind-unbind-poll-interval",), "DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL", False,
             "Accepted; GPUs are re-enumerated on gpu-exporter's own schedule."),
    DcgmFlag(("--enable-pprof",), "DCGM_EXPORTER_ENABLE_PPROF", True,
             "Accepted with a warning: there is no /debug/pprof.", _bool,
             warn="--enable-pprof: gpu-exporter serves no /debug/pprof", default="false"),
)  # fmt: skip

#: dcgm-exporter spellings that are aliases of our own flags: (its flag, its variable, our flag).
ALIASES: tuple[tuple[str, str, str], ...] = (
    ("-f / --collectors", "DCGM_EXPORTER_COLLECTORS", "--collectors"),
    ("-a / --address", "DCGM_EXPORTER_LISTEN", "--web.listen-address"),
    ("-c / --collect-interval", "DCGM_EXPORTER_INTERVAL", "--collect-interval"),
    ("-k / --kubernetes", "DCGM_EXPORTER_KUBERNETES", "--kubernetes"),
    ("-r / --remote-hostengine-info", "DCGM_REMOTE_HOSTENGINE_INFO", "--dcgm.address"),
    ("--web-config-file", "DCGM_EXPORTER_WEB_CONFIG_FILE", "--web.config.file"),
    ("--log-format", "DCGM_EXPORTER_LOG_FORMAT", "--log.format"),
    ("--pod-resources-kubelet-socket", "DCGM_POD_RESOURCES_KUBELET_SOCKET", "--kubernetes.pod-resources-socket"),
    ("--nvidia-resource-names", "NVIDIA_RESOURCE_NAMES", "--kubernetes.resources"),
    ("--hpc-job-mapping-dir", "DCGM_HPC_JOB_MAPPING_DIR", "--hpc-job-mapping-dir"),
)


def _choice(value: str, *allowed: str) -> str:
    if value not in allowed:
        raise ValueError("one of " + ", ".join(allowed))
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """dcgm-exporter's own flags, in a group of their own in --help."""
    group = parser.add_argument_group("dcgm-exporter flags (accepted for a drop-in; see the README)")
    for flag in FLAGS:
        extra = {"nargs": "?", "const": "true"} if flag.switch else {}
        group.add_argument(
            *flag.names,
            dest=flag.dest,
            metavar="BOOL" if flag.switch else "VALUE",
            help=f"{flag.does.replace('`', '')} [{flag.env}]".replace("%", "%%"),
            **extra,  # type: ignore[arg-type]  # argparse's overloads do not model optional-value flags
        )


def resolve(flags: Mapping[str, Any], env: Mapping[str, str]) -> tuple[DcgmOptions, dict[str, Any]]:
    """The given dcgm-exporter flags (flag over variable) → its options and the changes to our
    settings (``collectors+`` adds a collector). Raises ValueError naming the flag or variable."""
    options: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    warnings: list[str] = []
    for flag in FLAGS:
        raw = flags.get(flag.dest)
        source = flag.names[0]
        if raw is None and flag.env in env:
            raw, source = env[flag.env], flag.env
        if raw is None:
            continue
        try:
            value = flag.parse(str(raw))
        except ValueError as err:
            raise ValueError(f"{source}={str(raw)!r} is not allowed: use {err}") from None
        if flag.option:
            options[flag.option] = value
            if flag.option == "configmap" and value:
                settings["metric_names"] = "dcgm-exporter"  # as -f: a counters list is a dcgm-exporter drop-in
        elif flag.setting:
            if value is True:
                settings[flag.setting] = flag.value
        elif flag.warn and str(raw) != flag.default and value not in (False, ""):
            warnings.append(flag.warn)
    return DcgmOptions(**options, warnings=tuple(warnings)), settings


def with_remote_host(options: DcgmOptions, address: str, kubernetes: bool) -> DcgmOptions:
    """As dcgm-exporter with ``-r HOST:PORT`` and without ``-k``: the Hostname label is the remote
    engine's host (its GPUs are that host's), not ``NODE_NAME`` or this host's name. The pod-label
    flags without ``-k`` get one warning each: there are no pods to label."""
    if not kubernetes:
        unused = [
            f"{flag}: no pods are attributed without -k/--kubernetes; no {what} label"
            for flag, what, on in (
                ("--kubernetes-enable-pod-labels", "pod", options.pod_labels),
                ("--kubernetes-enable-pod-uid", "pod_uid", options.pod_uid),
            )
            if on
        ]
        options = replace(options, warnings=(*options.warnings, *unused))
    if not address or kubernetes:
        return options
    return replace(options, remote_host=address.rpartition(":")[0].strip("[]"))
