"""What the dashboards show: every row, panel and query, as data. ``generate.py`` turns it into Grafana JSON.

Query conventions: ``N`` filters a node-level series by ``$job`` and ``$instance``, ``G`` a GPU-level one
also by ``$gpu``; rates use ``$__rate_interval``; tables and stats are instant queries, and where they
sum over the dashboard's time range they use ``$__range``. A legend ending in `` (limit)`` is drawn as
a dashed line: the GPU's own limit (threshold, cap, maximum), from the exporter, never a typed-in number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["timeseries", "stat", "table", "heatmap", "timeline", "text"]

#: Where runbook links point (the same base as the alert rules' runbook_url).
RUNBOOK_BASE = "https://github.com/OWNER/gpu-exporter/blob/main/docs/runbooks"
N = 'job=~"$job", instance=~"$instance"'
G = f'{N}, gpu=~"$gpu"'
RI = "$__rate_interval"
#: One legend for a GPU's series everywhere.
GPU = "{{instance}} GPU {{gpu}}"
#: A note every profiling panel carries in its description (a test checks it).
PROFILING = (
    "From the profiling collector (on by default; --no-collector.profiling turns it off): DCGM's profiling "
    "module, or GPM on the NVML backend (Hopper and later GPUs); empty on older GPUs under NVML, while another "
    "profiler holds the counters, and during a profiling pause."
)
NVLINK_NOTE = "Needs --collector.nvlink (off by default)."
#: The same note for NVSwitch panels.
NVSWITCH_ONLY = (
    "DCGM only (--collector.nvswitch on the DCGM backend); NVML cannot see NVSwitches, so it is empty there."
)
SWITCH = "{{instance}} switch {{nvswitch}}"
#: Matchers used inside f-strings (Python 3.11 allows no backslash there).
WHOLE = 'gpu_instance=""'
MIGDEV = 'gpu_instance!=""'
VOLATILE = 'counter="volatile"'
UNCORRECTED = 'type="uncorrected", counter="volatile"'
LIMITING = 'reason=~"power|thermal|board_limit|reliability"'


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class PanelSpec:
    kind: Kind
    title: str
    description: str
    unit: str = ""
    queries: tuple[Query, ...] = ()
    width: int = 12
    height: int = 8
    min: float | None = None
    max: float | None = None
    #: Value mappings: (value, text, colour).
    states: tuple[tuple[str, str, str], ...] = ()
    #: Threshold steps above the green base: (value, colour).
    thresholds: tuple[tuple[float, str], ...] = ()
    bars: bool = False
    stack: bool = False
    text: str = ""


@dataclass(frozen=True)
class RowSpec:
    title: str
    panels: tuple[PanelSpec, ...]
    #: Every query of this row needs DCGM (NVSwitches; the panels say so).
    dcgm_only: bool = False


@dataclass(frozen=True)
class DashboardSpec:
    file: str
    uid: str
    title: str
    description: str
    rows: tuple[RowSpec, ...]


def g(metric: str, extra: str = "") -> str:
    """``metric{G}`` with more matchers."""
    return f"{metric}{{{G}{', ' + extra if extra else ''}}}"


#: Xid counts by code, as the panels select them.
XID = g("gpu_xid_errors_total")


def n(metric: str, extra: str = "") -> str:
    """``metric{N}`` with more matchers."""
    return f"{metric}{{{N}{', ' + extra if extra else ''}}}"


def q(expr: str, legend: str = GPU) -> Query:
    return Query(expr, legend)


def limit(expr: str, what: str = "limit") -> Query:
    """A limit series: the same GPU legend, drawn dashed."""
    return Query(expr, f"{GPU} {what} (limit)")


def ts(title: str, description: str, unit: str, *queries: Query, **options: object) -> PanelSpec:
    return PanelSpec("timeseries", title, description, unit, queries, **options)  # type: ignore[arg-type]


def stat(title: str, description: str, unit: str, expr: str, **options: object) -> PanelSpec:
    options.setdefault("width", 4)
    options.setdefault("height", 4)
    return PanelSpec("stat", title, description, unit, (Query(expr),), **options)  # type: ignore[arg-type]


def table(title: str, description: str, unit: str, *exprs: str, **options: object) -> PanelSpec:
    return PanelSpec("table", title, description, unit, tuple(Query(e) for e in exprs), **options)  # type: ignore[arg-type]


def timeline(title: str, description: str, *queries: Query, **options: object) -> PanelSpec:
    return PanelSpec("timeline", title, description, "none", queries, **options)  # type: ignore[arg-type]


def note(title: str, content: str, *runbooks: str, width: int = 6, height: int = 8) -> PanelSpec:
    """A text panel: how to read the row beside it, with links to the runbooks."""
    links = "\n".join(f"- Runbook: [{name}]({RUNBOOK_BASE}/{name}.md)" for name in runbooks)
    body = content.strip() + ("\n\n" + links if links else "")
    return PanelSpec("text", title, "How to read this row, and where to go next.", text=body, width=width,
                     height=height)  # fmt: skip


def busy(selector: str = "") -> str:
    """Busy fraction of each GPU from the exporter's busy-time counter."""
    return f"rate({g('gpu_utilization_seconds_total', selector)}[{RI}])"


UP_STATES = (("0", "down", "red"), ("1", "up", "green"))
FLAG_STATES = (("0", "no", "green"), ("1", "yes", "red"))
EVENT_STATES = (("0", "clear", "transparent"), ("1", "active", "orange"))

#: Payload capacity of a PCIe link per direction, in bytes per second, from its current generation and
#: width: 2.5 GT/s per lane doubling each generation, 8b/10b encoding up to gen 2, 128b/130b from gen 3.
PCIE_CAPACITY = (
    f"{g('gpu_pcie_link_width')} * on (job, instance, gpu, uuid) ("
    f"(250e6 * 2 ^ ({g('gpu_pcie_link_generation')} - 1))"
    f" and on (job, instance, gpu, uuid) ({g('gpu_pcie_link_generation')} <= 2)"
    f" or (1e9 * 128 / 130 * 2 ^ ({g('gpu_pcie_link_generation')} - 3)))"
)

# --- Fleet ------------------------------------------------------------------------------------------------

FLEET = DashboardSpec(
    "gpu-fleet",
    "gpu-exporter-fleet",
    "GPU / Fleet",
    "Every node and GPU at once: what is up, how busy, how hot, how much power and memory, what is idle "
    "but allocated, and which Xid and ECC events happened.",
    (
        RowSpec("Health at a glance", (
            stat("Exporters up", "gpu-exporter targets Prometheus scraped successfully (up == 1).", "none",
                 f"sum({n('up')})"),
            stat("Exporters down", "gpu-exporter targets whose last scrape failed (up == 0): the node's GPUs "
                 "are unobserved. Runbook: gpuexporterdown.", "none", f"count({n('up')} == 0) or vector(0)",
                 thresholds=((1, "red"),)),
            stat("GPUs answering", "GPUs whose driver answers (gpu_up == 1).", "none", f"sum({g('gpu_up')})"),
            stat("GPUs lost", "GPUs the driver reports lost (gpu_up == 0): fallen off the bus or hung. "
                 "Runbook: gpufallenoffbus.", "none", f"count({g('gpu_up')} == 0) or vector(0)",
                 thresholds=((1, "red"),)),
            stat("Fleet utilization", "Mean fraction of time the selected GPUs ran kernels, from the busy-time "
                 "counter gpu_utilization_seconds_total (misses nothing between scrapes).", "percentunit",
                 f"avg({busy()})", thresholds=((0.95, "orange"),)),
            stat("Allocated but idle", "GPUs held by a compute process while nearly idle (utilization below 5%) "
                 "more than half of the time: an idle job or a starving input pipeline.", "none",
                 f"count(rate({g('gpu_idle_while_allocated_seconds_total')}[{RI}]) > 0.5) or vector(0)",
                 thresholds=((1, "orange"),)),
        )),
        RowSpec("Power and memory", (
            stat("Power draw", "Board power of the selected GPUs, summed.", "watt", f"sum({g('gpu_power_watts')})",
                 width=6),
            stat("Power limit", "Enforced power limits of the selected GPUs, summed: the headroom is limit "
                 "minus draw.", "watt", f"sum({g('gpu_power_limit_watts')})", width=6),
            stat("Memory used", "Framebuffer memory allocated on the selected GPUs (whole GPUs; MIG devices "
                 "are not counted twice).", "bytes", f"sum({g('gpu_memory_used_bytes', WHOLE)})",
                 width=6),
            stat("Memory installed", "Framebuffer memory installed on the selected GPUs.", "bytes",
                 f"sum({g('gpu_memory_total_bytes', WHOLE)})", width=6),
            ts("Power per node", "Board power per node against the sum of its GPUs' enforced limits (dashed).",
               "watt", Query(f"sum by (instance) ({g('gpu_power_watts')})", "{{instance}}"),
               Query(f"sum by (instance) ({g('gpu_power_limit_watts')})", "{{instance}} (limit)"), min=0),
            ts("Memory used per node", "Framebuffer memory allocated per node against what is installed "
               "(dashed).", "bytes",
               Query(f"sum by (instance) ({g('gpu_memory_used_bytes', WHOLE)})", "{{instance}}"),
               Query(f"sum by (instance) ({g('gpu_memory_total_bytes', WHOLE)})",
                     "{{instance}} (limit)"), min=0),
        )),
        RowSpec("Utilization", (
            PanelSpec("heatmap", "Utilization by node and GPU", "One row per GPU (node and index), coloured by "
                      "the fraction of time it ran kernels (busy-time counter).", "percentunit",
                      (Query(f"avg by (instance, gpu) ({busy()})", GPU),), width=24, height=10),
            ts("Utilization per node", "Mean busy fraction of each node's GPUs.", "percentunit",
               Query(f"avg by (instance) ({busy()})", "{{instance}}"), min=0, max=1),
            ts("Busy GPU-equivalents per node", "Sum of the busy fractions: 8 GPUs at 50% are 4 busy GPUs.",
               "none", Query(f"sum by (instance) ({busy()})", "{{instance}}"), min=0),
        )),
        RowSpec("Hot spots", (
            table("Hottest GPUs", "The ten hottest GPUs now (core temperature).", "celsius",
                  f"topk(10, {g('gpu_temperature_celsius')})", width=6),
            table("Least thermal headroom", "Degrees left before each GPU's own slowdown threshold, smallest "
                  "first: the GPUs about to throttle.", "celsius",
                  f"bottomk(10, {g('gpu_temperature_slowdown_threshold_celsius')} - {g('gpu_temperature_celsius')})",
                  width=6),
            table("Most throttled GPUs", "Fraction of the time range each GPU's clocks were held down by power "
                  "or thermal limits (board and reliability limits too with --metrics.detail=full; low-utilization "
                  "and sync-boost time left out).",
                  "percentunit",
                  f"topk(10, sum by (job, instance, gpu) "
                  f"(rate({g('gpu_clock_throttle_seconds_total', LIMITING)}[$__range])))",
                  width=6),
            table("Allocated but idle GPUs", "Fraction of the time range each GPU sat nearly idle (below 5%) "
                  "while a compute process held it; only GPUs where that happened.", "percentunit",
                  f"rate({g('gpu_idle_while_allocated_seconds_total')}[$__range]) > 0", width=6),
        )),
        RowSpec("Errors and events", (
            stat("Xid errors", "Xid errors reported by the driver in the time range, all codes. Runbook: "
                 "gpuxiderror.", "none", f"sum(increase({g('gpu_xid_errors_all_codes_total')}[$__range])) or vector(0)",
                 thresholds=((1, "red"),), width=6),
            stat("Uncorrected ECC errors", "Uncorrectable ECC errors (volatile counter) in the time range. "
                 "Runbook: gpuuncorrectableeccerror.", "none",
                 f"sum(increase({g('gpu_ecc_errors_total', UNCORRECTED)}[$__range])) "
                 "or vector(0)", thresholds=((1, "red"),), width=6),
            stat("GPUs needing reset or service", "GPUs with a row remap or page retirement pending (reset to "
                 "apply) or a row remap failed (service). Runbooks: gpurowremappending, gpurowremapfailure.",
                 "none",
                 f"count(max by (job, instance, gpu) ({g('gpu_row_remap_pending')} == 1 or "
                 f"{g('gpu_row_remap_failed')} == 1 or {g('gpu_retired_pages_pending')} == 1)) or vector(0)",
                 thresholds=((1, "red"),), width=6),
            stat("PCIe links below their width", "GPUs whose PCIe link runs with fewer lanes than GPU and slot "
                 "support (generation is left out: it drops at idle by design). Runbook: gpupcielinkdegraded.",
                 "none", f"count({g('gpu_pcie_link_width')} < {g('gpu_pcie_link_width_max')}) or vector(0)",
                 thresholds=((1, "orange"),), width=6),
            table("Xid errors by GPU and code", "Xid errors in the time range per GPU and code, only where "
                  "some happened (a code's series appears with its first Xid: then its count). The code's "
                  "meaning is in the gpuxiderror runbook.", "none",
                  f"sum by (instance, gpu, xid) (increase({XID}[$__range]) > 0 or ({XID} > 0 unless {XID} offset "
                  "$__range))"),
            ts("ECC errors", "ECC errors per GPU: events delivered by the driver and the volatile counters, per "
               "interval.", "none",
               Query(f"sum by (instance, gpu, type) (increase({g('gpu_ecc_error_events_total')}[{RI}]))",
                     GPU + " {{type}} events"),
               Query(f"sum by (instance, gpu, type) (increase({g('gpu_ecc_errors_total', VOLATILE)}[{RI}]))",
                     GPU + " {{type}}"), bars=True, min=0),
        )),
    ),
)  # fmt: skip

# --- Node and GPU -------------------------------------------------------------------------------------------

NODE = DashboardSpec(
    "gpu-node",
    "gpu-exporter-node",
    "GPU / Node and GPU",
    "Every signal of the selected GPUs over time, against the GPU's own limits: utilization, memory, "
    "thermals, power, clocks and clock events, PCIe, NVLink, MIG, ECC; profiling (DCGM, or NVML GPM) in its own row.",
    (
        RowSpec("Identity", (
            table("GPUs", "Identity of each GPU: model, bus id, serial, driver, CUDA and VBIOS versions, MIG "
                  "mode (gpu_info).", "none", g("gpu_info"), width=16),
            timeline("GPU up", "1 while the driver answers, 0 after it reported the GPU lost.",
                     q(g("gpu_up")), states=UP_STATES, width=8),
        )),
        RowSpec("Utilization", (
            ts("Utilization", "Fraction of time kernels ran, averaged over each interval from the busy-time "
               "counter (nothing between scrapes is missed).", "percentunit", q(busy()), min=0, max=1),
            ts("Memory copy, encoder and decoder", "Fraction of the last sample period device memory was read "
               "or written, and video encoder and decoder utilization.", "percentunit",
               q(g("gpu_memory_copy_utilization_ratio"), GPU + " memory copy"),
               q(g("gpu_encoder_utilization_ratio"), GPU + " encoder"),
               q(g("gpu_decoder_utilization_ratio"), GPU + " decoder"), min=0, max=1),
        )),
        RowSpec("Memory", (
            ts("Framebuffer memory", "Memory allocated on each whole GPU, against what is installed (dashed).",
               "bytes", q(g("gpu_memory_used_bytes", 'gpu_instance=""')),
               limit(g("gpu_memory_total_bytes", 'gpu_instance=""'), "installed"), min=0),
            ts("Reserved memory", "Memory reserved by driver and firmware (installed minus used minus reserved "
               "is what can still be allocated). The BAR1 aperture needs --metrics.detail=full.", "bytes",
               q(g("gpu_memory_reserved_bytes"), GPU + " reserved"), min=0),
        )),
        RowSpec("Thermals", (
            ts("Core temperature", "GPU core temperature against its own maximum operating temperature and "
               "slowdown threshold (dashed). Runbooks: gputemperaturehigh, gputhermalthrottling.",
               "celsius",
               q(g("gpu_temperature_celsius")), limit(g("gpu_temperature_max_operating_celsius"), "max operating"),
               limit(g("gpu_temperature_slowdown_threshold_celsius"), "slowdown"), width=8),
            ts("Memory temperature", "HBM temperature against its maximum operating temperature (dashed), where "
               "the GPU reports it. Runbook: gpumemorytemperaturehigh.", "celsius",
               q(g("gpu_memory_temperature_celsius")),
               limit(g("gpu_memory_temperature_max_operating_celsius"), "max operating"), width=8),
            ts("Fan speed", "Intended fan speed as a fraction of its maximum (boards with fans only).",
               "percentunit", q(g("gpu_fan_speed_ratio")), min=0, max=1, width=8),
        )),
        RowSpec("Power", (
            ts("Power draw", "Board power against the enforced limit and the board's default limit (dashed): "
               "an enforced limit below the default is a lowered cap. Runbook: gpupowerthrottling.",
               "watt", q(g("gpu_power_watts")), limit(g("gpu_power_limit_watts"), "enforced"),
               limit(g("gpu_power_default_limit_watts"), "default"), min=0),
            ts("Average power from energy", "Average power over each interval from the energy counter: unlike "
               "the gauge it misses no peak between scrapes.", "watt",
               q(f"rate({g('gpu_energy_joules_total')}[{RI}])"), min=0),
        )),
        RowSpec("Clocks and clock events", (
            ts("SM clock", "SM clock against the GPU's maximum (dashed): a busy GPU below its peers is a "
               "straggler. Runbook: gpuclockstraggler.", "hertz", q(g("gpu_sm_clock_hertz")),
               limit(g("gpu_sm_clock_max_hertz"), "max"), min=0, width=8),
            ts("Memory clock", "Memory clock (its maximum needs --metrics.detail=full).", "hertz",
               q(g("gpu_memory_clock_hertz")), min=0, width=8),
            ts("Performance state", "P-state, 0 (fastest) to 15 (slowest).", "none",
               q(g("gpu_performance_state")), min=0, max=15, width=8),
            timeline("Clock events", "Which reasons hold the clocks below their target, per GPU (idle is left "
                     "out). Power cap and thermal reasons mean throttling. Runbooks: gpupowerthrottling, "
                     "gputhermalthrottling, gpuhardwareslowdown.",
                     q(g("gpu_clock_event_active", 'reason!="gpu_idle"'), GPU + " {{reason}}"),
                     states=EVENT_STATES, width=14, height=10),
            ts("Time throttled by cause", "Fraction of each interval the clocks were held below target, by "
               "cause (driver's violation counters).", "percentunit",
               q(f"rate({g('gpu_clock_throttle_seconds_total')}[{RI}])", GPU + " {{reason}}"), min=0, max=1,
               width=10, height=10),
        )),
        RowSpec("PCIe", (
            ts("PCIe throughput", "PCIe traffic (20 ms window, read every 5th cycle) against the link's current "
               "payload capacity per direction (dashed, from generation and width; protocol overhead makes "
               "about 80% of it the practical maximum). Needs the pcie collector.", "Bps",
               q(g("gpu_pcie_transmit_bytes_per_second"), GPU + " transmit"),
               q(g("gpu_pcie_receive_bytes_per_second"), GPU + " receive"),
               limit(PCIE_CAPACITY, "capacity"), min=0, width=12),
            ts("PCIe link generation and width", "Current link generation and width against what GPU and slot "
               "support (dashed). Generation drops at idle by design; width below maximum is a seating or "
               "riser fault. Runbook: gpupcielinkdegraded.", "none",
               q(g("gpu_pcie_link_generation"), GPU + " generation"), limit(g("gpu_pcie_link_generation_max"),
                                                                             "generation"),
               q(g("gpu_pcie_link_width"), GPU + " width"), limit(g("gpu_pcie_link_width_max"), "width"),
               min=0, width=6),
            ts("PCIe replays", "Link-level retransmissions per interval: a rising count means a marginal link.",
               "none", q(f"increase({g('gpu_pcie_replay_errors_total')}[{RI}])"), bars=True, min=0, width=6),
        )),
        RowSpec("NVLink", (
            timeline("NVLink state", f"1 while each NVLink is active. {NVLINK_NOTE} Runbook: gpunvlinkdown.",
                     q(g("gpu_nvlink_up"), GPU + " link {{nvlink}}"), states=UP_STATES, width=8),
            ts("NVLink throughput", f"Data sent and received per link (NVML only). {NVLINK_NOTE}", "Bps",
               q(f"rate({g('gpu_nvlink_transmit_bytes_total')}[{RI}])", GPU + " link {{nvlink}} transmit"),
               q(f"rate({g('gpu_nvlink_receive_bytes_total')}[{RI}])", GPU + " link {{nvlink}} receive"),
               min=0, width=8),
            ts("NVLink errors", f"Data-link errors per link and type per interval. {NVLINK_NOTE} Runbook: "
               "gpunvlinkerrors.", "none",
               q(f"increase({g('gpu_nvlink_errors_total')}[{RI}])", GPU + " link {{nvlink}} {{type}}"),
               bars=True, min=0, width=8),
        )),
        RowSpec("MIG instances", (
            table("MIG devices", "Each MIG device: GPU instance, compute instance, profile and MIG UUID "
                  "(gpu_mig_info).", "none", g("gpu_mig_info"), width=12),
            ts("MIG device memory", "Framebuffer memory allocated per MIG device against its size (dashed). NVML "
               "does not report utilization per MIG device.", "bytes",
               q(g("gpu_memory_used_bytes", 'gpu_instance!=""'), GPU + " {{profile}} GI {{gpu_instance}}"),
               Query(g("gpu_memory_total_bytes", 'gpu_instance!=""'),
                     GPU + " {{profile}} GI {{gpu_instance}} (limit)"), min=0, width=12),
        )),
        RowSpec("ECC and row remapping", (
            ts("ECC errors", "Corrected and uncorrected ECC errors per interval (volatile counter). Runbook: "
               "gpuuncorrectableeccerror.", "none",
               q(f"increase({g('gpu_ecc_errors_total', VOLATILE)}[{RI}])", GPU + " {{type}}"),
               bars=True, min=0, width=8),
            ts("Remapped rows and retired pages", "Rows remapped to spares and pages retired over the board's "
               "life, by cause.", "none",
               q(g("gpu_remapped_rows_total"), GPU + " rows {{cause}}"),
               q(g("gpu_retired_pages_total"), GPU + " pages {{cause}}"), min=0, width=8),
            timeline("ECC mode", "Whether ECC is enabled (current mode); with it off, memory errors go "
                     "undetected.", q(g("gpu_ecc_mode_enabled")), states=(("0", "off", "orange"), ("1", "on", "green")),
                     width=8),
            timeline("Reset or service needed", "Row remap pending (reset to apply), row remap failed (service) "
                     "and pages pending retirement. Runbooks: gpurowremappending, gpurowremapfailure.",
                     q(g("gpu_row_remap_pending"), GPU + " remap pending"),
                     q(g("gpu_row_remap_failed"), GPU + " remap failed"),
                     q(g("gpu_retired_pages_pending"), GPU + " pages pending"), states=FLAG_STATES, width=8),
        )),
        RowSpec("SM and tensor activity (profiling collector)", (
            ts("SM and tensor activity", f"Fraction of time an SM had a resident warp, and fraction of cycles a "
               f"tensor-core pipe was active: GPU-Util near 100 % with low SM activity means kernels that fill few "
               f"SMs. Occupancy, DRAM and the other pipes come with --metrics.detail=full. {PROFILING}",
               "percentunit",
               q(g("gpu_sm_active_ratio"), GPU + " SM active"), q(g("gpu_tensor_pipe_active_ratio"), GPU + " tensor"),
               min=0, max=1, width=24),
        )),
        RowSpec("NVSwitch (DCGM only)", (
            ts("NVSwitch temperature", f"Switch die temperature against its own slowdown and shutdown thresholds "
               f"(dashed). {NVSWITCH_ONLY} Runbook: gpunvswitchtemperaturehigh.", "celsius",
               Query(n("gpu_nvswitch_temperature_celsius"), SWITCH),
               Query(n("gpu_nvswitch_temperature_slowdown_threshold_celsius"), SWITCH + " slowdown (limit)"),
               Query(n("gpu_nvswitch_temperature_shutdown_threshold_celsius"), SWITCH + " shutdown (limit)"),
               width=8),
            ts("NVSwitch power", f"Switch power draw by supply rail. {NVSWITCH_ONLY}",
               "watt", Query(n("gpu_nvswitch_power_watts"), SWITCH + " {{rail}}"), min=0, width=8),
            table("NVSwitch identity, SXid and reset", f"Each switch's PCI bus id and physical id, the latest SXid "
                  f"DCGM holds by severity, and whether it needs a reset. {NVSWITCH_ONLY} Runbook: "
                  "gpunvswitchfatalerror.", "none", n("gpu_nvswitch_info"), n("gpu_nvswitch_last_sxid"),
                  n("gpu_nvswitch_reset_required"), width=8),
            timeline("NVSwitch ports", f"1 while each switch port's NVLink is active. {NVSWITCH_ONLY} Runbook: "
                     "gpunvswitchportdown.", Query(n("gpu_nvswitch_nvlink_up"), SWITCH + " port {{nvlink}}"),
                     states=UP_STATES, width=12),
            ts("NVSwitch port errors", f"Errors per port and type per interval. {NVSWITCH_ONLY}", "none",
               Query(f"increase({n('gpu_nvswitch_nvlink_errors_total')}[{RI}])", SWITCH + " port {{nvlink}} {{type}}"),
               bars=True, min=0, width=12),
            ts("NVSwitch core voltage", f"Switch core supply voltage. {NVSWITCH_ONLY}", "volt",
               Query(n("gpu_nvswitch_voltage_volts"), SWITCH), width=24, height=6),
        ), dcgm_only=True),
    ),
)  # fmt: skip

# --- Workloads ----------------------------------------------------------------------------------------------

#: A note every panel fed by the kubelet's pod-resources API carries (a test lists them as unproven).
POD_RESOURCES_ONLY = (
    "Needs allocations from the kubelet's pod-resources API (gpu_allocation_info with namespace, pod and "
    "container); empty outside Kubernetes."
)
#: One legend for a process's series everywhere.
PROC = "{{instance}} GPU {{gpu}} {{process}} (pid {{pid}}, {{user}})"
#: One legend for an allocation: the labels of whichever kind it is (the others are empty).
ALLOC = "{{instance}} GPU {{gpu}} {{namespace}} {{pod}}{{slurm_job}}{{hpc_job}}"
#: Labels that make a GPU's or MIG instance's series one-to-one with its allocations' parent.
PARENT = "job, instance, gpu, uuid, gpu_instance, compute_instance"
JOBS = 'namespace=""'
PODS = 'namespace!=""'
SLURM = 'slurm_job!=""'
POD_UID = 'pod_uid!=""'


def per_allocation(value: str, allocations: str) -> str:
    """``value`` (one series per GPU, or per GPU and MIG instance) copied onto each allocation of it."""
    on = PARENT if "gpu_memory" in value else "job, instance, gpu, uuid"
    return f"{value} * on ({on}) group_right () {g('gpu_allocation_info', allocations)}"


def unowned(metric: str) -> str:
    """``metric``'s process series on GPUs (or MIG instances) that no allocation owns."""
    return f"{g(metric)} unless on ({PARENT}) {g('gpu_allocation_info')}"


WORKLOADS = DashboardSpec(
    "gpu-workloads",
    "gpu-exporter-workloads",
    "GPU / Workloads",
    "Who holds the GPUs and whether they use them: memory and SM share per process, per Slurm or HPC job "
    "and per pod; idle allocations; processes no scheduler accounts for.",
    (
        RowSpec("Allocation", (
            note("Reading this dashboard", """
A GPU is *held* while at least one compute process (CUDA context) runs on it, and *allocated* while a
scheduler gave it to a workload: a pod's container (the kubelet's pod-resources API), a Slurm job (from
the cgroups of its processes) or an HPC job (--hpc-job-mapping-dir). Held and busy is good; allocated
and idle wastes the GPU (an idle notebook, a stuck job, or a job waiting for its input). Processes
carry `pod_uid` and `slurm_job` where their cgroups say; join `pod_uid` with kube-state-metrics'
`kube_pod_info{uid}` for names. Per-process utilization is the process's share of the GPU's time.""",
                 "gpuallocatedidle", "gpuidlememoryheld", "gpuinputstarvation"),
            ts("Compute processes", "Compute processes (CUDA contexts) running on each GPU.", "none",
               q(g("gpu_compute_processes")), min=0, width=9),
            table("Held GPUs", "GPUs with at least one compute process now, with the number of processes.",
                  "none", f"{g('gpu_compute_processes')} > 0", width=9),
        )),
        RowSpec("Processes", (
            ts("Memory per process (top 10)", "GPU memory held by each of the ten largest processes at each "
               "moment (pid=\"other\" is the smallest processes of a GPU beyond "
               "--collector.processes.max-per-gpu, together).", "bytes",
               Query(f"topk(10, {g('gpu_process_memory_used_bytes')})", PROC), min=0),
            ts("SM share per process (top 10)", "Fraction of time each process had kernels on the SMs (its share "
               "of the GPU's utilization), the ten largest at each moment.", "percentunit",
               Query(f"topk(10, {g('gpu_process_sm_utilization_ratio')})", PROC), min=0, max=1),
            table("Processes now", "Every process on the selected GPUs: memory held and SM share, with its "
                  "user, pod UID and Slurm job where its cgroups say (its memory-copy share needs "
                  "--metrics.detail=full).", "none",
                  g("gpu_process_memory_used_bytes"), g("gpu_process_sm_utilization_ratio"), width=24),
        )),
        RowSpec("Slurm and HPC jobs", (
            ts("Utilization per job", "Mean busy fraction of the GPUs each Slurm or HPC job is allocated (a "
               "MIG instance counts its whole GPU's).", "percentunit",
               Query(f"avg by (slurm_job, hpc_job) ({per_allocation(busy(), JOBS)})", "{{slurm_job}}{{hpc_job}}"),
               min=0, max=1, width=8),
            ts("GPU memory per job", "Memory used on the GPUs or MIG instances each Slurm or HPC job is "
               "allocated (a GPU shared by several jobs counts for each).", "bytes",
               Query(f"sum by (slurm_job, hpc_job) ({per_allocation(g('gpu_memory_used_bytes'), JOBS)})",
                     "{{slurm_job}}{{hpc_job}}"), min=0, width=8),
            ts("Process memory per Slurm job", "GPU memory held by each Slurm job's own processes (from their "
               "cgroups): exact even where jobs share a GPU.", "bytes",
               Query(f"sum by (slurm_job) ({g('gpu_process_memory_used_bytes', SLURM)})",
                     "{{slurm_job}}"), min=0, width=8),
            table("Jobs now", "Each Slurm or HPC job: GPUs (or MIG instances) allocated now, and the fraction of "
                  "the time range they sat idle (no compute process or below 5%). Runbook: gpuallocatedidle.",
                  "none", f"count by (instance, slurm_job, hpc_job) ({g('gpu_allocation_info', JOBS)})",
                  f"avg by (instance, slurm_job, hpc_job) "
                  f"(rate({g('gpu_allocation_idle_seconds_total', JOBS)}[$__range]))", width=24),
        )),
        RowSpec("Pods (from process cgroups)", (
            ts("GPU memory per pod UID", "GPU memory held by each pod's processes, by pod UID from their cgroups. "
               "Names: multiply by label_replace(kube_pod_info, \"pod_uid\", \"$1\", \"uid\", \"(.*)\") on "
               "(pod_uid) from kube-state-metrics.", "bytes",
               Query(f"sum by (pod_uid) ({g('gpu_process_memory_used_bytes', POD_UID)})",
                     "pod {{pod_uid}}"), min=0),
            ts("SM share per pod UID", "Sum of the SM shares of each pod's processes, by pod UID (100% is one whole "
               "GPU's SMs).", "percentunit",
               Query(f"sum by (pod_uid) ({g('gpu_process_sm_utilization_ratio', POD_UID)})",
                     "pod {{pod_uid}}"), min=0),
        )),
        RowSpec("Pods and namespaces (Kubernetes pod-resources)", (
            ts("Utilization per pod", f"Mean busy fraction of the GPUs each pod is allocated. {POD_RESOURCES_ONLY}",
               "percentunit",
               Query(f"avg by (namespace, pod) ({per_allocation(busy(), PODS)})", "{{namespace}}/{{pod}}"),
               min=0, max=1, width=8),
            ts("GPU memory per pod", f"Memory used on the GPUs or MIG instances each pod is allocated. "
               f"{POD_RESOURCES_ONLY}", "bytes",
               Query(f"sum by (namespace, pod) ({per_allocation(g('gpu_memory_used_bytes'), PODS)})",
                     "{{namespace}}/{{pod}}"), min=0, width=8),
            table("GPUs per namespace", f"GPUs (or MIG instances) allocated to each namespace now, and how many "
                  f"of them sat idle over the time range (GPU-equivalents). {POD_RESOURCES_ONLY}", "none",
                  f"count by (namespace) ({g('gpu_allocation_info', PODS)})",
                  f"sum by (namespace) (rate({g('gpu_allocation_idle_seconds_total', PODS)}[$__range]))", width=8),
        )),
        RowSpec("Idle allocations", (
            note("Idle allocations", """
An allocation is *idle* while its GPU runs no compute process or stays below 5% utilization. Steady
near 100%: the workload holds the GPU and does nothing with it (talk to the owner); a saw-tooth with
busy bursts: it waits for its input. GPUAllocatedIdle fires at 90% of an hour, for three hours.""",
                 "gpuallocatedidle", "gpuinputstarvation"),
            ts("Idle allocations", "Fraction of each interval each allocation's GPU sat idle (no compute "
               "process, or below 5%). Runbook: gpuallocatedidle.", "percentunit",
               Query(f"rate({g('gpu_allocation_idle_seconds_total')}[{RI}])", ALLOC), min=0, max=1, width=9),
            table("Idle over the time range", "Allocations whose GPU sat idle in the time range, with the "
                  "fraction of the range (less for an allocation younger than the range), most idle first. "
                  "Runbook: gpuallocatedidle.", "percentunit",
                  f"sort_desc(rate({g('gpu_allocation_idle_seconds_total')}[$__range]) > 0)", width=9),
        )),
        RowSpec("Processes no allocation owns", (
            stat("Unowned processes", "Processes on GPUs (or MIG instances) that no pod, Slurm or HPC job is "
                 "allocated: run outside the scheduler, or a pod the exporter cannot see (no pod-resources "
                 "API).", "none", f"sum({unowned('gpu_processes')}) or vector(0)",
                 thresholds=((1, "orange"),), width=4, height=8),
            table("Unowned process list", "Each process on a GPU (or MIG instance) no allocation owns, with the "
                  "memory it holds and its SM share.", "none", unowned("gpu_process_memory_used_bytes"),
                  unowned("gpu_process_sm_utilization_ratio"), width=20),
        )),
        RowSpec("Use of held GPUs", (
            ts("Utilization of held GPUs", "Busy fraction of each GPU while a compute process holds it.",
               "percentunit", q(f"{busy()} and on (job, instance, gpu, uuid) {g('gpu_compute_processes')} > 0"),
               min=0, max=1),
            ts("Idle while allocated", "Fraction of each interval the GPU sat nearly idle (below 5%) while held. "
               "Steady near 1: an idle job holds it. Saw-tooth with busy bursts: the input pipeline starves "
               "it.", "percentunit", q(f"rate({g('gpu_idle_while_allocated_seconds_total')}[{RI}])"),
               min=0, max=1),
            ts("Memory held", "Framebuffer memory allocated on each held GPU against what is installed "
               "(dashed).", "bytes",
               q(f"{g('gpu_memory_used_bytes', WHOLE)} and on (job, instance, gpu, uuid) "
                 f"{g('gpu_compute_processes')} > 0"),
               limit(f"{g('gpu_memory_total_bytes', WHOLE)} and on (job, instance, gpu, uuid) "
                     f"{g('gpu_compute_processes')} > 0", "installed"), min=0),
            table("Memory held on idle GPUs", "Memory allocated on GPUs that were idle while held for more than "
                  "half of the last interval: the first place to reclaim GPUs.", "bytes",
                  f"{g('gpu_memory_used_bytes', WHOLE)} and on (job, instance, gpu, uuid) "
                  f"rate({g('gpu_idle_while_allocated_seconds_total')}[{RI}]) > 0.5"),
        )),
        RowSpec("MIG devices", (
            ts("Memory per MIG device", "Framebuffer memory allocated on each MIG device (each is its own "
               "slice of a GPU, usually one workload).", "bytes",
               q(g("gpu_memory_used_bytes", 'gpu_instance!=""'), GPU + " {{profile}} GI {{gpu_instance}}"),
               min=0),
            table("MIG device fill", "Fraction of each MIG device's memory allocated now.", "percentunit",
                  f"{g('gpu_memory_used_bytes', MIGDEV)} / {g('gpu_memory_total_bytes', MIGDEV)}"),
        )),
    ),
)  # fmt: skip

# --- Diagnostics ---------------------------------------------------------------------------------------------

DIAGNOSTICS = DashboardSpec(
    "gpu-diagnostics",
    "gpu-exporter-diagnostics",
    "GPU / Diagnostics",
    "The troubleshooting flow, one row per question: is it busy, hot or throttled, out of memory, "
    "starved of input, a straggler; which Xid and ECC events happened; who is using it.",
    (
        RowSpec("Is the GPU really busy?", (
            note("Busy?", """
**Utilization** is the fraction of time *any* kernel ran, not how much of the GPU it used: one small
kernel at a time reads 100%. The busy-time rate is exact over any window; the sampled ratio shows the
shape (a saw-tooth means bursts). Memory-copy activity near zero on a busy GPU means compute-bound
work. For SM activity (how much of the GPU the kernels fill) see the profiling row below.""",
                 "gpuutilizationsaturated"),
            ts("Busy time against sampled utilization", "Busy fraction from the busy-time counter (exact over "
               "each interval) and the last sampled utilization ratio (shows bursts).", "percentunit",
               q(busy(), GPU + " busy"), q(g("gpu_utilization_ratio"), GPU + " sampled"), min=0, max=1, width=9),
            ts("Memory copy activity", "Fraction of time device memory was read or written.", "percentunit",
               q(g("gpu_memory_copy_utilization_ratio")), min=0, max=1, width=9),
        )),
        RowSpec("Is it really busy: SM activity (profiling collector)", (
            note("Busy, or really busy?", """
GPU-Util (**busy**) is the share of time in which *any* kernel ran: one small kernel at a time reads 100 %.
**SM active** is the share of time the streaming multiprocessors had work, averaged over all of them:
how much of the GPU the kernels filled. Busy and low SM activity means kernels that occupy few SMs
(small batches, one stream, a serial stage): the job's owner can gain speed. Tensor shows whether the
active SMs use their tensor cores. From the profiling collector, on by default (DCGM, or GPM on NVML for
Hopper and later).
""", "gpubusylowsmactivity"),
            ts("Utilization against SM activity", f"Busy time against the fraction of time SMs had work and "
               f"tensor pipes were active: high utilization with low SM activity means kernels that fill few SMs. "
               f"{PROFILING} Runbook: gpubusylowsmactivity.", "percentunit", q(busy(), GPU + " busy"),
               q(g("gpu_sm_active_ratio"), GPU + " SM active"),
               q(g("gpu_tensor_pipe_active_ratio"), GPU + " tensor pipes"), min=0, max=1, width=18),
        )),
        RowSpec("Is it hot or throttled, and why?", (
            note("Hot or throttled?", """
Compare the temperature with **the GPU's own slowdown threshold**, not a fixed number. The clock-event
timeline says *why* clocks are below target: power cap (drawing at its limit), software or hardware
thermal (too hot), hardware slowdown or power brake (an external signal: power supply or cooling).
Power at or near the cap with power-cap events is power throttling.""",
                 "gputhermalthrottling", "gpupowerthrottling", "gpuhardwareslowdown", "gputemperaturehigh"),
            ts("Thermal headroom", "Degrees below each GPU's own slowdown threshold; at 0 the GPU slows its "
               "clocks.", "celsius",
               q(f"{g('gpu_temperature_slowdown_threshold_celsius')} - {g('gpu_temperature_celsius')}"),
               thresholds=((5, "orange"), (10, "green")), width=9),
            ts("Power against the cap", "Board power as a fraction of the enforced limit; near 1 with power-cap "
               "events is power throttling.", "percentunit",
               q(f"{g('gpu_power_watts')} / {g('gpu_power_limit_watts')}"), min=0, max=1.1, width=9),
            timeline("Clock events", "Reasons holding the clocks below target (idle left out).",
                     q(g("gpu_clock_event_active", 'reason!~"gpu_idle|applications_clocks|display_clocks"'),
                       GPU + " {{reason}}"), states=EVENT_STATES, width=24),
        )),
        RowSpec("Is memory about to run out, or held by an idle job?", (
            note("Memory", """
Memory near 100% risks out-of-memory failures for the next allocation. Memory held while the GPU is idle
is a job that does not use what it holds: an idle notebook or a stuck process. On a MIG GPU each MIG
device has its own memory.""", "gpumemorynearlyfull", "gpuidlememoryheld"),
            ts("Memory used", "Allocated fraction of each GPU's and each MIG device's framebuffer memory.",
               "percentunit", q(f"{g('gpu_memory_used_bytes')} / {g('gpu_memory_total_bytes')}",
                                GPU + " {{profile}}"), min=0, max=1, thresholds=((0.9, "red"),), width=9),
            ts("Idle while held", "Fraction of each interval the GPU was nearly idle while a process held it.",
               "percentunit", q(f"rate({g('gpu_idle_while_allocated_seconds_total')}[{RI}])"), min=0, max=1,
               width=9),
        )),
        RowSpec("Is the input pipeline starving it?", (
            note("Starving?", """
A training loop waiting for data shows a **saw-tooth**: bursts of utilization with idle gaps, and
time below 10 % utilization (counted per driver sample, so sub-second stalls show) rising *together
with* busy time. Check whether the host side keeps up
(data loaders, storage, network), then the PCIe link: traffic near the link's capacity, or a link
running below its width (or below its generation while busy), limits every transfer.""",
                 "gpuinputstarvation", "gpupcielinkdegraded"),
            ts("Utilization saw-tooth", "Busy fraction with the fraction of time below 10% utilization while "
               "held (every driver sample on NVML): both high means the GPU waits for input.", "percentunit",
               q(f"rate({g('gpu_utilization_seconds_total')}[{RI}])", GPU + " busy"),
               q(f"rate({g('gpu_utilization_low_seconds_total')}[{RI}])", GPU + " below 10% while held"),
               min=0, max=1, width=9),
            ts("PCIe receive against link capacity", "Host-to-GPU traffic as a fraction of the link's current "
               "payload capacity (from generation and width).", "percentunit",
               q(f"{g('gpu_pcie_receive_bytes_per_second')} / on (job, instance, gpu, uuid) ({PCIE_CAPACITY})"),
               min=0, width=9),
            table("Links below their maximum", "GPUs whose PCIe link runs below the width or generation GPU and "
                  "slot support, with the current value (generation drops at idle by design).", "none",
                  f"{g('gpu_pcie_link_width')} < {g('gpu_pcie_link_width_max')}",
                  f"{g('gpu_pcie_link_generation')} < {g('gpu_pcie_link_generation_max')}", width=24),
        )),
        RowSpec("Which card is the straggler?", (
            note("Straggler?", """
Under the same load (a data-parallel job, a burn-in run) all GPUs of a node should run the same clocks
and power. One GPU slower than the node's median holds back every synchronous job that spans it: look
at its clock events, temperature and power.""", "gpuclockstraggler"),
            ts("SM clock against the node median", "Each GPU's SM clock as a fraction of the median of its "
               "node's GPUs.", "percentunit",
               q(f"{g('gpu_sm_clock_hertz')} / on (job, instance) group_left () quantile by (job, instance) "
                 f"(0.5, {g('gpu_sm_clock_hertz')})"), min=0, width=9),
            ts("Power against the node median", "Each GPU's power as a fraction of the median of its node's "
               "GPUs.", "percentunit",
               q(f"{g('gpu_power_watts')} / on (job, instance) group_left () quantile by (job, instance) "
                 f"(0.5, {g('gpu_power_watts')})"), min=0, width=9),
        )),
        RowSpec("What Xid and ECC events happened when?", (
            note("Events", """
Xid errors are the driver's error reports: the code says what happened (the runbook has the table).
Uncorrectable ECC errors, pending row remaps (reset needed) and failed remaps (service needed) are
memory faults. A GPU that fell off the bus reports `gpu_up 0`.""",
                 "gpuxiderror", "gpuuncorrectableeccerror", "gpurowremappending", "gpurowremapfailure",
                 "gpufallenoffbus"),
            ts("Xid errors", "Xid errors per interval by code.", "none",
               q(f"increase({g('gpu_xid_errors_total')}[{RI}])", GPU + " Xid {{xid}}"), bars=True, min=0, width=9),
            table("Last Xid", "Time of the last Xid on each GPU since the exporter started.", "dateTimeAsIso",
                  f"{g('gpu_xid_last_timestamp_seconds')} * 1000", width=9),
            ts("ECC errors", "ECC errors per interval: driver events and volatile counters.", "none",
               q(f"increase({g('gpu_ecc_error_events_total')}[{RI}])", GPU + " {{type}} events"),
               q(f"increase({g('gpu_ecc_errors_total', VOLATILE)}[{RI}])", GPU + " {{type}}"),
               bars=True, min=0, width=12),
            timeline("GPU up", "Whether each GPU answers the driver.", q(g("gpu_up")), states=UP_STATES, width=12),
        )),
        RowSpec("Who is using it?", (
            note("Who?", """
Compute processes per GPU say whether a GPU is held; the table names them (pid, name, user, and the
pod UID or Slurm job from their cgroups). The *GPU / Workloads* dashboard has memory and SM share per
process, job and pod, the idle allocations and the processes no scheduler accounts for.""",
                 "gpuidlememoryheld", "gpuallocatedidle"),
            ts("Compute processes", "Compute processes (CUDA contexts) on each GPU.", "none",
               q(g("gpu_compute_processes")), min=0, width=9),
            table("Processes and memory held", "Each process on the selected GPUs with the GPU memory it holds.",
                  "bytes", g("gpu_process_memory_used_bytes"), width=9),
        )),
    ),
)  # fmt: skip

# --- Exporter -------------------------------------------------------------------------------------------------

EXPORTER = DashboardSpec(
    "gpu-exporter",
    "gpu-exporter-self",
    "GPU / Exporter health",
    "Is gpu-exporter itself healthy: scrapes, backend and why, sampling time, each collector's success and "
    "duration, errors by kind, dropped values, stalled devices and snapshot age.",
    (
        RowSpec("Targets and backend", (
            timeline("Scrape up", "Whether Prometheus scraped each exporter (up). Runbook: gpuexporterdown.",
                     Query(n("up"), "{{instance}}"), states=UP_STATES, width=8),
            timeline("Backend up", "Whether the GPU library (NVML or DCGM) is initialised and answering. "
                     "Runbook: gpuexporterbackenddown.", Query(n("gpu_exporter_backend_up"), "{{instance}}"),
                     states=UP_STATES, width=8),
            table("Backend and why", "The backend each exporter uses and why it was chosen, or why it is down, "
                  "with the exporter's version.", "none", n("gpu_exporter_backend_info"),
                  n("gpu_exporter_build_info"), width=8),
        )),
        RowSpec("Sampling", (
            ts("Sample duration", "Wall time of the last sampling cycle against the configured interval "
               "(dashed): a cycle near the interval leaves no slack.", "s",
               Query(n("gpu_exporter_sample_duration_seconds"), "{{instance}}"),
               Query(n("gpu_exporter_collect_interval_seconds"), "{{instance}} interval (limit)"), min=0, width=8),
            ts("Snapshot age", "Seconds since the last cycle that sampled a GPU, as of each scrape; values go "
               "stale above 3 intervals. Runbook: gpuexporterstale.", "s",
               Query(f"timestamp({n('gpu_exporter_last_sample_timestamp_seconds')}) - "
                     f"{n('gpu_exporter_last_sample_timestamp_seconds')}", "{{instance}}"),
               Query(f"3 * {n('gpu_exporter_collect_interval_seconds')}", "{{instance}} stale after (limit)"),
               min=0, width=8),
            ts("Device read duration", "Wall time of the last completed read of each GPU: one slow GPU stands "
               "out.", "s", q(g("gpu_exporter_device_read_duration_seconds")), min=0, width=8),
        )),
        RowSpec("Collectors", (
            timeline("Collector success", "1 when every read a collector needed in the last cycle succeeded "
                     "(unsupported values are not failures), 0 when a vendor call failed or a read hung; xid: 1 "
                     "while driver events can be received.",
                     Query(n("gpu_exporter_collector_success"), "{{instance}} {{collector}}"),
                     states=(("0", "failed", "red"), ("1", "ok", "green")), width=12),
            ts("Collector duration", "Time each collector's vendor calls took in the last cycle, summed over "
               "devices: the expensive collectors stand out.", "s",
               Query(n("gpu_exporter_collector_duration_seconds"), "{{instance}} {{collector}}"), min=0, width=12),
        )),
        RowSpec("Errors and stalls", (
            ts("Sample errors by kind", "Failed vendor calls per second by error kind (unsupported calls are "
               "not errors: they are asked once).", "cps",
               Query(f"sum by (instance, kind) (rate({n('gpu_exporter_sample_errors_total')}[{RI}]))",
                     "{{instance}} {{kind}}"), min=0, width=8),
            ts("Values dropped as implausible", "Values dropped per second as physically implausible (driver "
               "sentinels, beyond physical bounds), by metric.", "cps",
               Query(f"sum by (instance, field) (rate({n('gpu_exporter_invalid_values_total')}[{RI}]))",
                     "{{instance}} {{field}}"), min=0, width=8),
            timeline("Stalled devices", "1 while a GPU's read has not returned within one interval (a hung "
                     "driver call); its values age out. Runbook: gpuexporterstale.",
                     q(g("gpu_exporter_device_stalled")), states=FLAG_STATES, width=8),
            ts("Scrape duration and size", "How long Prometheus took to scrape each exporter, from "
               "Prometheus' own scrape_duration_seconds.", "s",
               Query(n("scrape_duration_seconds"), "{{instance}}"), min=0, width=12),
            ts("Series per scrape", "Samples each scrape returned, from Prometheus' own scrape_samples_scraped: "
               "a sudden drop means GPUs or metrics vanished.", "none",
               Query(n("scrape_samples_scraped"), "{{instance}}"), min=0, width=12),
        )),
    ),
)  # fmt: skip

DASHBOARDS: tuple[DashboardSpec, ...] = (FLEET, NODE, WORKLOADS, DIAGNOSTICS, EXPORTER)
