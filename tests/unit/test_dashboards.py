"""The Grafana dashboards in dashboards/: generated from code, valid for the SDK's Grafana schema, following
the conventions (data source variable, no hard-coded uid, $__rate_interval, units, descriptions, runbook
links that resolve, every metric and label from the catalogue), and every query of every panel run on a
real Prometheus (loopback) scraping two real exporters on the fake NVML: a 4-GPU host with processes (a
Slurm job's, a pod's and a plain one, named from a fake /proc), an HPC job left idle, a saw-tooth,
throttling, Xids, ECC and remap counters, a degraded link, NVLinks and a failing call; and a MIG host with
an implausible value. The profiling collector runs by default, so the profiling panels show GPM's values for
host A's Hopper GPU 0. DCGM-only (NVSwitch) panels must be empty there, and so must the panels fed by the
kubelet's pod-resources API until the exporter can be pointed at one (they are listed as unproven).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard as DashboardModel

from gpu_exporter.catalogue import FAMILIES, SWITCH_METRICS, Detail
from gpu_exporter.config import OPTIONS
from tests.harness import REPO
from tests.unit.test_alerts import _MATCHER, _SELECTOR, catalogue_labels, metric_names

DASHBOARDS = REPO / "dashboards"
FILES = sorted(DASHBOARDS.glob("*.json"))
RUNBOOKS = REPO / "docs" / "runbooks"
RUNBOOK_BASE = "https://github.com/OWNER/gpu-exporter/blob/main/docs/runbooks"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
#: Panel types of a current Grafana (no graph, singlestat or table-old).
PANEL_TYPES = {"row", "timeseries", "stat", "state-timeline", "heatmap", "table", "text"}
#: Series Prometheus writes itself for every target.
PROMETHEUS_SERIES = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
#: Metrics only DCGM supplies: the NVSwitches (NVML cannot see them).
DCGM_ONLY = {spec.name for spec in SWITCH_METRICS} | {"gpu_nvswitch_info"}
#: Profiling metrics: DCGM's profiling module, or GPM on NVML (the profiling collector, on by default).
PROFILING = {name for name, specs in FAMILIES.items() if any(spec.collector == "profiling" for spec in specs)}
PROFILING_ROW = "(profiling collector)"
#: Plotting one of these bare in a time series means plotting the GPU's own limit beside it.
LIMITS = {
    "gpu_temperature_celsius": "gpu_temperature_slowdown_threshold_celsius",
    "gpu_memory_temperature_celsius": "gpu_memory_temperature_max_operating_celsius",
    "gpu_power_watts": "gpu_power_limit_watts",
    "gpu_sm_clock_hertz": "gpu_sm_clock_max_hertz",
    "gpu_nvswitch_temperature_celsius": "gpu_nvswitch_temperature_slowdown_threshold_celsius",
}
EXPECTED = {"gpu-fleet", "gpu-node", "gpu-workloads", "gpu-diagnostics", "gpu-exporter", "gpu-usage"}
#: Labels a process or an allocation adds after its GPU's (or MIG instance's) own (docs/metrics.md's metric table).
ENTITY_LABELS = {
    "process": ("pid", "process", "user", "pod_uid", "slurm_job"),
    "pod": ("namespace", "pod", "container"),
    "job": ("slurm_job", "hpc_job"),
}
MIG_LABELS = ("gpu_instance", "compute_instance", "profile")
#: Row title marking panels fed by the kubelet's pod-resources API; and whether the exporter can be pointed at
#: one yet (until it can, those panels are unproven here and must be empty).
POD_RESOURCES_ROW = "(Kubernetes pod-resources)"
POD_RESOURCES = {"--kubernetes", "--kubernetes.pod-resources-socket", "--kubernetes.refresh-interval"} <= {
    option.flag for option in OPTIONS
}


@dataclass(frozen=True)
class Panel:
    dashboard: str
    row: str
    data: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.dashboard} / {self.row} / {self.data['title']}"

    @property
    def exprs(self) -> list[str]:
        return [target["expr"] for target in self.data.get("targets", [])]

    @property
    def dcgm_only(self) -> bool:
        return "(DCGM only)" in self.row

    @property
    def pod_resources(self) -> bool:
        return POD_RESOURCES_ROW in self.row

    @property
    def profiling(self) -> bool:
        return PROFILING_ROW in self.row


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def panels(path: Path) -> Iterator[Panel]:
    row = ""
    for data in load(path)["panels"]:
        if data["type"] == "row":
            row = data["title"]
            continue
        yield Panel(path.stem, row, data)


def all_panels() -> list[Panel]:
    return [panel for path in FILES for panel in panels(path)]


# --- generated from code, valid for the schema ------------------------------------------------------------


def test_the_expected_dashboards_exist() -> None:
    assert {path.stem for path in FILES} == EXPECTED


def _kept(original: object, decoded: object, where: str) -> None:
    """Every key and value of ``original`` is in ``decoded`` (which may add the schema's defaults)."""
    if isinstance(original, dict):
        assert isinstance(decoded, dict), where
        for key, value in original.items():
            assert key in decoded, f"{where}/{key} is not in the schema"
            _kept(value, decoded[key], f"{where}/{key}")
    elif isinstance(original, list):
        assert isinstance(decoded, list) and len(decoded) == len(original), where
        for index, (a, b) in enumerate(zip(original, decoded, strict=True)):
            _kept(a, b, f"{where}[{index}]")
    else:
        assert original == decoded, f"{where}: {original!r} became {decoded!r}"


def test_sdk_schema_round_trip_keeps_every_field() -> None:
    """Decoding with the SDK's Grafana 11.6 types (panel options and field config by panel plugin) and
    encoding again loses or changes nothing: every key is one the schema knows, with a value of its type."""
    register_default_plugins()
    for path in FILES:
        data = load(path)
        again = json.loads(JSONEncoder(sort_keys=True).encode(DashboardModel.from_json(data)))
        _kept(data, again, path.stem)


def test_dashboards_target_a_current_grafana() -> None:
    uids = [load(path)["uid"] for path in FILES]
    assert len(set(uids)) == len(uids)
    for path in FILES:
        data = load(path)
        assert data["schemaVersion"] >= 39, path.name  # Grafana 10.3 and later
        ids = [panel["id"] for panel in data["panels"]]
        assert len(set(ids)) == len(ids) and 0 not in ids, path.name
        assert {panel["type"] for panel in data["panels"]} <= PANEL_TYPES, path.name


def test_panels_do_not_overlap() -> None:
    for path in FILES:
        cells: dict[tuple[int, int], str] = {}
        for panel in load(path)["panels"]:
            pos = panel["gridPos"]
            assert pos["x"] + pos["w"] <= 24, panel["title"]
            for x in range(pos["x"], pos["x"] + pos["w"]):
                for y in range(pos["y"], pos["y"] + pos["h"]):
                    assert (x, y) not in cells, f"{path.name}: {panel['title']} overlaps {cells[(x, y)]}"
                    cells[(x, y)] = panel["title"]


# --- conventions -------------------------------------------------------------------------------------------


def test_data_source_is_a_variable_and_no_uid_is_hard_coded() -> None:
    for path in FILES:
        data = load(path)
        variables = {v["name"]: v for v in data["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
        text = path.read_text()
        uids = set(re.findall(r'"uid": "([^"]*)"', text))
        assert uids == {data["uid"], "${datasource}"}, path.name
        for variable in data["templating"]["list"]:
            if variable["type"] == "query":
                assert variable["datasource"] == DATASOURCE
    for panel in all_panels():
        if panel.data["type"] == "text":
            continue
        assert panel.data["datasource"] == DATASOURCE, panel.name
        assert all(target["datasource"] == DATASOURCE for target in panel.data["targets"]), panel.name


def test_job_instance_and_gpu_variables_filter_every_selector() -> None:
    for path in FILES:
        names = [v["name"] for v in load(path)["templating"]["list"]]
        assert names == ["datasource", "job", "instance", "gpu"], path.name
    checked = 0
    for panel in all_panels():
        for expr in panel.exprs:
            for metric, body in _SELECTOR.findall(expr):
                checked += 1
                assert 'job=~"$job"' in body and 'instance=~"$instance"' in body, f"{panel.name}: {metric}"
                labels = catalogue_labels().get(metric, {})
                if "gpu" in labels:
                    assert 'gpu=~"$gpu"' in body, f"{panel.name}: {metric}"
            bare = re.sub(r"\{[^}]*\}", "", expr)
            assert not (metric_names(bare) - metric_names(expr)), expr
    assert checked > 100


def test_every_rate_uses_rate_interval_or_the_range() -> None:
    checked = 0
    for panel in all_panels():
        for expr in panel.exprs:
            for window in re.findall(r"\[([^\]]*)\]", expr):
                checked += 1
                assert window in ("$__rate_interval", "$__range"), f"{panel.name}: [{window}]"
            for call in re.findall(r"\b(rate|increase|irate|delta|changes)\((.*?)\[([^\]]*)\]", expr):
                if panel.data["type"] not in ("table", "stat"):
                    assert call[2] == "$__rate_interval", f"{panel.name}: a time series rate over {call[2]}"
    assert checked > 30


def test_every_panel_has_a_description_and_a_unit() -> None:
    for panel in all_panels():
        assert len(panel.data.get("description", "")) > 20, panel.name
        if panel.data["type"] != "text":
            assert panel.data["fieldConfig"]["defaults"].get("unit"), panel.name
            assert panel.data["targets"], panel.name


def known_labels(detail: Detail = "full") -> dict[str, dict[str, set[str] | None]]:
    """The catalogue's labels per metric exported at ``detail``, with those a process or an allocation
    entity adds."""
    known = catalogue_labels(detail)
    for name, specs in FAMILIES.items():
        if name not in known:
            continue
        for kind, labels in ENTITY_LABELS.items():
            if any(kind in spec.entities for spec in specs):
                known[name].update(dict.fromkeys((*MIG_LABELS, *labels, *ENTITY_LABELS["job"])))
    return known


def test_every_metric_and_label_is_in_the_catalogue() -> None:
    known = known_labels()
    for name in PROMETHEUS_SERIES - {"up"}:
        known[name] = {"job": None, "instance": None}
    used: set[str] = set()
    for panel in all_panels():
        for expr in panel.exprs:
            names = metric_names(expr)
            assert names - set(known) == set(), f"{panel.name}: not exported by gpu-exporter: {names - set(known)}"
            used |= names
            for metric, body in _SELECTOR.findall(expr):
                for label, op, value in _MATCHER.findall(body):
                    assert label in known[metric], f"{panel.name}: {metric} has no label {label}"
                    allowed = known[metric][label]
                    if allowed is None or value.startswith("$") or (op == "=" and value == ""):
                        continue
                    assert set(value.split("|")) <= allowed, f"{panel.name}: {metric}{{{body}}}"
    assert {"gpu_utilization_seconds_total", "gpu_clock_event_active", "gpu_exporter_backend_info"} <= used
    # the Workloads dashboard covers the attribution series
    assert {"gpu_process_memory_used_bytes", "gpu_process_sm_utilization_ratio", "gpu_allocation_info",
            "gpu_allocation_idle_seconds_total"} <= used  # fmt: skip


def test_no_panel_needs_what_the_lean_default_leaves_out() -> None:
    """Every metric a panel selects is in the default (lean) exposition, and so is the label value of
    every = matcher and at least one alternative of every =~ matcher: every panel answers without
    --metrics.detail=full (a regex may also name values only full detail has, e.g. more throttle causes)."""
    lean = known_labels("lean")
    for name in PROMETHEUS_SERIES - {"up"}:
        lean[name] = {"job": None, "instance": None}
    for panel in all_panels():
        for expr in panel.exprs:
            missing = metric_names(expr) - set(lean)
            assert missing == set(), f"{panel.name}: not in the lean default: {missing}"
            for metric, body in _SELECTOR.findall(expr):
                for label, op, value in _MATCHER.findall(body):
                    allowed = lean[metric].get(label)
                    if allowed is None or op in ("!=", "!~") or value == "" or value.startswith("$"):
                        continue
                    values = set(value.split("|"))
                    assert (values <= allowed) if op == "=" else bool(values & allowed), f"{panel.name}: {expr}"


def test_pod_resources_panels_are_in_their_own_rows_and_say_so() -> None:
    marked = [panel for panel in all_panels() if panel.pod_resources]
    assert len(marked) >= 3
    for panel in marked:
        assert "pod-resources API" in panel.data["description"], panel.name
        assert all('namespace!=""' in expr for expr in panel.exprs), panel.name


def test_dcgm_only_panels_are_in_their_own_rows_and_say_so() -> None:
    rows = 0
    for panel in all_panels():
        uses_dcgm_only = bool(set().union(*map(metric_names, panel.exprs)) & DCGM_ONLY) if panel.exprs else False
        if panel.dcgm_only:
            rows += 1
            assert uses_dcgm_only and "DCGM only" in panel.data["description"], panel.name
        else:
            assert not uses_dcgm_only, f"{panel.name} uses DCGM-only metrics outside a DCGM-only row"
    assert rows >= 3


def test_profiling_panels_are_in_their_own_rows_and_say_so() -> None:
    rows = 0
    for panel in all_panels():
        uses_profiling = bool(set().union(*map(metric_names, panel.exprs)) & PROFILING) if panel.exprs else False
        if panel.profiling and panel.exprs:
            rows += 1
            assert uses_profiling and "--no-collector.profiling" in panel.data["description"], panel.name
        else:
            assert not uses_profiling, f"{panel.name} uses profiling metrics outside a profiling row"
    assert rows >= 2  # GPU / Node and GPU, GPU / Diagnostics: SM and tensor activity


def test_time_series_draw_the_gpus_own_limits() -> None:
    checked = 0
    for panel in all_panels():
        if panel.data["type"] != "timeseries":
            continue
        names = set().union(*map(metric_names, panel.exprs))
        for expr in panel.exprs:
            metric = expr.split("{")[0]
            if metric in LIMITS and re.fullmatch(r"[a-z_]+\{[^}]*\}", expr):
                checked += 1
                assert LIMITS[metric] in names, f"{panel.name}: {metric} without {LIMITS[metric]}"
        if any(t.get("legendFormat", "").endswith("(limit)") for t in panel.data["targets"]):
            overrides = panel.data["fieldConfig"]["overrides"]
            assert any(o["matcher"]["id"] == "byRegexp" for o in overrides), panel.name
    assert checked >= 5


def test_runbook_links_resolve() -> None:
    linked: set[str] = set()
    for panel in all_panels():
        content = panel.data.get("options", {}).get("content", "")
        for url in re.findall(r"\]\((https?://[^)]*)\)", content):
            assert url.startswith(RUNBOOK_BASE + "/"), url
            linked.add(url.removeprefix(RUNBOOK_BASE + "/"))
        for name in re.findall(r"Runbooks?: ([a-z, ]+)", panel.data.get("description", "")):
            linked |= {f"{n.strip()}.md" for n in name.split(",") if n.strip()}
    assert len(linked) >= 15
    missing = {name for name in linked if not (RUNBOOKS / name).is_file()}
    assert missing == set()
    diagnostics = [p for p in panels(DASHBOARDS / "gpu-diagnostics.json") if p.data["type"] == "text"]
    rows = {p.row for p in panels(DASHBOARDS / "gpu-diagnostics.json") if not p.dcgm_only}
    assert {p.row for p in diagnostics} == rows, "every Diagnostics row has a text panel saying how to read it"
    assert all(RUNBOOK_BASE in p.data["options"]["content"] for p in diagnostics)


# --- every query on a real Prometheus ----------------------------------------------------------------------

#: Host A: the 4-GPU scenario plus processes (gpu2 held while idle, gpu1 a saw-tooth; accounting mode on gpu0, so its
#: allocation has a peak), Xids, retired-page counters and a failing fan-speed call. The fake reads the last line
#: of a repeated key.
HOST_A_EXTRA = """
gpu0.process.0.pid = 4242
gpu0.process.0.used_memory = 10737418240
gpu0.process.0.sm_util = 61
gpu0.process.0.mem_util = 20
gpu0.accounting_mode = 1
gpu0.process.0.max_memory = 12884901888
gpu1.process.0.pid = 4343
gpu1.process.0.used_memory = 21474837504
gpu1.process.0.sm_util = 40
gpu1.utilization.gpu = 95,95,2@1
gpu2.process.0.pid = 4444
gpu2.process.0.used_memory = 32212256768
gpu2.process.0.sm_util = 2
gpu3.process.0.pid = 4545
gpu3.process.0.used_memory = 1073741824
gpu3.process.0.sm_util = 30
gpu2.utilization.gpu = 3
gpu2.retired_pages.single_bit = 0
gpu2.retired_pages.double_bit = 0
gpu2.retired_pages.pending = 0
gpu1.error.nvmlDeviceGetFanSpeed = UNKNOWN
"""
#: Host A's /proc: PID -> (name, cgroup). 4242 is Slurm job 77's (an allocation of GPU 0), 4343 pod ml/train-0's
#: (the kubelet stand-in allocates it GPU 1), 4444 a login session's on GPU 2, which --hpc-job-mapping-dir
#: allocates to HPC job "hpc-9" (idle: 3% utilization), 4545 a login session's on GPU 3, which no allocation
#: owns (nor GPU 1's process where the exporter cannot ask a kubelet).
GPU1_UUID = "GPU-4a1e0c2d-1b7f-4c3a-9e21-5d8f6a0b1c11"
POD_UID = "0c7e2b54-3f1a-4d6e-8b9c-5a4f3e2d1c0b"
PROCESSES = {
    4242: ("python3", "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n"),
    4343: ("trainer", f"0::/kubepods.slice/kubepods-pod{POD_UID.replace('-', '_')}.slice/cri-containerd-{'cd' * 32}"
                      ".scope\n"),
    4444: ("notebook", "0::/user.slice/user-1000.slice/session-3.scope\n"),
    4545: ("burn", "0::/user.slice/user-1000.slice/session-4.scope\n"),
}  # fmt: skip


def fake_procfs(root: Path) -> Path:
    for pid, (name, cgroup) in PROCESSES.items():
        entry = root / str(pid)
        entry.mkdir(parents=True)
        (entry / "comm").write_text(name + "\n")
        (entry / "status").write_text(f"Name:\t{name}\nUid:\t0\t0\t0\t0\n")
        (entry / "stat").write_text(f"{pid} ({name}) S " + " ".join(["1"] * 19) + " 123456 0 0\n")
        (entry / "cgroup").write_text(cgroup)
    return root


#: Added to host A once Prometheus has scraped the Xid counters at 0 (the fake re-reads a changed file and
#: delivers an Xid whose time has passed at once), so the increase is seen whatever the start-up timing;
#: two corrected ECC errors arrive with them.
EVENTS = "gpu3.xid = 13@0,48@0\ngpu3.ecc.volatile.corrected = 2\n"
#: Stat panels whose value the scenarios fix: (dashboard, title) -> value.
STAT_VALUES = {
    ("gpu-fleet", "Exporters up"): 2,
    ("gpu-fleet", "Exporters down"): 0,
    ("gpu-fleet", "GPUs answering"): 5,
    ("gpu-fleet", "GPUs lost"): 0,
    ("gpu-fleet", "Power draw"): 612.345 + 455.12 + 98.007 + 699.999 + 151.23,
    ("gpu-fleet", "Memory installed"): 4 * 85520809984 + 42949672960,
    ("gpu-fleet", "PCIe links below their width"): 1,
    ("gpu-fleet", "GPUs needing reset or service"): 0,
    ("gpu-workloads", "Unowned processes"): 1 if POD_RESOURCES else 2,
}
#: Workloads panels' series whose values host A fixes: (title, query) -> {labels that pick a series: value}.
GIB = 1024**3
SLURM_77, HPC_9 = (("slurm_job", "77"),), (("hpc_job", "hpc-9"),)
SERIES_VALUES: dict[tuple[str, str], dict[tuple[tuple[str, str], ...], float]] = {
    ("GPU memory per job", "A"): {SLURM_77: 10 * GIB, HPC_9: 30 * GIB},
    ("Process memory per Slurm job", "A"): {SLURM_77: 10 * GIB},
    ("Jobs now", "A"): {SLURM_77: 1, HPC_9: 1},
    ("GPU memory per pod UID", "A"): {(("pod_uid", POD_UID),): 21474837504},
    ("SM share per pod UID", "A"): {(("pod_uid", POD_UID),): 0.4},
    # GPM on host A's GPU 0 (h100x4.scn: busy 97 %, SM activity 35 %, tensor 8 %)
    ("Utilization against SM activity", "B"): {(("gpu", "0"),): 0.35},
    ("Utilization against SM activity", "C"): {(("gpu", "0"),): 0.08},
    ("Unowned process list", "A"): {(("pid", "4545"), ("process", "burn")): GIB}
    | ({} if POD_RESOURCES else {(("pid", "4343"), ("pod_uid", POD_UID)): 21474837504}),
}
#: The ledger's memory per allocation (the gpu-usage dashboard): each allocation's own processes' memory,
#: HPC job hpc-9 by being GPU 2's only allocation, pod train-0 GPU 1's (pod-resources names no UID).
SERIES_VALUES[("Allocations now", "D")] = {SLURM_77: 10 * GIB, HPC_9: 30 * GIB}
if POD_RESOURCES:
    SERIES_VALUES[("Allocations now", "D")][(("pod", "train-0"),)] = 21474837504
    SERIES_VALUES |= {
        ("GPU memory per pod", "A"): {(("namespace", "ml"), ("pod", "train-0")): 21474837504},
        ("GPUs per namespace", "A"): {(("namespace", "ml"),): 1},
    }
#: Host B: the MIG scenario with an implausible memory temperature (dropped and counted).
HOST_B_EXTRA = """
gpu0.temperature.memory = 300
"""
INTERVALS = {"$__rate_interval": "4s", "$__range": "1h"}


def grafana_regex(values: list[str]) -> str:
    """A multi-value variable as Grafana's Prometheus data source writes it into ``=~"..."``: each value
    regex-escaped (the backslash doubled inside the PromQL string), joined as an alternation."""
    escaped = [re.sub(r"([\\^$*+?.()|{}\[\]])", r"\\\\\1", value) for value in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def expand(expr: str, variables: dict[str, str]) -> str:
    """The query as Grafana sends it, with the intervals and the variables' values in place."""
    for name, value in {**INTERVALS, **{f"${k}": v for k, v in variables.items()}}.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, expr
    return expr


def test_grafana_regex() -> None:
    assert grafana_regex(["gpu-exporter"]) == "gpu-exporter"
    assert grafana_regex(["127.0.0.1:9400", "b"]) == "(127\\\\.0\\\\.0\\\\.1:9400|b)"


def _get(port: int, path: str, **params: str) -> dict[str, Any]:
    response = httpx.get(f"http://127.0.0.1:{port}{path}", params=params, timeout=10)
    body: dict[str, Any] = response.json()
    assert body.get("status") == "success", f"{params}: {body.get('error')}"
    return body


def _wait(port: int, promql: str, log: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if _get(port, "/api/v1/query", query=promql)["data"]["result"]:
                return
        except (httpx.HTTPError, ValueError, AssertionError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"no result for {promql} in {seconds} s:\n{log.read_text()[-3000:]}")
