"""Settings: flags, environment and YAML file merged into one frozen :class:`Settings`.

Precedence is flag > environment (``GPU_EXPORTER_…``) > ``--config.file`` > default. Every
option is one row of :data:`OPTIONS` (the general rows of :mod:`gpu_exporter.options`, each backend's from
the backend registry, and ``--simulate``), which also generates the flags, the
environment names, the allowed YAML keys and the README's flag table. Any bad value raises
:class:`ConfigError` whose message names the setting, the value and what is allowed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_exporter.backends import registry
from gpu_exporter.catalogue import COLLECTORS, DEFAULT_COLLECTORS, Detail
from gpu_exporter.compat.flags import DcgmOptions, resolve, with_remote_host
from gpu_exporter.compat.releases import IMAGE, ReleaseError, by_version
from gpu_exporter.files import FileProblem, load_yaml, quote, read_text
from gpu_exporter.options import OPTIONS as GENERAL
from gpu_exporter.options import Option, _boolean
from gpu_exporter.simulate.builtins import resolve as resolve_scenario


def _scenario(value: str) -> str:
    """A built-in scenario name or a readable scenario file (checked now, so a typo exits 2); empty: off."""
    if value:
        resolve_scenario(value)
    return value


#: ``--simulate``: a simulated host is no backend of the registry (the NVML backend over a simulated library).
SIMULATE = Option(
    "--simulate", "simulate", ("simulate",), _scenario,
    "Serve a simulated GPU host instead of reading GPUs (no driver needed, every output marked "
    "simulated): a built-in scenario (default, mig, old-gpu, lost-gpu; the flag alone is default) or "
    "a scenario file in the test fake's format (default: off).", "SCENARIO", bare="default",
)  # fmt: skip


def _dcgm_exporter_version(value: str) -> str:
    """A dcgm-exporter version gpu-exporter has a profile for (kept as written)."""
    try:
        by_version(value)
    except ReleaseError:
        raise ValueError(f"a dcgm-exporter release up to 4.10.x, such as 4.10.0, 4.8.0-4.10.0 or {IMAGE}") from None
    return value


#: ``--dcgm-exporter.version``: its values are the release profiles of the dcgm-exporter mode.
DCGM_EXPORTER_VERSION = Option(
    "--dcgm-exporter.version",
    "dcgm_exporter_version",
    ("dcgm-exporter", "version"),
    _dcgm_exporter_version,
    "The dcgm-exporter release to be a drop-in for: its default counters, host and driver labels (4.8.2, "
    "4.8.3, 4.8.4, 4.9.0, 4.10.0, a release tag such as 4.8.0-4.10.0 or its image reference); default: the "
    "release the counters file's names show, else 4.8.2.",
    "VERSION",
    aliases=("--dcgm-exporter-version",),
    env_aliases=("DCGM_EXPORTER_VERSION",),
)
#: The whole option table: the general rows, ``--backend`` and each backend's own, ``--simulate``,
#: ``--dcgm-exporter.version``.
OPTIONS: tuple[Option, ...] = (*GENERAL, *registry.OPTIONS, SIMULATE, DCGM_EXPORTER_VERSION)


class ConfigError(ValueError):
    """A setting has a value that cannot be used; the message is the whole one-line explanation."""


@dataclass(frozen=True)
class Settings:
    """Everything the exporter is configured with. Durations are seconds."""

    listen_address: str = ":9400"
    telemetry_path: str = "/metrics"
    collect_interval: float = 1.0
    collect_interval_chosen: bool = False  # given by a flag, the environment or the file (else the backend's)
    backend: str = "auto"
    simulate: str = ""  # a built-in scenario name or a scenario file; empty: real GPUs
    dcgm_address: str = ""
    collectors: frozenset[str] = DEFAULT_COLLECTORS
    #: Collectors switched on or off explicitly (flag, environment or file): defaults may follow the
    #: counters list in dcgm-exporter mode, these never do.
    collectors_chosen: frozenset[str] = frozenset()
    log_level: str = "info"
    log_format: str = "text"
    ready_without_gpus: bool = False
    metric_names: str = "native"
    metrics_detail: Detail = "lean"
    collectors_file: str = ""
    hostname_label: str = ""  # empty: the dcgm-exporter profile's
    dcgm_exporter_version: str = ""  # empty: the profile the counters file's names show
    #: The dcgm-exporter profile chosen at start-up (:mod:`gpu_exporter.compat.releases`).
    dcgm_exporter_release: str = "4.8.2"
    kubernetes: bool = False
    pod_resources_socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    kubelet_refresh: float = 10.0
    kubernetes_resources: str = ""
    kubelet_url: str = "https://127.0.0.1:10250/pods"
    kubelet_ca_file: str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
    kubelet_insecure: bool = False
    kubelet_token_file: str = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    kubernetes_api_url: str = "auto"
    kubernetes_node: str = ""
    node_condition: str = ""  # --kubernetes.node-condition: the condition type, empty: off
    node_events: bool = False  # --kubernetes.node-condition-events: an Event on each transition
    expected_gpus_label: str = ""  # --kubernetes.expected-gpus-label: the node label, empty: not read
    config_file: str = ""
    web_config_file: str = ""
    max_connections: int = 512
    header_timeout: float = 10.0
    idle_timeout: float = 120.0
    probes_without_auth: bool = False
    vanished_retention: float = 3600.0
    expected_gpus: int = 0  # 0: no expected inventory
    unsupported_retry: float = 60.0
    rediscover_interval: float = 30.0
    max_processes: int = 16
    procfs: str = "/proc"
    passwd: str = ""
    hpc_job_dir: str = ""
    control_socket: str = "/run/gpu-exporter/control.sock"
    kubernetes_node_pause: bool = False
    dcgm_exporter: DcgmOptions = DcgmOptions()

    @property
    def host(self) -> str:
        """Address to bind; empty in the listen address means every interface."""
        host = self.listen_address.rpartition(":")[0].strip("[]")
        return host or "0.0.0.0"

    @property
    def port(self) -> int:
        """TCP port to bind."""
        return int(self.listen_address.rpartition(":")[2])


CONFIG_FILE_FLAG = "--config.file"
CONFIG_FILE_ENV = "GPU_EXPORTER_CONFIG_FILE"


def collector_env(name: str) -> str:
    """Environment variable enabling (true) or disabling (false) one collector."""
    return f"GPU_EXPORTER_COLLECTOR_{name.upper()}"


def _parse(option_name: str, value: object, parse: Callable[[str], Any]) -> Any:
    if isinstance(value, (dict, list)):
        raise ConfigError(f"{option_name} is a {type(value).__name__}, not a single value")
    text = str(value).lower() if isinstance(value, bool) else str(value)
    try:
        return parse(text)
    except ValueError as err:
        raise ConfigError(f"{option_name}={quote(text)} is not allowed: use {err}") from None


def _load_file(path: str) -> dict[str, Any]:
    name = quote(path)
    try:
        text = read_text(path)
    except FileProblem as err:
        if "cannot be read" in str(err):
            raise ConfigError(f"{CONFIG_FILE_FLAG}={name} {err}; give a readable YAML file") from None
        raise ConfigError(f"{CONFIG_FILE_FLAG}={name} {err}; give a YAML file of settings") from None
    try:
        data = load_yaml(text)
    except FileProblem as err:
        raise ConfigError(f"{CONFIG_FILE_FLAG}={name}: {err}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{CONFIG_FILE_FLAG}={name}: the top level must be a mapping of settings")
    return _flatten(name, data)


def _flatten(path: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """YAML mapping → {"web.listen-address": value, "collectors.pcie": value, ...}, unknown keys rejected."""
    allowed = {".".join(option.yaml_path) for option in OPTIONS} | {f"collectors.{name}" for name in COLLECTORS}
    flat: dict[str, Any] = {}

    def walk(prefix: str, node: Mapping[str, Any]) -> None:
        for key, value in node.items():
            dotted = f"{prefix}{key}"
            if isinstance(value, dict):
                walk(dotted + ".", value)
            elif dotted in allowed:
                flat[dotted] = value
            else:
                known = ", ".join(sorted(allowed))
                raise ConfigError(f"{CONFIG_FILE_FLAG}={path}: unknown key {quote(dotted)}; allowed keys: {known}")

    walk("", data)
    return flat


def _simulation(values: dict[str, Any]) -> None:
    """--simulate reads no GPU library: it is its own backend; a built-in's processes get the
    simulated /proc (and the passwd naming their owners) shipped with it unless --path.procfs is given,
    a scenario file's are named by the scenario (procfs "": never this host's /proc)."""
    from gpu_exporter.simulate.builtins import passwd_of, procfs_of

    if values.get("backend", "auto") not in ("auto", "simulate"):
        raise ConfigError(f"--simulate and --backend={values['backend']} exclude each other: drop one of them")
    values["backend"] = "simulate"
    procfs = procfs_of(values["simulate"])
    if "procfs" not in values:
        # Never this host's /proc: a scenario's pids are invented, and pid 1 here is this host's init.
        # Without a simulated /proc of its own, the scenario's gpuN.process.K.name names its processes.
        values["procfs"] = procfs
        if procfs and "passwd" not in values:  # the simulated processes' owners, whatever this host's users are
            values["passwd"] = passwd_of(values["simulate"])


def load(flags: Mapping[str, str | None], collector_flags: Mapping[str, bool], env: Mapping[str, str]) -> Settings:
    """Merge flag values (by Settings field; None = not given), collector flags, environment and file."""
    config_file = flags.get("config_file") or env.get(CONFIG_FILE_ENV, "")
    from_file = _load_file(config_file) if config_file else {}
    values: dict[str, Any] = {"config_file": config_file}
    for option in OPTIONS:
        yaml_key = ".".join(option.yaml_path)
        flag_value = flags.get(option.field)
        env_name = next((name for name in option.envs if name in env), None)
        if flag_value is not None:
            values[option.field] = _parse(option.flag, flag_value, option.parse)
        elif env_name is not None:
            values[option.field] = _parse(env_name, env[env_name], option.parse)
        elif yaml_key in from_file:
            values[option.field] = _parse(f"{quote(config_file)}: {yaml_key}", from_file[yaml_key], option.parse)
    enabled = set(DEFAULT_COLLECTORS)
    chosen = set()
    for name in COLLECTORS:
        file_key = f"collectors.{name}"
        if name in collector_flags:
            on = collector_flags[name]
        elif collector_env(name) in env:
            on = _parse(collector_env(name), env[collector_env(name)], _boolean)
        elif file_key in from_file:
            on = _parse(f"{quote(config_file)}: {file_key}", from_file[file_key], _boolean)
        else:
            continue
        chosen.add(name)
        if on:
            enabled.add(name)
        else:
            enabled.discard(name)
    try:
        values["dcgm_exporter"], changes = resolve(flags, env)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if "collectors+" in changes:  # dcgm-exporter 2.x --collect-dcp
        chosen.add(changes["collectors+"])
        enabled.add(changes.pop("collectors+"))
    for name, value in changes.items():  # dcgm-exporter's flags yield to ours (--debug vs --log.level)
        values.setdefault(name, value)
    values["collectors"] = frozenset(enabled)
    values["collect_interval_chosen"] = "collect_interval" in values
    values["collectors_chosen"] = frozenset(chosen)
    values["dcgm_exporter"] = with_remote_host(
        values["dcgm_exporter"], values.get("dcgm_address", ""), values.get("kubernetes", False)
    )
    if values.get("simulate"):
        _simulation(values)
    if values.get("collectors_file") and "metric_names" not in values:
        values["metric_names"] = "dcgm-exporter"  # a counters file is a dcgm-exporter drop-in
    return Settings(**values)
