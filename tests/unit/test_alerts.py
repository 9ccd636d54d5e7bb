"""Alert rules, recording rules, the Alertmanager example and the runbooks.

promtool checks and unit-tests the rules; every metric and label the rules use is checked against the
catalogue; the Xid code lists against the shared Xid table; amtool checks the Alertmanager example's
routing, and its inhibition on a real Alertmanager; and one test runs the whole path on loopback: the
exporter on the fake NVML (a hot GPU, Xids, a GPU falling off the bus), a real Prometheus evaluating a
copy of the rules with shortened ``for:``, a real Alertmanager, and webhook receivers in the test.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from gpu_exporter.catalogue import (
    DEVICE_LABELS,
    FAMILIES,
    FIXED,
    LINK_LABEL,
    MIG_LABELS,
    SWITCH_METRICS,
    Detail,
    detailed,
)
from tests.harness import REPO, served

ALERTS = REPO / "alerts"
ALERT_RULES = ALERTS / "gpu-alerts.rules.yml"
RECORDING_RULES = ALERTS / "gpu-recording.rules.yml"
AM_EXAMPLE = ALERTS / "alertmanager.example.yml"
UNIT_TESTS = sorted((ALERTS / "tests").glob("*.test.yml"))
RUNBOOKS = REPO / "docs" / "runbooks"
RUNBOOK_BASE = "https://github.com/OWNER/gpu-exporter/blob/main/docs/runbooks"

#: The alerts issue 5 asks for, by name.
EXPECTED_ALERTS = {
    "GPUTemperatureHigh", "GPUTemperatureCritical", "GPUMemoryTemperatureHigh", "GPUXidError", "GPUFallenOffBus",
    "GPUUncorrectableECCError", "GPURowRemapFailure", "GPURowRemapPending", "GPUThermalThrottling",
    "GPUPowerThrottling", "GPUHardwareSlowdown", "GPUClockStraggler", "GPUMemoryNearlyFull",
    "GPUUtilizationSaturated", "GPUBusyLowSMActivity", "GPUIdleMemoryHeld", "GPUInputStarvation", "GPUAllocatedIdle",
    "GPUPCIeLinkDegraded",
    "GPUExporterDown",
    "GPUMetricsAbsent", "GPUExporterStale", "GPUExporterBackendDown",
    "GPUNVLinkDown", "GPUNVLinkErrors", "GPUNVSwitchFatalError", "GPUNVSwitchPortDown", "GPUNVSwitchTemperatureHigh",
}  # fmt: skip
#: Alerts about a node's exporter rather than one GPU: their descriptions need not name a GPU.
NODE_ALERTS = {"GPUExporterDown", "GPUMetricsAbsent", "GPUExporterBackendDown"}
#: Alerts about an NVSwitch: their descriptions name the switch instead of a GPU.
SWITCH_ALERTS = {"GPUNVSwitchFatalError", "GPUNVSwitchPortDown", "GPUNVSwitchTemperatureHigh"}
#: Labels Prometheus adds to every scraped series.
TARGET_LABELS = ("job", "instance")

Rule = dict[str, Any]


def tool(*names: str) -> str:
    """The first of ``names`` on PATH; fail with the install hint otherwise."""
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    pytest.fail(f"{' or '.join(names)} not found: run scripts/test, which installs Debian's prometheus and "
                "prometheus-alertmanager packages", pytrace=False)  # fmt: skip


def run(*command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


def rules(path: Path) -> list[tuple[str, Rule]]:
    """(group name, rule) for every rule of a rule file."""
    data = yaml.safe_load(path.read_text())
    return [(group["name"], rule) for group in data["groups"] for rule in group["rules"]]


def alert_rules() -> list[Rule]:
    return [rule for _, rule in rules(ALERT_RULES) if "alert" in rule]


def load_generate() -> ModuleType:
    """``alerts/generate.py`` as a module (it is a script, not part of a package)."""
    spec = importlib.util.spec_from_file_location("alerts_generate", ALERTS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- promtool ----------------------------------------------------------------------------------------


def test_every_alert_has_a_firing_and_a_quiet_unit_test() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in UNIT_TESTS:
        for group in yaml.safe_load(path.read_text())["tests"]:
            for case in group.get("alert_rule_test", []):
                (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    names = {rule["alert"] for rule in alert_rules()}
    assert names - firing == set(), "alerts without a unit test where they fire"
    assert names - quiet == set(), "alerts without a unit test where they must not fire (exp_alerts: [])"


def test_every_recording_rule_has_a_value_test() -> None:
    tested = {
        case["expr"]
        for path in UNIT_TESTS
        for group in yaml.safe_load(path.read_text())["tests"]
        for case in group.get("promql_expr_test", [])
    }
    records = {rule["record"] for _, rule in rules(RECORDING_RULES)}
    assert records - tested == set()


# --- the rules against the catalogue -------------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_COMMENT = re.compile(r"#[^\n]*")
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"(?<![\w.:$])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])(?!\s*\()")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
             "group_right", "inf", "nan", "start", "end"}  # fmt: skip
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")
_MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"')


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects: identifiers that are not functions, keywords,
    label names (in matchers and grouping clauses), durations or numbers."""
    text = _STRING.sub('""', expr)
    text = _COMMENT.sub("", text)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _GROUPING.sub("", text)
    return {name for name in _IDENTIFIER.findall(text) if name not in _KEYWORDS}


def test_metric_name_extraction() -> None:
    expr = """
        max without (xid) (increase(gpu_xid_errors_total{xid="79"}[10m]) > 0)  # threshold: x_y
        or gpu_up == 0 unless on (instance) gpu_info offset 10m or gpu_up offset $__range
        and 1e9 * quantile by (instance, name) (0.5, instance:gpu_power_watts:sum) > bool 3
        or absent(up{job="gpu-exporter"}) or timestamp(a_b) - a_b > 3 * c + 30
    """
    assert metric_names(expr) == {"gpu_xid_errors_total", "gpu_up", "gpu_info", "instance:gpu_power_watts:sum",
                                  "up", "a_b", "c"}  # fmt: skip


def catalogue_labels(detail: Detail = "full") -> dict[str, dict[str, set[str] | None]]:
    """For every metric exported at ``detail`` (``--metrics.detail``): each label it may carry → its
    allowed values (None: any value)."""
    known: dict[str, dict[str, set[str] | None]] = {}
    switch_families = {spec.name: tuple(s for s in SWITCH_METRICS if s.name == spec.name) for spec in SWITCH_METRICS}
    for name, every in {**FAMILIES, **switch_families}.items():
        specs = detailed(every, detail)
        if not specs:
            continue
        owner = ("nvswitch",) if any(spec.nvswitch for spec in specs) else DEVICE_LABELS
        labels: dict[str, set[str] | None] = dict.fromkeys((*TARGET_LABELS, *owner))
        if any(spec.mig for spec in specs):
            labels.update(dict.fromkeys(MIG_LABELS))
        if any(spec.per_link for spec in specs):
            labels.update(dict.fromkeys((LINK_LABEL,)))
        for spec in specs:
            for label, value in spec.variant:
                values = labels.get(label) or set()
                values.add(value)
                labels[label] = values
        known[name] = labels
    for metric in FIXED.values():
        known[metric.name] = dict.fromkeys((*TARGET_LABELS, *metric.labels))
    known["up"] = dict.fromkeys(TARGET_LABELS)  # Prometheus' own per-target series
    return known


def all_expressions() -> list[str]:
    return [rule["expr"] for path in (ALERT_RULES, RECORDING_RULES) for _, rule in rules(path)]


def test_every_metric_the_rules_use_exists() -> None:
    known = catalogue_labels()
    recorded = {rule["record"] for _, rule in rules(RECORDING_RULES)}
    used = set().union(*map(metric_names, all_expressions()))
    assert {"gpu_temperature_celsius", "gpu_xid_errors_total", "up", "gpu_info"} <= used  # the parser works
    assert used - set(known) - recorded == set(), "metrics used by the rules but not exported by gpu-exporter"


def test_every_label_matcher_names_a_real_label_and_value() -> None:
    known = catalogue_labels()
    checked = 0
    for expr in all_expressions():
        for metric, body in _SELECTOR.findall(_COMMENT.sub("", expr)):
            if metric not in known:
                continue  # a recording rule's output
            for label, op, value in _MATCHER.findall(body):
                checked += 1
                assert label in known[metric], f"{metric} has no label {label}"
                if label == "xid":
                    assert all(re.fullmatch(r"\d+", code) for code in value.split("|")), f"{metric}{{{body}}}"
                allowed = known[metric][label]
                if allowed is None or op == "!=" or (op == "=" and value == ""):
                    continue
                assert set(value.split("|")) <= allowed, f"{metric}{{{body}}}: allowed {sorted(allowed)}"
    assert checked > 20


def test_the_rules_need_nothing_the_lean_default_leaves_out() -> None:
    """Every metric the alert and recording rules select, and every label value they ask for, is in the
    default (lean) exposition: no rule needs --metrics.detail=full."""
    lean = catalogue_labels("lean")
    recorded = {rule["record"] for _, rule in rules(RECORDING_RULES)}
    used = set().union(*map(metric_names, all_expressions()))
    assert used - set(lean) - recorded == set(), "metrics the rules use that the lean default leaves out"
    checked = 0
    for expr in all_expressions():
        for metric, body in _SELECTOR.findall(_COMMENT.sub("", expr)):
            for label, op, value in _MATCHER.findall(body):
                allowed = lean.get(metric, {}).get(label)
                if allowed is None or op in ("!=", "!~") or value == "":
                    continue
                checked += 1
                assert set(value.split("|")) <= allowed, f"{metric}{{{body}}}: the lean default has {sorted(allowed)}"
    assert checked >= 5  # the clock event reasons, ECC types, ...


def test_alerts_drop_a_severity_label_of_their_series() -> None:
    """An alert's own ``severity`` label would silently replace a ``severity`` label of the series it
    selects (gpu_nvswitch_last_sxid's fatal/non_fatal): such rules aggregate it away."""
    known = catalogue_labels()
    checked = 0
    for rule in alert_rules():
        if any("severity" in known.get(metric, {}) for metric in metric_names(rule["expr"])):
            checked += 1
            assert re.search(r"\bwithout\s*\(\s*severity\s*\)", rule["expr"]), rule["alert"]
    assert checked >= 1


def _xid_selector(rule: Rule) -> tuple[str, str]:
    """The (operator, regex) of a GPUXidError rule; every selector in it must be the same."""
    selectors: set[tuple[str, str]] = set(re.findall(r'gpu_xid_errors_total\{xid(=~|!~)"([^"]*)"\}', rule["expr"]))
    assert len(selectors) == 1, rule["expr"]
    return selectors.pop()


# --- annotations, labels, runbooks ---------------------------------------------------------------------


def test_alerts_are_the_expected_set_with_severity_and_annotations() -> None:
    groups: dict[str, int] = {}
    for group, _ in rules(ALERT_RULES):
        groups[group] = groups.get(group, 0) + 1
    assert max(groups.values()) <= 20 and all(len(name) <= 40 for name in groups)
    seen = set()
    for rule in alert_rules():
        name = rule["alert"]
        seen.add(name)
        assert re.fullmatch(r"GPU[A-Z][A-Za-z]+", name) and len(name) <= 40, name
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
        notes = rule["annotations"]
        assert set(notes) == {"summary", "description", "runbook_url"}, name
        summary, description = notes["summary"], notes["description"]
        assert "{{" not in summary and summary[0].isupper() and summary.endswith("."), f"{name}: {summary}"
        assert "$labels.instance" in description, f"{name}: the description must name the node"
        if name in SWITCH_ALERTS:
            assert "$labels.nvswitch" in description, f"{name}: name the NVSwitch"
        elif name not in NODE_ALERTS:
            assert "$labels.gpu" in description and "$labels.uuid" in description, f"{name}: name the GPU"
        assert notes["runbook_url"] == f"{RUNBOOK_BASE}/{name.lower()}.md", name
        assert (RUNBOOKS / f"{name.lower()}.md").is_file(), name
    assert seen == EXPECTED_ALERTS


def test_runbooks_say_what_it_means_how_to_confirm_and_what_to_do() -> None:
    names = {rule["alert"] for rule in alert_rules()}
    files = {path.name for path in RUNBOOKS.glob("*.md")} - {"README.md"}
    assert files == {f"{name.lower()}.md" for name in names}
    index = (RUNBOOKS / "README.md").read_text()
    for name in names:
        text = (RUNBOOKS / f"{name.lower()}.md").read_text()
        assert text.startswith(f"# {name}\n"), name
        sections = re.split(r"^## ", text, flags=re.MULTILINE)
        titles = {section.split("\n", 1)[0] for section in sections[1:]}
        assert {"Meaning", "Confirm", "Action"} <= titles, f"{name}: {titles}"
        confirm = next(section for section in sections if section.startswith("Confirm"))
        assert "```promql" in confirm and "```sh" in confirm, f"{name}: give a query and a command"
        assert f"[{name.lower()}.md]({name.lower()}.md)" in index, name


def test_thresholds_are_tagged_consistently_and_documented() -> None:
    generate = load_generate()
    found: dict[str, list[str]] = generate.thresholds(ALERT_RULES.read_text())
    assert len(found) >= 10
    readme = (ALERTS / "README.md").read_text()
    for name, values in found.items():
        assert len(set(values)) == 1, f"threshold {name} has different values: {values}"
        assert f"| `{name}` | {values[0]} |" in readme, f"threshold {name} is not documented in alerts/README.md"


# --- Alertmanager: amtool --------------------------------------------------------------------------------


def test_alertmanager_example_groups_by_node_and_gpu() -> None:
    config = yaml.safe_load(AM_EXAMPLE.read_text())
    assert config["route"]["group_by"] == ["instance", "gpu"]
    assert all("group_by" not in route for route in config["route"]["routes"])  # inherited everywhere


# --- real Alertmanager and webhook receivers --------------------------------------------------------------


class Webhooks:
    """An HTTP server on 127.0.0.1 that records every Alertmanager webhook POST, by path."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []
        lock = threading.Lock()
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with lock:
                    received.append((self.path, json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def alerts(self, path: str) -> list[dict[str, Any]]:
        """Firing alerts delivered to ``path`` so far."""
        return [
            alert
            for where, payload in list(self.received)
            if where == path
            for alert in payload["alerts"]
            if alert["status"] == "firing"
        ]

    @contextmanager
    def running(self) -> Iterator[Webhooks]:
        self.thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()
            self.thread.join(5)


def alertmanager_config(webhooks: str, group_wait: str) -> dict[str, Any]:
    """The example configuration with its receivers pointed at the test's webhooks and shorter waits."""
    config: dict[str, Any] = yaml.safe_load(AM_EXAMPLE.read_text())
    for receiver in config["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = f"{webhooks}/{receiver['name']}"
    config["route"].update(group_wait=group_wait, group_interval="5s", repeat_interval="1h")
    return config


@contextmanager
def alertmanager(tmp_path: Path, config: dict[str, Any]) -> Iterator[str]:
    """A real Alertmanager on 127.0.0.1 (clustering off, storage in tmp); yields its URL."""
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    check = run(tool("amtool"), "check-config", str(path))
    assert check.returncode == 0, check.stdout + check.stderr
    command = [tool("prometheus-alertmanager", "alertmanager"), f"--config.file={path}",
               f"--storage.path={tmp_path / 'am-data'}", "--web.listen-address=127.0.0.1:0",
               "--cluster.listen-address="]  # fmt: skip
    with served(command, tmp_path / "alertmanager.log", "/-/ready") as url:
        yield url


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.25)
