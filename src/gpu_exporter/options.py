"""The option table: one :class:`Option` row per setting, which generates the flags, the environment
names, the allowed YAML keys and the README's flag table, and the parsers of its values. This module
holds the general rows; each backend's own come from the backend registry, and
:data:`gpu_exporter.config.OPTIONS` (which adds ``--simulate``) is the whole table. A parser
raises ``ValueError`` whose message says what is allowed; :mod:`gpu_exporter.config` merges the
values into :class:`~gpu_exporter.config.Settings`.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpu_exporter.catalogue import DETAILS

_DURATION = re.compile(r"^(?P<number>\d+(?:\.\d+)?)(?P<unit>ms|s|m|h)?$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
MIN_INTERVAL = 0.1
MAX_INTERVAL = 3600.0


def parse_duration(value: str, low: float = MIN_INTERVAL, high: float = MAX_INTERVAL) -> float:
    """``1s``, ``500ms``, ``2m``, ``1h`` or a bare number of milliseconds (as dcgm-exporter's
    ``-c 30000``) → seconds, from ``low`` to ``high``."""
    match = _DURATION.match(value.strip())
    if not match:
        raise ValueError("a duration such as 1s, 500ms, 2m or a number of milliseconds")
    seconds = float(match["number"]) * _DURATION_UNITS[match["unit"] or "ms"]
    if not low <= seconds <= high:
        raise ValueError(f"a duration from {low:g}s to {high:g}s")
    return seconds


def _timeout(low: float, high: float) -> Callable[[str], float]:
    def parse(value: str) -> float:
        return parse_duration(value, low, high)

    return parse


def _interval_or_off(value: str) -> float:
    """``0`` (off) or a duration from 1s to 24h."""
    if value.strip() in ("0", "0s"):
        return 0.0
    try:
        return parse_duration(value, 1.0, 86400.0)
    except ValueError:
        raise ValueError("0 (off) or a duration from 1s to 24h such as 30s") from None


def _integer(low: int, high: int) -> Callable[[str], int]:
    def parse(value: str) -> int:
        if not (value.strip().isascii() and value.strip().isdigit()) or not low <= int(value) <= high:
            raise ValueError(f"a whole number from {low} to {high}")
        return int(value)

    return parse


def _file_name(value: str) -> str:
    if len(value) > 4096 or "\x00" in value:
        raise ValueError("a file name")
    return value


def _listen_address(value: str) -> str:
    host, sep, port = value.rpartition(":")
    # Port 0 asks the kernel for a free port; the "listening on" start-up line names the one it gave
    # (tests bind port 0 and read it there, so no port is chosen by one process and bound by another).
    if not sep or not (port.isascii() and port.isdigit()) or not 0 <= int(port) < 65536:
        raise ValueError("HOST:PORT or :PORT with a port from 0 (any free port) to 65535, e.g. :9400 or 127.0.0.1:9400")
    if host.startswith("[") != host.endswith("]") or (":" in host and not host.startswith("[")):
        raise ValueError("an IPv6 host in brackets, e.g. [::1]:9400")
    return value


_LITERAL_PATH = re.compile(r"^(/[A-Za-z0-9._~-]+)+$")
RESERVED_PATHS = ("/", "/health", "/healthz", "/readyz")


def _telemetry_path(value: str) -> str:
    """A literal absolute path (no route syntax such as ``{name:path}``): segments of letters,
    digits and ``._~-``, no ``.``/``..`` segment, no trailing slash, not one of the fixed routes."""
    segments = value.split("/")[1:]
    if (
        len(value) > 256
        or not _LITERAL_PATH.match(value)
        or any(part in (".", "..") for part in segments)
        or value.rstrip("/") in RESERVED_PATHS
    ):
        raise ValueError(
            "a literal path of letters, digits and ._~- segments such as /metrics or /gpu/metrics, "
            "other than /, /health, /healthz and /readyz"
        )
    return value


_CONDITION_TYPE = re.compile(r"^[A-Z][A-Za-z0-9]{0,62}$")
# A Kubernetes label key: an optional DNS-subdomain prefix (at most 253 characters) and "/", then a name
# of at most 63 letters, digits, '-', '_', '.', beginning and ending with a letter or digit.
_LABEL_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def _label_key(value: str) -> str:
    """A node label's key: empty (off) or ``[prefix/]name`` as Kubernetes allows."""
    prefix, slash, name = value.rpartition("/")
    if value and (not _LABEL_NAME.match(name) or (slash and (len(prefix) > 253 or not _LABEL_PREFIX.match(prefix)))):
        raise ValueError("a Kubernetes label key such as gpu-exporter.io/expected-gpus, or empty (off)")
    return value


def _condition_type(value: str) -> str:
    """A node condition type: empty (off) or a CamelCase word, as Kubernetes' own conditions."""
    if value and not _CONDITION_TYPE.match(value):
        raise ValueError("a CamelCase condition type of letters and digits such as GPUHealthy, or empty (off)")
    return value


def choice(*allowed: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if value.lower() not in allowed:
            raise ValueError("one of " + ", ".join(allowed))
        return value.lower()

    return parse


def _choice_exact(*allowed: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if value not in allowed:
            raise ValueError("one of " + ", ".join(allowed))
        return value

    return parse


def _kubelet_url(value: str) -> str:
    """``https://HOST[:PORT][/PATH]`` (the kubelet's ``/pods``), or "" for not asked."""
    if not value:
        return ""
    expected = "an https:// URL such as https://127.0.0.1:10250/pods, or empty (not asked)"
    if not value.isprintable() or any(c.isspace() for c in value) or len(value) > 2048:
        raise ValueError(expected)
    try:
        parts = urllib.parse.urlsplit(value)
        port = parts.port
    except ValueError:
        raise ValueError(f"{expected}; the port is from 1 to 65535") from None
    if parts.scheme != "https" or not parts.hostname or port == 0 or parts.username or parts.fragment:
        raise ValueError(expected)
    return value


def optional_address(value: str) -> str:
    """HOST:PORT, also as dcgm-exporter's ``tcp://HOST:PORT`` (``-r``)."""
    value = value.removeprefix("tcp://")
    if value and value.rpartition(":")[2].lstrip("0") == "":
        raise ValueError("HOST:PORT with a port from 1 to 65535, e.g. 127.0.0.1:5555")
    return _listen_address(value) if value else ""


def _socket_path(value: str) -> str:
    """An absolute path for a Unix socket (the kernel limits it to 107 bytes), or "" for off."""
    if value and (not value.startswith("/") or len(value.encode()) > 107 or "\x00" in value):
        raise ValueError("an absolute path of at most 107 bytes such as /run/gpu-exporter/control.sock, or empty (off)")
    return value


def _boolean(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("true or false")


@dataclass(frozen=True)
class Option:
    """One setting: its flag, Settings field, YAML path, parser, and help for --help and the README.

    ``aliases`` are further flags (dcgm-exporter's short ones), ``env_aliases`` further environment
    variables read after ours (dcgm-exporter's), ``switch`` makes the flag usable without a value
    (meaning true), ``bare`` is the value of a flag given without one (``--simulate``).
    """

    flag: str
    field: str
    yaml_path: tuple[str, ...]
    parse: Callable[[str], Any]
    help: str
    metavar: str
    aliases: tuple[str, ...] = ()
    env_aliases: tuple[str, ...] = ()
    switch: bool = False
    bare: str = ""

    @property
    def env(self) -> str:
        """Environment variable: GPU_EXPORTER_ + the flag upper-cased, dots and dashes as _."""
        return "GPU_EXPORTER_" + re.sub(r"[.-]", "_", self.flag.removeprefix("--")).upper()

    @property
    def envs(self) -> tuple[str, ...]:
        """Every environment variable of this setting, strongest first."""
        return (self.env, *self.env_aliases)


OPTIONS: tuple[Option, ...] = (
    Option("--web.listen-address", "listen_address", ("web", "listen-address"), _listen_address,
           "Address to serve HTTP on (default :9400, every interface; port 0: any free port, which the start-up "
           "line names).", "HOST:PORT",
           aliases=("-a", "--address"), env_aliases=("DCGM_EXPORTER_LISTEN",)),
    Option("--web.telemetry-path", "telemetry_path", ("web", "telemetry-path"), _telemetry_path,
           "Path of the metrics endpoint (default /metrics).", "PATH"),
    Option("--collect-interval", "collect_interval", ("collect-interval",), parse_duration,
           "Time between sampling cycles, 100ms to 1h (default 5s on NVML, whose utilisation, clocks and power "
           "come from the driver's sample buffers, 1s on DCGM and for snapshot); a bare number is milliseconds.",
           "DURATION",
           aliases=("-c",), env_aliases=("DCGM_EXPORTER_INTERVAL",)),
    Option("--gpu.vanished-retention", "vanished_retention", ("gpu", "vanished-retention"), _timeout(1.0, 168 * 3600.0),
           "How long a GPU that left the driver's device list keeps reporting gpu_up 0 before its series are "
           "dropped, 1s to 168h (default 1h).", "DURATION"),
    Option("--expected-gpus", "expected_gpus", ("expected-gpus",), _integer(0, 1024),
           "GPUs this node should have, 1 to 1024; fewer listed (missing since boot, or dropped by the driver) "
           "turns the health model to fail with action reboot, and gpu_exporter_gpus_expected is served beside "
           "gpu_exporter_gpus_present; 0 (default) expects whatever the driver lists, or what the node label of "
           "--kubernetes.expected-gpus-label says.", "N"),
    Option("--gpu.rediscover-interval", "rediscover_interval", ("gpu", "rediscover-interval"), _interval_or_off,
           "How often GPUs and MIG instances are enumerated again while every GPU answers, so instances "
           "created or destroyed at run time (e.g. by a DRA driver) and hot-added GPUs are picked up; "
           "0 turns it off, else 1s to 24h (default 30s).", "DURATION"),
    Option("--unsupported.retry-interval", "unsupported_retry", ("unsupported", "retry-interval"),
           _timeout(1.0, 86400.0),
           "How often a value the driver called unsupported is asked for again, 1s to 24h (default 1m); it "
           "is also asked again after a re-enumeration that finds the devices changed.", "DURATION"),
    Option("--collector.processes.max-per-gpu", "max_processes", ("collector", "processes", "max-per-gpu"),
           _integer(1, 1024),
           "Process series per GPU or MIG instance, largest memory first; the rest are summed into one "
           "pid=\"other\" series (1 to 1024, default 16).", "N"),
    Option("--path.procfs", "procfs", ("path", "procfs"), str,
           "Where the host's /proc is mounted, for process names and owners (default /proc; in a container, "
           "mount the host's /proc there and share the host PID namespace).", "PATH"),
    Option("--path.passwd", "passwd", ("path", "passwd"), _file_name,
           "A passwd file to name process owners from (e.g. the host's /etc/passwd mounted into the container, "
           "whose own user database does not know the host's users); default: the exporter's own user "
           "database.", "FILE"),
    Option("--hpc-job-mapping-dir", "hpc_job_dir", ("hpc-job-mapping-dir",), str,
           "Directory of per-GPU job files (named by GPU index, or index.GPU-instance for MIG, holding job ids) "
           "that a workload manager writes; each job becomes a gpu_allocation_info series with hpc_job; in "
           "dcgm-exporter mode, as dcgm-exporter, every series of that GPU or instance is copied once per job "
           "with hpc_job (default: none).", "DIR", env_aliases=("DCGM_HPC_JOB_MAPPING_DIR",)),
    Option("--ready.without-gpus", "ready_without_gpus", ("ready", "without-gpus"), _boolean,
           "Let /readyz answer 200 on a host with no GPU at all (default false).", "BOOL", switch=True),
    Option("--metric-names", "metric_names", ("metric-names",), choice("native", "dcgm-exporter"),
           "Names, units and labels: native, or dcgm-exporter's DCGM_FI_* (default native; dcgm-exporter "
           "when --collectors is given).", "SCHEME"),
    Option("--metrics.detail", "metrics_detail", ("metrics", "detail"), choice(*DETAILS),
           "How much the native exposition says: lean (default) leaves out near-static settings, values "
           "derivable from others, rarely-set clock event reasons and the Xid codes not seen yet (the shipped "
           "alerts, recording rules and dashboards need none of them); full adds them all (docs/metrics.md "
           "marks which). dcgm-exporter names ignore it. The status page and snapshot show everything either way.",
           "LEVEL"),
    Option("--collectors", "collectors_file", ("collectors-file",), str,
           "dcgm-exporter counters CSV choosing the DCGM_FI_* fields to export (default: dcgm-exporter's "
           "default list).", "FILE", aliases=("-f",), env_aliases=("DCGM_EXPORTER_COLLECTORS",)),
    Option("--dcgm-exporter.hostname-label", "hostname_label", ("dcgm-exporter", "hostname-label"),
           _choice_exact("Hostname", "hostname"),
           "Name of the host label in dcgm-exporter mode: Hostname (releases to 4.8.2) or hostname (4.8.3 and "
           "later); default: the dcgm-exporter profile's.", "NAME"),
    Option("--kubernetes", "kubernetes", ("kubernetes",), _boolean,
           "Attribute GPUs to Kubernetes pods through the kubelet's pod-resources API: gpu_allocation_info "
           "series, and pod, namespace, container labels in dcgm-exporter mode (default false).",
           "BOOL", aliases=("-k",), env_aliases=("DCGM_EXPORTER_KUBERNETES",), switch=True),
    Option("--kubernetes.pod-resources-socket", "pod_resources_socket", ("kubernetes", "pod-resources-socket"), str,
           "The kubelet's pod-resources socket (default /var/lib/kubelet/pod-resources/kubelet.sock; mount its "
           "directory from the host).", "PATH",
           aliases=("--pod-resources-kubelet-socket",), env_aliases=("DCGM_POD_RESOURCES_KUBELET_SOCKET",)),
    Option("--kubernetes.refresh-interval", "kubelet_refresh", ("kubernetes", "refresh-interval"),
           _timeout(1.0, 3600.0),
           "How often the kubelet is asked for pod allocations, 1s to 1h (default 10s); never per scrape.",
           "DURATION"),
    Option("--kubernetes.kubelet-url", "kubelet_url", ("kubernetes", "kubelet-url"), _kubelet_url,
           "The kubelet's /pods API, for the namespace, pod and container of a process's pod UID (default "
           "https://127.0.0.1:10250/pods; in a DaemonSet use the node's IP; empty: not asked).", "URL"),
    Option("--kubernetes.kubelet-ca-file", "kubelet_ca_file", ("kubernetes", "kubelet-ca-file"), str,
           "CA that signed the kubelet's serving certificate (default the service account's ca.crt).", "FILE"),
    Option("--kubernetes.kubelet-token-file", "kubelet_token_file", ("kubernetes", "kubelet-token-file"), str,
           "Bearer token for the kubelet's /pods, re-read at every request (default the service account's "
           "token; it needs get on nodes/proxy).", "FILE"),
    Option("--kubernetes.kubelet-insecure-skip-verify", "kubelet_insecure",
           ("kubernetes", "kubelet-insecure-skip-verify"), _boolean,
           "Do not verify the kubelet's certificate (sends the service-account token to whatever answers; "
           "only for self-signed kubelet certificates; default false).", "BOOL", switch=True),
    Option("--kubernetes.api-url", "kubernetes_api_url", ("kubernetes", "api-url"), str,
           "The Kubernetes API server, for the GPU and MIG UUIDs of DRA-allocated devices (this node's "
           "ResourceSlices) and the pods of process pod UIDs (this node's pods), watched, and listed every 3 "
           "refresh intervals, with the token and CA of --kubernetes.kubelet-token-file/-ca-file (default auto: "
           "in a pod, https://KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT; empty: not asked).", "URL"),
    Option("--kubernetes.node-name", "kubernetes_node", ("kubernetes", "node-name"), str,
           "This node's name in the API server, to list only its ResourceSlices and pods (default the "
           "NODE_NAME variable; without one the API server is not asked).", "NAME"),
    Option("--kubernetes.node-condition", "node_condition", ("kubernetes", "node-condition"), _condition_type,
           "Set this condition type (CamelCase, e.g. GPUHealthy) on this node's status through the API server: "
           "True while every expected GPU is healthy, False with the GPUs and actions when one needs action, "
           "Unknown while the backend is down (needs get on nodes and patch on nodes/status, the API server and "
           "node name of --kubernetes.api-url and --kubernetes.node-name; default empty: off).", "TYPE"),
    Option("--kubernetes.node-condition-events", "node_events", ("kubernetes", "node-condition-events"), _boolean,
           "Also create one Kubernetes Event (core/v1, namespace default, involving the Node, as kubectl describe "
           "node shows) on each change of --kubernetes.node-condition to True or False: reason and message as the "
           "condition's, type Warning or Normal, source gpu-exporter; a refused Event is retried with backoff and "
           "counted, never holding the condition back (needs create on events; default false).",
           "BOOL", switch=True),
    Option("--kubernetes.expected-gpus-label", "expected_gpus_label", ("kubernetes", "expected-gpus-label"),
           _label_key,
           "Take the GPUs this node should have from this label of its Node (e.g. gpu-exporter.io/expected-gpus=8, "
           "set where the node's hardware is known), read every 5 s so a relabel takes effect without a restart; "
           "a value other than a whole number from 0 to 1024 is logged and ignored; --expected-gpus wins over it "
           "(needs get on nodes and the API server and node name of --kubernetes.api-url and "
           "--kubernetes.node-name; default empty: not read).", "LABEL"),
    Option("--kubernetes.resources", "kubernetes_resources", ("kubernetes", "resources"), str,
           "Extra device-plugin resource names that are GPUs, comma-separated (nvidia.com/gpu, "
           "nvidia.com/gpu.shared and nvidia.com/mig-* always are).", "NAMES",
           aliases=("--nvidia-resource-names",), env_aliases=("NVIDIA_RESOURCE_NAMES",)),
    Option("--control.socket", "control_socket", ("control", "socket"), _socket_path,
           "Local socket over which 'gpu-exporter pause' and 'gpu-exporter resume' ask this exporter to release "
           "the GPUs (or their profiling counters) for a while, owner-only (mode 0600); empty turns it off "
           "(default /run/gpu-exporter/control.sock).", "PATH"),
    Option("--kubernetes.node-pause", "kubernetes_node_pause", ("kubernetes", "node-pause"), _boolean,
           "Pause when this node carries the label gpu-exporter.io/pause=full or =profiling, for the duration in "
           "its annotation gpu-exporter.io/pause-for (default 10m, at most 1h); removing the label resumes. "
           "Reads the node from --kubernetes.api-url every 5 s (RBAC: get on nodes; default false).",
           "BOOL", switch=True),
    Option("--log.level", "log_level", ("log", "level"), choice("debug", "info", "warning", "error"),
           "Least severe log level printed: debug, info, warning or error (default info).", "LEVEL"),
    Option("--log.format", "log_format", ("log", "format"), choice("text", "json"),
           "Log line format: text or json (default text).", "FORMAT",
           aliases=("--log-format",), env_aliases=("DCGM_EXPORTER_LOG_FORMAT",)),
    Option("--web.config.file", "web_config_file", ("web", "config-file"), _file_name,
           "exporter-toolkit web config (YAML) for TLS, client certificates and basic auth; re-read when it "
           "or its certificates change (see Security).", "FILE",
           aliases=("--web-config-file",), env_aliases=("DCGM_EXPORTER_WEB_CONFIG_FILE",)),
    Option("--web.probes-without-auth", "probes_without_auth", ("web", "probes-without-auth"), _boolean,
           "Answer /healthz, /readyz and /health without basic auth, for kubelet probes (default false).",
           "BOOL",
           switch=True),
    Option("--web.max-connections", "max_connections", ("web", "max-connections"), _integer(8, 65536),
           "Most open HTTP connections, further capped below the file limit; one source address holds at "
           "most a quarter of them, and at the cap the address holding the most gives way (default 512).", "N"),
    Option("--web.read-header-timeout", "header_timeout", ("web", "read-header-timeout"), _timeout(0.5, 300.0),
           "Time a new connection has to complete its TLS handshake and request headers (default 10s).",
           "DURATION"),
    Option("--web.idle-timeout", "idle_timeout", ("web", "idle-timeout"), _timeout(0.5, 3600.0),
           "Time a keep-alive connection may wait for its next request (default 120s).", "DURATION"),
)  # fmt: skip
