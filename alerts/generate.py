"""Keep the alert rules in step with the shared Xid table, and write customised copies of them.

    python alerts/generate.py [sync]   rewrite the generated parts in place: the GPUXidError code lists
                                       in gpu-alerts.rules.yml, the Xid table and group code lists in
                                       the runbook
    python alerts/generate.py check    exit 1 when those parts are stale (a test runs this)
    python alerts/generate.py render [--job NAME] [--runbook-base URL] [--threshold NAME=VALUE]...
                                     [--for ALERT=DURATION]... [--severity ALERT=LEVEL]... [-o FILE]
                                       print gpu-alerts.rules.yml with those settings changed

The shipped rule file is the template: each threshold literal is tagged with a PromQL comment
``# threshold: NAME`` and each Xid selector with ``# xid: SEVERITY``. ``sync`` and ``check`` read the
Xid table from ``gpu_exporter.catalogue.XID_CODES`` (the exporter must be importable); ``render``
needs nothing but this file and the rules.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
RULES = HERE / "gpu-alerts.rules.yml"
XID_RUNBOOK = HERE.parent / "docs" / "runbooks" / "gpuxiderror.md"

DEFAULT_JOB = "gpu-exporter"
DEFAULT_RUNBOOK_BASE = "https://github.com/OWNER/gpu-exporter/blob/main/docs/runbooks"
SEVERITIES = ("critical", "warning", "info")

THRESHOLD = re.compile(r"(?P<value>-?\d+(?:\.\d+)?)(?P<gap>\)*\s*)# threshold: (?P<name>[a-z0-9_]+)")
XID_TAG = re.compile(r"# xid: (?P<severity>[a-z]+)\s*$")
XID_SELECTOR = re.compile(r'xid(?:=~|!~)"[^"]*"')
ALERT = re.compile(r"^\s*- alert: (?P<name>\S+)\s*$")
FOR = re.compile(r"^(?P<indent>\s*)for: \S+(?P<rest>.*)$")
SEVERITY = re.compile(r"^(?P<indent>\s*)severity: \S+(?P<rest>.*)$")
DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")
TABLE_START, TABLE_END = "<!-- generated:xid-table -->", "<!-- end:xid-table -->"
GROUP_LIST = re.compile(r"(?P<open><!-- xids:(?P<group>[a-z]+) -->).*?(?P<close><!-- /xids -->)")


class UsageError(Exception):
    """A bad command-line value; the message names it and what is allowed."""


# --- the Xid table ---------------------------------------------------------------------------------


def xid_selectors() -> dict[str, str]:
    """The label matcher of each GPUXidError rule, by severity. Critical and info list their codes;
    warning is everything else (``!~``), so a code missing from the table is a warning."""
    from gpu_exporter.catalogue import XID_CODES

    def codes(*severities: str) -> str:
        return "|".join(str(code) for code in sorted(XID_CODES) if XID_CODES[code].severity in severities)

    return {
        "critical": f'xid=~"{codes("critical")}"',
        "warning": f'xid!~"{codes("critical", "info")}"',
        "info": f'xid=~"{codes("info")}"',
    }


def sync_rules(text: str) -> str:
    """``text`` with the selector on every line tagged ``# xid: SEVERITY`` rewritten from the table."""
    selectors = xid_selectors()
    lines = []
    for line in text.splitlines(keepends=True):
        tag = XID_TAG.search(line)
        if tag:
            line = XID_SELECTOR.sub(selectors[tag["severity"]].replace("\\", "\\\\"), line)  # a literal replacement
        lines.append(line)
    return "".join(lines)


def xid_table() -> str:
    """The runbook's table of every Xid code, from the shared table."""
    from gpu_exporter.catalogue import XID_CODES

    rows = ["| Xid | Severity | Meaning | First action | Starts at 0 |", "|---|---|---|---|---|"]
    rows += [
        f"| {code} | {xid.severity} | {xid.description} | {xid.action} | {'yes' if xid.precreated else ''} |"
        for code, xid in sorted(XID_CODES.items())
    ]
    return "\n".join(rows)


def group_codes(group: str) -> str:
    """The codes of one runbook group, as a comma-separated list."""
    from gpu_exporter.catalogue import XID_CODES

    if group not in {xid.group for xid in XID_CODES.values()}:
        raise ValueError(f"runbook names Xid group {group!r}, which the Xid table does not have")
    return ", ".join(str(code) for code, xid in sorted(XID_CODES.items()) if xid.group == group)


def sync_runbook(text: str) -> str:
    """The runbook with its generated table and every ``<!-- xids:GROUP -->`` code list rewritten."""
    start, end = text.index(TABLE_START) + len(TABLE_START), text.index(TABLE_END)
    text = text[:start] + "\n" + xid_table() + "\n" + text[end:]
    return GROUP_LIST.sub(lambda m: f"{m['open']}{group_codes(m['group'])}{m['close']}", text)


def stale() -> list[Path]:
    """Files whose generated parts differ from what ``sync`` would write."""
    return [
        path
        for path, sync in ((RULES, sync_rules), (XID_RUNBOOK, sync_runbook))
        if sync(path.read_text()) != path.read_text()
    ]


# --- customised copies -----------------------------------------------------------------------------


def thresholds(text: str) -> dict[str, list[str]]:
    """Every tagged threshold: name → the values it has where it appears."""
    found: dict[str, list[str]] = {}
    for match in THRESHOLD.finditer(text):
        found.setdefault(match["name"], []).append(match["value"])
    return found


def alerts(text: str) -> list[str]:
    return list(dict.fromkeys(match["name"] for line in text.splitlines() if (match := ALERT.match(line))))


def _pairs(values: Sequence[str], what: str) -> dict[str, str]:
    pairs = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise UsageError(f"{what} {item!r}: expected KEY=VALUE")
        pairs[key] = value
    return pairs


def render(
    text: str,
    *,
    job: str = DEFAULT_JOB,
    runbook_base: str = DEFAULT_RUNBOOK_BASE,
    threshold: dict[str, str] | None = None,
    durations: dict[str, str] | None = None,
    severity: dict[str, str] | None = None,
) -> str:
    """The rules ``text`` with the job, runbook base, thresholds, ``for`` durations and severities changed."""
    threshold, durations, severity = threshold or {}, durations or {}, severity or {}
    known, names = thresholds(text), alerts(text)
    for name, value in threshold.items():
        if name not in known:
            raise UsageError(f"--threshold {name}: unknown; known: {', '.join(sorted(known))}")
        try:
            float(value)
        except ValueError:
            raise UsageError(f"--threshold {name}={value}: not a number") from None
    for name, duration in durations.items():
        if name not in names:
            raise UsageError(f"--for {name}: no such alert; alerts: {', '.join(names)}")
        if not DURATION.match(duration):
            raise UsageError(f"--for {name}={duration}: not a Prometheus duration such as 30s, 10m or 1h")
    for name, level in severity.items():
        if name not in names:
            raise UsageError(f"--severity {name}: no such alert; alerts: {', '.join(names)}")
        if name == "GPUXidError":
            raise UsageError("--severity GPUXidError: its severity comes from the Xid table, per code")
        if level not in SEVERITIES:
            raise UsageError(f"--severity {name}={level}: expected one of {', '.join(SEVERITIES)}")
    if not re.fullmatch(r"[a-zA-Z0-9_:./-]+", job):
        raise UsageError(f"--job {job!r}: use letters, digits and _ : . / -")

    text = THRESHOLD.sub(lambda m: f"{threshold.get(m['name'], m['value'])}{m['gap']}# threshold: {m['name']}", text)
    text = text.replace(f'job="{DEFAULT_JOB}"', f'job="{job}"')
    text = text.replace(DEFAULT_RUNBOOK_BASE + "/", runbook_base.rstrip("/") + "/")
    lines, current = [], ""
    for line in text.splitlines(keepends=True):
        if match := ALERT.match(line):
            current = match["name"]
        elif (match := FOR.match(line)) and current in durations:
            line = f"{match['indent']}for: {durations[current]}{match['rest']}\n"
        elif (match := SEVERITY.match(line)) and current in severity:
            line = f"{match['indent']}severity: {severity[current]}{match['rest']}\n"
        lines.append(line)
    return "".join(lines)


# --- command line ----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="alerts/generate.py", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("sync", help="rewrite the generated parts in place (the default)")
    commands.add_parser("check", help="exit 1 when the generated parts are stale")
    custom = commands.add_parser("render", help="print a customised copy of gpu-alerts.rules.yml")
    custom.add_argument("--job", default=DEFAULT_JOB, help=f"scrape job of the exporter (default {DEFAULT_JOB})")
    custom.add_argument("--runbook-base", default=DEFAULT_RUNBOOK_BASE, help="URL the runbook file names follow")
    custom.add_argument("--threshold", action="append", default=[], metavar="NAME=VALUE")
    custom.add_argument("--for", dest="durations", action="append", default=[], metavar="ALERT=DURATION")
    custom.add_argument("--severity", action="append", default=[], metavar="ALERT=LEVEL")
    custom.add_argument("-o", "--output", type=Path, help="write here instead of standard output")
    args = parser.parse_args(argv)

    if args.command == "render":
        try:
            text = render(
                RULES.read_text(),
                job=args.job,
                runbook_base=args.runbook_base,
                threshold=_pairs(args.threshold, "--threshold"),
                durations=_pairs(args.durations, "--for"),
                severity=_pairs(args.severity, "--severity"),
            )
        except UsageError as exc:
            print(f"alerts/generate.py: {exc}", file=sys.stderr)
            return 2
        if args.output:
            args.output.write_text(text)
        else:
            sys.stdout.write(text)
        return 0
    if args.command == "check":
        paths = stale()
        for path in paths:
            print(f"{path}: generated parts are stale; run: python alerts/generate.py", file=sys.stderr)
        return 1 if paths else 0
    RULES.write_text(sync_rules(RULES.read_text()))
    XID_RUNBOOK.write_text(sync_runbook(XID_RUNBOOK.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
