"""The status page: one self-contained HTML document (inline CSS, inline SVG sparklines, a few lines
of inline script), readable in light and dark schemes, complete without JavaScript.

With JavaScript the page fetches ``?fragment=cards`` every interval (2 to 15 s) and swaps the
cards in place; the server renders them, so there is one renderer and everything is escaped once,
here, with :func:`html.escape`.
"""

from __future__ import annotations

import html
import time
from collections.abc import Sequence
from typing import Any

from gpu_exporter.status.view import Card, paused_text

GIB = 1024**3

_CSS = """
:root{color-scheme:light dark;--bg:#f6f7f9;--fg:#1b1f24;--card:#fff;--muted:#5c6670;--bar:#d9dee3;
--ok:#2f9e44;--warn:#e8590c;--bad:#c92a2a;--line:#1c7ed6}
@media (prefers-color-scheme:dark){:root{--bg:#121416;--fg:#e6e8ea;--card:#1d2125;--muted:#9aa5b1;--bar:#343a40;
--ok:#51cf66;--warn:#ff922b;--bad:#ff6b6b;--line:#4dabf7}}
body{margin:0;padding:1rem;background:var(--bg);color:var(--fg);font:14px/1.4 system-ui,sans-serif}
h1{font-size:1.3rem;margin:0 0 .3rem}header p{margin:.2rem 0;color:var(--muted)}
main{display:grid;grid-template-columns:repeat(auto-fill,minmax(330px,1fr));gap:.8rem;margin-top:.8rem}
.card{background:var(--card);border-radius:8px;padding:.7rem .9rem;border-left:5px solid var(--ok)}
.card.problem{border-left-color:var(--bad)}.card h2{font-size:1rem;margin:0}
.card .sub{color:var(--muted);font-size:.8rem}
.row{display:flex;justify-content:space-between;gap:.5rem;margin:.25rem 0}.row span:first-child{color:var(--muted)}
.bar{height:8px;background:var(--bar);border-radius:4px;overflow:hidden;margin:.1rem 0 .35rem}
.bar i{display:block;height:100%;background:var(--line)}.bar i.hi{background:var(--warn)}
.problems{margin:.4rem 0;padding:0;list-style:none}.problems li{color:var(--bad);font-weight:600}
table{width:100%;border-collapse:collapse;font-size:.8rem;margin-top:.3rem}td,th{text-align:left;padding:1px 4px}
th{color:var(--muted);font-weight:normal}.spark{display:flex;gap:.4rem;margin-top:.3rem}
.spark figure{margin:0;flex:1}.spark figcaption{font-size:.7rem;color:var(--muted)}
svg{width:100%;height:28px}polyline{fill:none;stroke:var(--line);stroke-width:1.5}
.lacks{margin-top:.3rem;font-size:.8rem;color:var(--muted)}.lacks summary{cursor:pointer}
.tag{color:var(--warn)}.simulated{background:var(--warn);color:#000;font-weight:700;padding:.3rem .6rem;
border-radius:4px;margin:0 0 .5rem}.allclear{color:var(--ok)}
footer{margin-top:1rem;color:var(--muted)}a{color:var(--line)}
"""

_SCRIPT = """
(function(){var main=document.querySelector('main');var ms=Math.min(15000,Math.max(2000,%d));
function tick(){fetch('?fragment=cards',{cache:'no-store'}).then(function(r){return r.ok?r.text():null})
.then(function(t){if(t===null)return;var open=[].map.call(main.querySelectorAll('details[open]'),
function(d){return d.closest('section').id;});main.innerHTML=t;open.forEach(function(id){
var d=document.getElementById(id);d=d&&d.querySelector('details');if(d)d.open=true;});
document.body.dataset.updated=String(Date.now());})
.catch(function(){}).finally(function(){setTimeout(tick,ms);});}
setTimeout(tick,ms);})();
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _num(value: float | None, scale: float = 1.0, digits: int = 0, unit: str = "") -> str:
    if value is None:
        return "—"
    return f"{value / scale:.{digits}f}{unit}"


def _at(unix: float | None) -> str:
    if unix is None:
        return ""
    return time.strftime(" at %H:%M:%S UTC", time.gmtime(unix))


def _pct(value: float | None, total: float | None) -> float | None:
    if value is None or not total:
        return None
    return max(0.0, min(100.0, 100.0 * value / total))


def _bar(percent: float | None, high: float = 90.0) -> str:
    if percent is None:
        return "<div class='bar'></div>"
    cls = " class='hi'" if percent >= high else ""
    return f"<div class='bar'><i{cls} style='width:{percent:.1f}%'></i></div>"


def _row(label: str, text: str, field: str) -> str:
    return f"<div class='row'><span>{_e(label)}</span><span data-field='{_e(field)}'>{_e(text)}</span></div>"


def sparkline(points: Sequence[float | None], top: float | None = None) -> str:
    """An inline SVG polyline of ``points`` scaled to [0, top] (top: the largest point)."""
    known = [p for p in points if p is not None]
    if len(known) < 2:
        return "<svg viewBox='0 0 100 28' role='img' aria-label='not enough data yet'></svg>"
    ceiling = top if top else max(known) or 1.0
    step = 100.0 / (len(points) - 1)
    coords = " ".join(
        f"{i * step:.1f},{27 - 26 * min(1.0, max(0.0, p / ceiling)):.1f}" for i, p in enumerate(points) if p is not None
    )
    return f"<svg viewBox='0 0 100 28' preserveAspectRatio='none' role='img'><polyline points='{coords}'/></svg>"


def _processes(card: Card) -> str:
    if not card["processes"]:
        return ""
    rows = []
    for proc in card["processes"]:
        where = proc["pod"] and f"{proc['namespace']}/{proc['pod']}" or (proc["job"] and f"job {proc['job']}") or ""
        pid = "other" if proc["pid"] is None else proc["pid"]  # None: the processes folded past the limit
        rows.append(
            f"<tr><td>{_e(pid)}</td><td>{_e(proc['name'] or '?')}</td><td>{_e(proc['user'] or '?')}</td>"
            f"<td>{_e(_num(proc['memory_used_bytes'], GIB, 1, ' GiB'))}</td><td>{_e(where)}</td></tr>"
        )
    return (
        "<table class='procs'><tr><th>PID</th><th>Process</th><th>User</th><th>Memory</th><th>Pod / job</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def card_html(card: Card) -> str:
    """One card; every value in a ``data-field`` element, problems as a list."""
    problems = card["problems"]
    cls = "card problem" if problems else "card"
    util = card["utilization_ratio"]
    mem_used, mem_total = card["memory_used_bytes"], card["memory_total_bytes"]
    temp, slowdown = card["temperature_celsius"], card["temperature_slowdown_celsius"]
    power, limit = card["power_watts"], card["power_limit_watts"]
    parts = [
        f"<section class='{cls}' id='{_e(card['uid'])}' data-state='{_e(card['state'])}'>",
        f"<h2>{_e(card['title'])} · {_e(card['name'])}</h2>",
        f"<div class='sub'>{_e(card.get('mig_uuid') or card['uuid'])} · {_e(card['state'])}</div>",
    ]
    if problems:
        parts.append("<ul class='problems'>" + "".join(f"<li>{_e(p)}</li>" for p in problems) + "</ul>")
    parts.append(_row("Utilization", _num(util, 0.01, 0, " %"), "utilization"))
    parts.append(_bar(None if util is None else 100 * util))
    sm_active = card.get("sm_active_ratio")
    parts.append(_row("SM activity", _num(sm_active, 0.01, 0, " %"), "sm_active"))
    if sm_active is None:
        parts.append(f"<div class='sub' data-field='sm_active_note'>{_e(card.get('sm_active_note') or '')}</div>")
    else:
        parts.append(_bar(100 * sm_active))
        pipes = (
            f"occupancy {_num(card.get('sm_occupancy_ratio'), 0.01, 0, ' %')} · "
            f"tensor {_num(card.get('tensor_active_ratio'), 0.01, 0, ' %')} · "
            f"DRAM {_num(card.get('dram_active_ratio'), 0.01, 0, ' %')}"
        )
        parts.append(_row("SMs and pipes", pipes, "pipes"))
    memory = f"{_num(mem_used, GIB, 1)} / {_num(mem_total, GIB, 1, ' GiB')}"
    parts.append(_row("Memory", memory, "memory"))
    parts.append(_bar(_pct(mem_used, mem_total)))
    parts.append(_row("Temperature", f"{_num(temp, 1, 0, ' °C')} (slowdown {_num(slowdown, 1, 0, ' °C')})", "temp"))
    parts.append(_bar(_pct(temp, slowdown), high=100 * (1 - 10 / (slowdown or 90))))
    parts.append(_row("Power", f"{_num(power, 1, 0, ' W')} / {_num(limit, 1, 0, ' W')}", "power"))
    parts.append(_bar(_pct(power, limit), high=98))
    sm = f"{_num(card['sm_clock_hertz'], 1e6)} / {_num(card['sm_clock_max_hertz'], 1e6, 0, ' MHz')}"
    parts.append(_row("SM clock", sm, "sm_clock"))
    mem_clock = f"{_num(card['memory_clock_hertz'], 1e6)} / {_num(card['memory_clock_max_hertz'], 1e6, 0, ' MHz')}"
    parts.append(_row("Memory clock", mem_clock, "memory_clock"))
    events = "unknown" if card["clock_events"] is None else ", ".join(card["clock_events"]) or "none"
    parts.append(_row("Clock events", events, "clock_events"))
    if card["pcie_generation"] is not None or card["pcie_width"] is not None:
        pcie = (
            f"Gen{_num(card['pcie_generation'])}/{_num(card['pcie_generation_max'])} "
            f"x{_num(card['pcie_width'])}/{_num(card['pcie_width_max'])}"
        )
        parts.append(_row("PCIe", pcie, "pcie"))
    if card["ecc_enabled"] is not None:
        ecc = "off" if not card["ecc_enabled"] else f"on, {_num(card['ecc_uncorrected_volatile'])} uncorrected"
        parts.append(_row("ECC", ecc, "ecc"))
    xid = card["xid"]
    if xid is not None:
        text = "none since start"
        if xid["total"] and xid["last"] is not None:
            text = f"{xid['total']} · last {xid['last']}{_at(xid['last_at'])}: {xid['description']}"
        elif xid["total"]:
            text = f"{xid['total']} (codes {', '.join(xid['counts'])})"
        parts.append(_row("Xid", text, "xid"))
    if card["allocations"]:
        parts.append(_row("Allocated to", ", ".join(card["allocations"]), "allocations"))
    parts.append(_processes(card))
    lacks = card.get("unsupported") or []
    if lacks:  # absent, not 0: which values and why, one click away
        parts.append(
            f"<details class='lacks'><summary>{len(lacks)} value(s) not supported here (absent from /metrics, "
            f"not 0)</summary>{_e(', '.join(lacks))}</details>"
        )
    history = card.get("history") or {}
    if history:
        parts.append(
            "<div class='spark'>"
            f"<figure><figcaption>util</figcaption>{sparkline(history.get('utilization_ratio', []), 1.0)}</figure>"
            f"<figure><figcaption>power</figcaption>{sparkline(history.get('power_watts', []), limit)}</figure>"
            "<figure><figcaption>temp</figcaption>"
            f"{sparkline(history.get('temperature_celsius', []), slowdown)}</figure></div>"
        )
    parts.append("</section>")
    return "".join(parts)


def problem(status: dict[str, Any]) -> str:
    """Why the backend is down, in words with the fix (its reason word where no words came with it)."""
    return str(status.get("backend_problem") or status["backend_reason"])


def cards_html(status: dict[str, Any]) -> str:
    """The inside of ``<main>``: every card, or a line saying why there is none."""
    if not status["gpus"]:
        if status.get("paused") and not status["backend_up"]:
            return f"<p class='empty'>{_e(paused_text(status))}</p>"
        reason = "no GPU found" if status["backend_up"] else f"backend down: {problem(status)}"
        return f"<p class='empty'>{_e(reason)}; run gpu-exporter doctor on this host to see why and how to fix it</p>"
    return "".join(card_html(card) for card in status["gpus"])


def _simulated(status: dict[str, Any]) -> str:
    """The banner of a ``--simulate`` host: nothing on the page comes from a GPU."""
    if not status.get("simulated"):
        return ""
    return f"<p class='simulated' role='alert'>SIMULATED host: {_e(status['simulated'])}</p>"


def _paused(status: dict[str, Any]) -> str:
    text = paused_text(status)
    return f"<p class='simulated' role='status'>{_e(text)}</p>" if text else ""


def page(status: dict[str, Any], metrics_path: str) -> str:
    """The whole document."""
    state = "up" if status["backend_up"] else f"down: {problem(status).partition(': ')[0]}"
    interval_ms = int(1000 * float(status["interval_seconds"]))
    count = len(status["gpus"])
    cards = f"{count} card" if count == 1 else f"{count} cards"
    if not count:  # no GPU data is a problem, not an all-clear
        summary, tone = "no GPU data: run gpu-exporter doctor", "tag"
    elif status["cards_with_problems"]:
        summary, tone = f"{status['cards_with_problems']} of {count} need a look", "tag"
    else:
        summary, tone = f"{cards}, no problems", "allclear"
    health = status.get("health") or {}
    verdict = f"health {health.get('status', 'unknown')}"
    if health.get("action", "none") != "none":
        verdict += f", action {health['action']}"
    if health.get("missing_gpus"):
        verdict += f", {health['missing_gpus']} of {health['expected_gpus']} GPUs missing"
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>{_e(status['hostname'])} · gpu-exporter</title><style>{_CSS}</style></head><body>"
        f"{_simulated(status)}{_paused(status)}"
        f"<header><h1>{_e(status['hostname'])} · gpu-exporter {_e(status['version'])}</h1>"
        f"<p>Backend {_e(status['backend'])}, {_e(state)} · driver {_e(status['driver_version'] or 'unknown')}"
        f" · CUDA {_e(status['cuda_version'] or 'unknown')} · sampling every {float(status['interval_seconds']):g}s"
        f" · <span class='{tone}'>{_e(summary)}</span> · <span data-field='health'>{_e(verdict)}</span></p></header>"
        f"<main>{cards_html(status)}</main>"
        f"<footer><a href='{_e(metrics_path)}'>Metrics</a> · <a href='/api/v1/status'>JSON</a> · "
        "<a href='/healthz'>Health</a> · <a href='/readyz'>Readiness</a></footer>"
        f"<script>{_SCRIPT % interval_ms}</script></body></html>"
    )
