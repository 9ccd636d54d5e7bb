"""Turn measurement points into medians (with min and max), ratios, target verdicts and Markdown."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from bench.scenarios import Size
from bench.systems import CEILING, FLOOR, GPU_EXPORTER, NVITOP, SYSTEMS

MIB = 1024 * 1024
#: Scalar figures aggregated across runs: name → path in a point's figures.
FIGURES: dict[str, tuple[str, ...]] = {
    "exposition_bytes": ("exposition_bytes",),
    "series": ("series",),
    "p50_c1_ms": ("latency", "c1", "p50_ms"),
    "p99_c1_ms": ("latency", "c1", "p99_ms"),
    "p50_c16_ms": ("latency", "c16", "p50_ms"),
    "p99_c16_ms": ("latency", "c16", "p99_ms"),
    "rps_c1": ("latency", "c1", "requests_per_second"),
    "rps_c16": ("latency", "c16", "requests_per_second"),
    "scrape_cpu_s_per_1000": ("scrape_cpu_s_per_1000",),
    "sampling_cpu_s_per_min": ("sampling_cpu_s_per_min",),
    "rss_warm_mib": ("rss_warm_bytes",),
    "rss_after_scrapes_mib": ("rss_after_scrapes_bytes",),
    "scrapes_before_rss_after": ("scrapes_before_rss_after",),
    "other_load_cores": ("other_load_cores_during_idle",),
    "prometheus_cpu_s_per_min": ("prometheus_cpu_s_per_min",),
    "prometheus_scrape_ms_max": ("prometheus", "scrape_ms_max"),
    "prometheus_other_load_cores": ("prometheus", "other_load_cores"),
}
LATENCIES = ("p50_c1_ms", "p99_c1_ms", "p50_c16_ms", "p99_c16_ms")
#: Targets of issue 28 (issue 16's 1 s comparison, 0.5× and 1.25× are superseded): gpu-exporter at its
#: default interval (reading the driver's sample buffers) against nvitop-exporter at 1 s.
TOTAL_RATIO_MAX = 0.2
SAMPLES_SEEN_MIN = 0.99
P50_RATIO_MAX = 1.1
P99_RATIO_MAX_64 = 2.0
FLOOR_RATIO_MAX = 1.5
RSS_MAX_MIB = 40.0
RSS_TARGET_GPUS = 8
#: "Linear": the cost of one more GPU does not grow with the GPU count (the last marginal step is at
#: most this multiple of the first). A shrinking marginal cost (fixed per-cycle overhead) passes.
LINEAR_MARGINAL_MAX = 1.33


def _get(figures: dict[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = figures
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    if value is None:
        return None
    number = float(value)
    return number / MIB if path[-1].endswith("_bytes") and "rss" in path[-1] else number


def stats(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def _errors(figures: dict[str, Any]) -> int:
    runs = [figures.get("scrape_run", {}), *figures.get("latency", {}).values()]
    return sum(sum(run.get("errors", {}).values()) for run in runs)


def aggregate(points: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """size key → system → {figure: {median, min, max, n}, "errors": n, "failures": [...]}"""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for point in points:
        cell = out.setdefault(point["size"], {}).setdefault(point["system"], {"errors": 0, "failures": []})
        if "error" in point:
            cell["failures"].append(point["error"])
            continue
        cell["errors"] += _errors(point["figures"])
        cell.setdefault("_values", {})
        for name, path in FIGURES.items():
            value = _get(point["figures"], path)
            if value is not None:
                cell["_values"].setdefault(name, []).append(value)
    for systems in out.values():
        for cell in systems.values():
            for name, values in cell.pop("_values", {}).items():
                cell[name] = stats(values)
    return out


def _median(agg: dict[str, dict[str, dict[str, Any]]], size: str, system: str, name: str) -> float | None:
    stats = agg.get(size, {}).get(system, {}).get(name)
    return None if stats is None else float(stats["median"])


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


#: Prometheus's usual scrape interval, for the "sampling plus scraping" comparison.
SCRAPES_PER_MIN = 4


def _with_scrapes(agg: dict[str, dict[str, dict[str, Any]]], size: str, system: str) -> float | None:
    """CPU seconds per minute of sampling plus SCRAPES_PER_MIN scrapes."""
    sampling = _median(agg, size, system, "sampling_cpu_s_per_min")
    scrape = _median(agg, size, system, "scrape_cpu_s_per_1000")
    return None if sampling is None or scrape is None else sampling + SCRAPES_PER_MIN * scrape / 1000


def ratios(agg: dict[str, dict[str, dict[str, Any]]], sizes: Sequence[Size]) -> dict[str, dict[str, float | None]]:
    """Per size: gpu-exporter ÷ ceiling (latency, scrape CPU) and gpu-exporter ÷ nvitop (CPU, memory)."""
    out: dict[str, dict[str, float | None]] = {}
    for size in sizes:
        k = size.key

        def r(name: str, other: str, k: str = k) -> float | None:
            return _ratio(_median(agg, k, GPU_EXPORTER, name), _median(agg, k, other, name))

        out[k] = {
            **{f"{name}_vs_ceiling": r(name, CEILING) for name in LATENCIES},
            "scrape_cpu_vs_ceiling": r("scrape_cpu_s_per_1000", CEILING),
            "sampling_cpu_vs_nvitop": r("sampling_cpu_s_per_min", NVITOP),
            "scrape_cpu_vs_nvitop": r("scrape_cpu_s_per_1000", NVITOP),
            "rss_warm_vs_nvitop": r("rss_warm_mib", NVITOP),
            "rss_after_vs_nvitop": r("rss_after_scrapes_mib", NVITOP),
            "p50_c1_vs_nvitop": r("p50_c1_ms", NVITOP),
            "cpu_with_15s_scrapes_vs_nvitop": _ratio(
                _with_scrapes(agg, k, GPU_EXPORTER), _with_scrapes(agg, k, NVITOP)
            ),
        }
    return out


def _marginal(agg: dict[str, dict[str, dict[str, Any]]], sizes: Sequence[Size], system: str) -> dict[str, Any]:
    """Sampling CPU per extra GPU between consecutive plain sizes (no MIG), and their ratio."""
    plain = sorted({s.gpus for s in sizes if not s.mig})
    costs = {n: _median(agg, Size(n).key, system, "sampling_cpu_s_per_min") for n in plain}
    steps = []
    for low, high in zip(plain, plain[1:], strict=False):
        a, b = costs[low], costs[high]
        if a is not None and b is not None:
            steps.append({"from": low, "to": high, "s_per_min_per_gpu": (b - a) / (high - low)})
    ratio = None
    if len(steps) >= 2 and steps[0]["s_per_min_per_gpu"] > 0:
        ratio = steps[-1]["s_per_min_per_gpu"] / steps[0]["s_per_min_per_gpu"]
    return {"costs": {str(n): c for n, c in costs.items()}, "steps": steps, "last_to_first_step": ratio}


def calls_per_gpu(calls: dict[str, Any], size: str, system: str) -> float | None:
    """Driver calls per GPU per minute of ``system`` at ``size`` (traced run)."""
    value = calls.get(size, {}).get(system, {}).get("calls_per_gpu_per_minute")
    return None if value is None else float(value)


def _calls_figure(calls: dict[str, Any], size: str, system: str, name: str) -> float | None:
    value = calls.get(size, {}).get(system, {}).get(name)
    return None if value is None else float(value)


def samples_seen(calls: dict[str, Any], size: str, system: str) -> float | None:
    """GPU utilisation samples ``system`` sees per GPU per minute (buffer samples plus point reads)."""
    return _calls_figure(calls, size, system, "utilization_samples_seen_per_gpu_per_minute")


def driver_samples(calls: dict[str, Any], size: str) -> float | None:
    """The driver's own GPU utilisation samples per GPU per minute (0: it keeps none, MIG mode)."""
    for system in (GPU_EXPORTER, NVITOP, FLOOR):
        value = _calls_figure(calls, size, system, "driver_utilization_samples_per_gpu_per_minute")
        if value is not None:
            return value
    return None


def targets(
    agg: dict[str, dict[str, dict[str, Any]]],
    sizes: Sequence[Size],
    profile: Sequence[dict[str, Any]],
    calls: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Issue 28's targets (and two informational rows), each with the figures behind it and
    met / missed / not measured."""
    calls = calls or {}
    out: list[dict[str, Any]] = []

    def item(target: str, values: dict[str, Any], known: Sequence[bool], informational: bool = False) -> None:
        out.append(
            {"target": target, "values": values, "met": all(known) if known else None, "informational": informational}
        )

    total = {
        s.key: _ratio(
            _median(agg, s.key, GPU_EXPORTER, "prometheus_cpu_s_per_min"),
            _median(agg, s.key, NVITOP, "prometheus_cpu_s_per_min"),
        )
        for s in sizes
    }
    main = [total.get(Size(n).key) for n in (8, 64)]
    item(
        f"(a) total CPU (the headline: each exporter at its interval, one OpenMetrics+gzip scrape every 15 s in a "
        f"full run) ≤ {TOTAL_RATIO_MAX:g}× nvitop-exporter's at 8 and 64 GPUs",
        total,
        [v <= TOTAL_RATIO_MAX for v in main if v is not None],
    )
    seen: dict[str, Any] = {}
    verdicts: list[bool] = []
    for s in sizes:
        ours, driver = samples_seen(calls, s.key, GPU_EXPORTER), driver_samples(calls, s.key)
        if driver == 0:
            seen[s.key] = "n/a (MIG mode: the driver keeps no utilisation samples)"
        elif ours is not None and driver is not None:
            seen[s.key] = f"{_num(ours)} of {_num(driver)} ({ours / driver:.1%})"
            verdicts.append(ours / driver >= SAMPLES_SEEN_MIN)
        else:
            seen[s.key] = None
    item(
        f"(b) every driver GPU utilisation sample accounted: gpu-exporter sees ≥ {SAMPLES_SEEN_MIN:.0%} of the "
        "driver's per GPU per minute at every size",
        seen,
        verdicts,
    )
    rat = ratios(agg, sizes)
    big = Size(64).key
    p50 = {f"64gpu c{c}": rat.get(big, {}).get(f"p50_c{c}_ms_vs_ceiling") for c in (1, 16)}
    p99 = {f"64gpu c{c}": rat.get(big, {}).get(f"p99_c{c}_ms_vs_ceiling") for c in (1, 16)}
    item(
        f"(c) scrape p50 ≤ {P50_RATIO_MAX:g}× the ceiling's and p99 ≤ {P99_RATIO_MAX_64:g}× at 64 GPUs "
        "(1 and 16 clients)",
        {"p50 ÷ ceiling": p50, "p99 ÷ ceiling": p99},
        [v <= P50_RATIO_MAX for v in p50.values() if v is not None]
        + [v <= P99_RATIO_MAX_64 for v in p99.values() if v is not None],
    )
    rss_key = Size(RSS_TARGET_GPUS).key
    rss = {
        "warm": _median(agg, rss_key, GPU_EXPORTER, "rss_warm_mib"),
        "after scrapes": _median(agg, rss_key, GPU_EXPORTER, "rss_after_scrapes_mib"),
        "max of runs": (agg.get(rss_key, {}).get(GPU_EXPORTER, {}).get("rss_after_scrapes_mib") or {}).get("max"),
    }
    item(f"(d) RSS ≤ {RSS_MAX_MIB:g} MiB at {RSS_TARGET_GPUS} GPUs", rss, [v <= RSS_MAX_MIB for v in rss.values() if v])
    floor = {
        s.key: _ratio(
            _median(agg, s.key, GPU_EXPORTER, "prometheus_cpu_s_per_min"),
            _median(agg, s.key, FLOOR, "prometheus_cpu_s_per_min"),
        )
        for s in sizes
    }
    item(
        f"gpu-exporter ÷ floor ≤ {FLOOR_RATIO_MAX:g}",
        floor,
        [v <= FLOOR_RATIO_MAX for v in floor.values() if v],
        informational=True,
    )
    per_gpu = {
        s.key: f"{_num(calls_per_gpu(calls, s.key, GPU_EXPORTER))} vs {_num(calls_per_gpu(calls, s.key, NVITOP))}"
        for s in sizes
    }
    pairs = [(calls_per_gpu(calls, s.key, GPU_EXPORTER), calls_per_gpu(calls, s.key, NVITOP)) for s in sizes]
    item(
        "driver calls per GPU per minute ≤ nvitop-exporter's (gpu-exporter vs nvitop-exporter)",
        per_gpu,
        [a <= b for a, b in pairs if a is not None and b is not None],
        informational=True,
    )
    return out


def headline_table(
    agg: dict[str, dict[str, dict[str, Any]]],
    calls: dict[str, Any],
    sizes: Sequence[Size],
    every_s: float,
    intervals: dict[str, float] | None = None,
) -> str:
    """CPU per minute as Prometheus uses the exporters (one scrape every ``every_s``), each at its own
    interval, beside nvitop-exporter and the floor, with each system's driver calls per GPU per minute
    and the GPU utilisation samples it sees per GPU per minute against the driver's own count."""
    intervals = intervals or {}
    shown = " / ".join(
        "–" if intervals.get(system) is None else f"{intervals[system]:g}" for system in (GPU_EXPORTER, NVITOP, FLOOR)
    )
    head = (
        "| Host | interval, s: gpu-exporter / nvitop / floor | gpu-exporter CPU s / min "
        "| nvitop-exporter CPU s / min | gpu-exporter ÷ nvitop | floor CPU s / min | gpu-exporter ÷ floor "
        "| driver calls / GPU / min: gpu-exporter / nvitop / floor "
        "| GPU utilisation samples seen / GPU / min: gpu-exporter / nvitop / the driver's "
        f"| slowest scrape (one per {every_s:g} s) in the window, ms (gpu-exporter) |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    rows = []
    for size in sizes:
        k = size.key

        def cell(system: str, name: str = "prometheus_cpu_s_per_min", k: str = k) -> dict[str, float] | None:
            got: dict[str, float] | None = agg.get(k, {}).get(system, {}).get(name)
            return got

        ours, theirs, floor = (
            _median(agg, k, system, "prometheus_cpu_s_per_min") for system in (GPU_EXPORTER, NVITOP, FLOOR)
        )
        counts = " / ".join(_num(calls_per_gpu(calls, k, system)) for system in (GPU_EXPORTER, NVITOP, FLOOR))
        driver = driver_samples(calls, k)
        seen = " / ".join(
            [_num(samples_seen(calls, k, GPU_EXPORTER)), _num(samples_seen(calls, k, NVITOP))]
            + ["none (MIG mode)" if driver == 0 else _num(driver)]
        )
        rows.append(
            f"| {size.label} | {shown} | {_cell(cell(GPU_EXPORTER))} | {_cell(cell(NVITOP))} "
            f"| {_num(_ratio(ours, theirs))} | {_cell(cell(FLOOR))} | {_num(_ratio(ours, floor))} | {counts} "
            f"| {seen} | {_cell(cell(GPU_EXPORTER, 'prometheus_scrape_ms_max'))} |"
        )
    return head + "\n".join(rows) + "\n"


# Markdown ---------------------------------------------------------------------------------------


def _num(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "–"
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.{digits}g}" if magnitude < 1 else f"{value:.2f}"


def _cell(stats: dict[str, float] | None, digits: int = 3) -> str:
    if stats is None:
        return "–"
    median, low, high = stats["median"], stats["min"], stats["max"]
    if stats["n"] == 1 or _num(low, digits) == _num(high, digits):
        return _num(median, digits)
    return f"{_num(median, digits)} <sub>{_num(low, digits)}–{_num(high, digits)}</sub>"


def _int(stats: dict[str, float] | None) -> str:
    if stats is None:
        return "–"
    if stats["min"] == stats["max"]:
        return f"{stats['median']:,.0f}"
    return f"{stats['median']:,.0f} <sub>{stats['min']:,.0f}–{stats['max']:,.0f}</sub>"


def _verdict(met: bool | None) -> str:
    return {True: "**met**", False: "**missed**", None: "not measured"}[met]


def results_table(agg: dict[str, dict[str, dict[str, Any]]], sizes: Sequence[Size]) -> str:
    head = (
        "| Host | System | Exposition bytes (series) | p50 ms, 1 client | p99 ms, 1 client | p50 ms, 16 clients "
        "| p99 ms, 16 clients | Scrape CPU s / 1000 scrapes | Sampling CPU s / min | RSS MiB after warm-up "
        "| RSS MiB after scrapes (scrapes) |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    rows = []
    for size in sizes:
        for system in SYSTEMS:
            cell = agg.get(size.key, {}).get(system)
            if cell is None or system == FLOOR:
                continue
            if "p50_c1_ms" not in cell:
                rows.append(f"| {size.label} | {system} | failed: {'; '.join(cell['failures'])[:200]} |" + " |" * 8)
                continue
            sampling = "n/a (serves fixed bytes)" if system == CEILING else _cell(cell.get("sampling_cpu_s_per_min"))
            errors = f" ⚠ {cell['errors']} HTTP errors" if cell["errors"] else ""
            failed = f" ⚠ {len(cell['failures'])} failed runs" if cell["failures"] else ""
            rows.append(
                f"| {size.label} | {system}{errors}{failed} | {_int(cell.get('exposition_bytes'))} "
                f"({_int(cell.get('series'))}) | {_cell(cell.get('p50_c1_ms'))} | {_cell(cell.get('p99_c1_ms'))} "
                f"| {_cell(cell.get('p50_c16_ms'))} | {_cell(cell.get('p99_c16_ms'))} "
                f"| {_cell(cell.get('scrape_cpu_s_per_1000'))} | {sampling} | {_cell(cell.get('rss_warm_mib'))} "
                f"| {_cell(cell.get('rss_after_scrapes_mib'))} ({_int(cell.get('scrapes_before_rss_after'))}) |"
            )
    return head + "\n".join(rows) + "\n"


def ratio_table(rat: dict[str, dict[str, float | None]], sizes: Sequence[Size]) -> str:
    head = (
        "| Host | p50 ÷ ceiling, 1 / 16 clients | p99 ÷ ceiling, 1 / 16 clients | Scrape CPU ÷ ceiling "
        "| Sampling CPU ÷ nvitop | Scrape CPU ÷ nvitop | RSS ÷ nvitop, warm / after scrapes "
        "| p50 ÷ nvitop, 1 client | CPU ÷ nvitop, sampling + 1 scrape / 15 s |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    rows = []
    for size in sizes:
        r = rat[size.key]
        rows.append(
            f"| {size.label} | {_num(r['p50_c1_ms_vs_ceiling'])} / {_num(r['p50_c16_ms_vs_ceiling'])} "
            f"| {_num(r['p99_c1_ms_vs_ceiling'])} / {_num(r['p99_c16_ms_vs_ceiling'])} "
            f"| {_num(r['scrape_cpu_vs_ceiling'])} | {_num(r['sampling_cpu_vs_nvitop'])} "
            f"| {_num(r['scrape_cpu_vs_nvitop'])} | {_num(r['rss_warm_vs_nvitop'])} / {_num(r['rss_after_vs_nvitop'])} "
            f"| {_num(r['p50_c1_vs_nvitop'])} | {_num(r['cpu_with_15s_scrapes_vs_nvitop'])} |"
        )
    return head + "\n".join(rows) + "\n"


def _values_text(values: Any) -> str:
    if isinstance(values, dict):
        return "; ".join(f"{k}: {_values_text(v)}" for k, v in values.items())
    if isinstance(values, float):
        return _num(values)
    return "–" if values is None else str(values)


def targets_table(items: Sequence[dict[str, Any]]) -> str:
    rows = ["| Target | Measured (medians) | Verdict |", "|---|---|---|"]
    for item in items:
        verdict = _verdict(item["met"])
        if "linear" in item:
            verdict += f" (linear: {_verdict(item['linear'])}, flat: {_verdict(item['flat'])})"
        target = f"{item['target']} (informational)" if item.get("informational") else item["target"]
        rows.append(f"| {target} | {_values_text(item['values'])} | {verdict} |")
    return "\n".join(rows) + "\n"


def profile_section(profiles: Sequence[dict[str, Any]], interval_s: float) -> str:
    parts = [
        "py-spy samples the thread holding the GIL, so its figures are Python CPU time; C code that "
        "releases the GIL (the NVML calls themselves, zlib, socket sends) is only in the /proc figure. "
        "The scrape window's categories include the background sampling, shared out over its scrapes. "
        "NVML calls are counted with the fake library's trace file.\n"
    ]
    for p in profiles:
        if "error" in p:
            parts.append(f"Profile at {p['size']}: failed ({p['error']}).\n")
            continue
        idle, scr = p["idle"], p["scrape"]
        interval_s = float(p.get("interval_s", interval_s))
        gpus = int(p["size"].split("gpu")[0])
        symbols = list(idle.get("nvml_calls_per_interval_by_symbol", {}).items())
        parts.append(
            f"**{p['size']}** (py-spy at {p['rate_hz']} Hz). One sampling interval ({interval_s:g} s): "
            f"{_num(idle['cpu_ms_per_interval_procfs'])} ms CPU by /proc, {_num(idle['ms_per_unit_total'])} ms "
            f"holding the GIL, {idle['nvml_calls_per_interval']:.0f} NVML calls "
            f"({idle['nvml_calls_per_interval'] / gpus:.1f} per GPU"
            + (
                f"; {idle['nvml_calls_per_minute'] / gpus:.0f} per GPU per minute"
                if "nvml_calls_per_minute" in idle
                else ""
            )
            + f"). One scrape (1 client, {scr['requests']} "
            f"scrapes, p50 {_num(scr['p50_ms'])} ms): {_num(scr['cpu_ms_per_scrape_procfs'])} ms CPU by /proc "
            f"(background sampling included), {_num(scr['ms_per_unit_total'])} ms holding the GIL, "
            f"{scr['nvml_calls_per_scrape']:.3f} NVML calls per scrape."
            + (
                f" nvitop-exporter at this size: {p['nvitop']['nvml_calls_per_interval']:.0f} NVML calls per "
                f"interval of {p['nvitop'].get('interval_s', 1.0):g} s "
                f"({p['nvitop']['nvml_calls_per_interval'] / gpus:.1f} per GPU"
                + (
                    f"; {p['nvitop']['nvml_calls_per_minute'] / gpus:.0f} per GPU per minute"
                    if "nvml_calls_per_minute" in p["nvitop"]
                    else ""
                )
                + ")."
                if "nvitop" in p
                else ""
            )
            + "\n\n"
            "| Idle window: where the GIL is held | ms per interval |\n|---|---:|\n"
            + "\n".join(f"| {k} | {_num(v)} |" for k, v in idle["categories_ms"].items())
            + "\n\n| Idle window: innermost functions | ms per interval |\n|---|---:|\n"
            + "\n".join(f"| `{k}` | {_num(v)} |" for k, v in list(idle["top_functions_ms"].items())[:10])
            + "\n\n| Scrape window: where the GIL is held | ms per scrape |\n|---|---:|\n"
            + "\n".join(f"| {k} | {_num(v)} |" for k, v in scr["categories_ms"].items())
            + "\n\n| Scrape window: innermost functions | ms per scrape |\n|---|---:|\n"
            + "\n".join(f"| `{k}` | {_num(v)} |" for k, v in list(scr["top_functions_ms"].items())[:8])
            + "\n\n| NVML symbol | calls per interval per GPU |\n|---|---:|\n"
            + "\n".join(f"| `{k}` | {v / gpus:.2f} |" for k, v in symbols[:12])
            + (
                f"\n| {len(symbols) - 12} more symbols | {sum(v for _, v in symbols[12:]) / gpus:.2f} |"
                if len(symbols) > 12
                else ""
            )
            + "\n"
        )
    return "\n".join(parts)


def machine_section(meta: dict[str, Any]) -> str:
    m = meta["machine"]
    packages = ", ".join(f"{k} {v}" for k, v in m["packages"].items())
    nvitop = ", ".join(f"{k} {v}" for k, v in m.get("nvitop_packages", {}).items())
    before, after = meta["loadavg_before"], meta["loadavg_after"]
    other = meta.get("other_load_cores")
    load = (
        f"load average (1/5/15 min) {before[0]:.2f}/{before[1]:.2f}/{before[2]:.2f} before, "
        f"{after[0]:.2f}/{after[1]:.2f}/{after[2]:.2f} after"
    )
    if other is not None:
        load += (
            f"; CPU used by other processes during the idle windows: median {other['median']:.2f} cores, "
            f"max {other['max']:.2f} of {m['cpus']}"
        )
    return (
        f"- CPU: {m['cpu_model']}, {m['cpus']} cores{' (virtual machine)' if m['virtual_machine'] else ''}; "
        f"memory {m['memory_gib']} GiB; kernel {m['kernel']}; {m['os']}\n"
        f"- Python {m['python']}; {packages}\n"
        f"- nvitop-exporter venv: {nvitop or 'not used'}\n"
        f"- {m['wrk']}; gpu-exporter commit {m['gpu_exporter_commit']}\n"
        f"- Run started {meta['started']}, took {meta['duration_s'] / 60:.1f} min; {load}\n"
    )


def intervals_text(meta: dict[str, Any]) -> str:
    """Each system's interval, and whether gpu-exporter ran at its own default."""
    intervals = meta.get("intervals", {})
    flag = meta.get("gpu_exporter_collect_interval_flag_s")
    parts = []
    for system, seconds in intervals.items():
        note = ""
        if system == GPU_EXPORTER:
            note = " (its default: no --collect-interval)" if flag is None else " (--collect-interval)"
        elif system == FLOOR:
            note = " (gpu-exporter's)"
        parts.append(f"{system} {seconds:g} s{note}")
    return ", ".join(parts) or "–"


def markdown(result: dict[str, Any], sizes: Sequence[Size]) -> str:
    """The generated part of BENCHMARKS.md (also written on its own as latest.md)."""
    meta = result["meta"]
    plan = meta["plan"]
    concurrency = " and ".join(str(c) for c in plan["concurrency"])
    every = plan.get("prometheus_every_s", 15)
    headline = headline_table(result["aggregate"], result.get("calls", {}), sizes, every, meta.get("intervals"))
    return (
        f"Command: `{meta['command']}`\n\n"
        f"{machine_section(meta)}\n"
        f"Each cell: median of {meta['runs']} run(s) <sub>min–max</sub>; every run starts a fresh process. "
        f"Intervals: {intervals_text(meta)}. Latency: wrk, one thread, {concurrency} keep-alive "
        f"connections, {plan['latency_s']:g} s each. Scrape CPU: /proc utime+stime over a one-client run of up to "
        f"{plan['scrapes']:,} scrapes in total since start (at most {plan['scrapes_max_s']:g} s), minus the idle "
        f"rate; RSS after scrapes is read right after it. Sampling CPU: {plan['idle_s']:g} s with no scrapes, "
        f"scaled to a minute. Headline: /proc utime+stime over {plan.get('prometheus_s', 0):g} s with one scrape "
        f"carrying Prometheus' Accept and Accept-Encoding headers every {plan.get('prometheus_every_s', 0):g} s "
        f"(the first at the window's start), scaled to a minute; the floor makes gpu-exporter's driver calls "
        f"(`bench/floor.py`) at gpu-exporter's interval and serves nothing. Driver calls and samples: the fake's "
        f"trace, in separate traced runs of each system at its interval, per GPU per minute; a GPU utilisation "
        f"sample *seen* is one handed out by `nvmlDeviceGetSamples` or one point read "
        f"(`nvmlDeviceGetUtilizationRates`: the latest sample, so at 1 s one of every five 200 ms samples); "
        f"the driver's count is 60 s ÷ the fake's utilisation period (`tests/fakenvml/samples.c`).\n\n"
        f"### Headline: CPU as Prometheus uses the exporter\n\n"
        f"{headline}\n"
        f"### Figures\n\n{results_table(result['aggregate'], sizes)}\n"
        f"### Ratios (medians)\n\n{ratio_table(result['ratios'], sizes)}\n"
        f"### Targets\n\n{targets_table(result['targets'])}\n"
        f"### Profile\n\n{profile_section(result['profile'], meta.get('intervals', {}).get(GPU_EXPORTER, 5.0))}"
    )
