"""Command line: flags → Settings → web config → app → server. The one composition root.

Usage errors print one line (``gpu-exporter: error: …``) and exit 2; no traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from typing import NoReturn

from gpu_exporter import __version__
from gpu_exporter.app import create_app
from gpu_exporter.assemble.backends import select, with_interval
from gpu_exporter.backends.base import BackendUnavailable
from gpu_exporter.catalogue import COLLECTORS, DEFAULT_OFF, METRICS
from gpu_exporter.commands.snapshot import subcommand
from gpu_exporter.compat import counters, releases
from gpu_exporter.compat import flags as dcgm_flags
from gpu_exporter.compat.configmap import ConfigMapError, read_counters
from gpu_exporter.compat.counters import Counter
from gpu_exporter.compat.field_names import field_id
from gpu_exporter.config import CONFIG_FILE_ENV, CONFIG_FILE_FLAG, OPTIONS, ConfigError, Settings, collector_env, load
from gpu_exporter.files import FileProblem, quote, read_text
from gpu_exporter.http.server import BindError, Server, bound_address, listen
from gpu_exporter.http.webconfig import WebConfigError, WebConfigSource
from gpu_exporter.logs import LIMITED, flush_repeats, setup

USAGE_ERROR = 2
log = logging.getLogger(__name__)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line instead of argparse's usage block, exit 2."""
        if "collector." in message:
            message += f" (known collectors: {', '.join(COLLECTORS)})"
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message}; see --help\n")


def build_parser() -> argparse.ArgumentParser:
    """Every flag, generated from the option table and the collector list."""
    parser = _Parser(
        prog="gpu-exporter",
        description="Prometheus exporter for NVIDIA GPUs. Every flag also reads an environment variable, "
        "shown in brackets; precedence is flag > environment > config file > default.",
        epilog="Subcommands (flags may come before or after them): 'gpu-exporter snapshot' prints one look at "
        "every GPU (or --json, --watch SECONDS) without starting a server, e.g. 'gpu-exporter snapshot --simulate'; "
        "'gpu-exporter doctor' checks what the exporter needs to see GPUs and says the fix for each finding; "
        "'gpu-exporter check [--url URL]' asks a running exporter for its GPUs' health (exit 0 healthy, 1 action "
        "needed, 2 unknown: a Node Problem Detector plugin); "
        "'gpu-exporter pause [--profiling-only] [--for DURATION]' asks the running exporter (over --control.socket) "
        "to release the GPUs or their profiling counters for a while, 'gpu-exporter resume' to come back now. "
        "'gpu-exporter snapshot --help', 'doctor --help', 'check --help' and 'pause --help' list their own flags.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", "-v", action="version", version=f"gpu-exporter {__version__}")  # -v: dcgm-exporter
    parser.add_argument(
        CONFIG_FILE_FLAG,
        dest="config_file",
        metavar="FILE",
        help=f"YAML file with the same settings, e.g. 'web: {{listen-address: \":9400\"}}' [{CONFIG_FILE_ENV}]",
    )
    for option in OPTIONS:
        envs = ", ".join(option.envs)
        bare = "true" if option.switch else option.bare
        extra = {"nargs": "?", "const": bare} if bare else {}
        parser.add_argument(
            option.flag,
            *option.aliases,
            dest=option.field,
            metavar=option.metavar,
            help=f"{option.help} [{envs}]",
            **extra,  # type: ignore[arg-type]  # argparse's overloads do not model optional-value flags
        )
    for name in COLLECTORS:
        group = parser.add_mutually_exclusive_group()
        group.add_argument(
            f"--collector.{name}",
            dest=f"collector_{name}",
            action="store_const",
            const=True,
            help=f"Enable the {name} collector (default {'off' if name in DEFAULT_OFF else 'on'}) "
            f"[{collector_env(name)}=true|false]",
        )
        group.add_argument(
            f"--no-collector.{name}",
            dest=f"collector_{name}",
            action="store_const",
            const=False,
            help=f"Disable the {name} collector",
        )
    dcgm_flags.add_arguments(parser)
    return parser


def parse_settings(argv: Sequence[str], env: dict[str, str]) -> Settings:
    """Flags and environment → Settings; raises ConfigError for bad values."""
    args = vars(build_parser().parse_args(argv))
    collector_flags = {name: args[f"collector_{name}"] for name in COLLECTORS if args[f"collector_{name}"] is not None}
    flags = {key: value for key, value in args.items() if not key.startswith("collector_")}
    return load(flags, collector_flags, env)


def _one_line(message: object, limit: int = 400) -> str:
    """An error message as one line of bounded length (a hostile file must not echo megabytes)."""
    text = " ".join(str(message).split())
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def _error(message: object) -> None:
    print(f"gpu-exporter: error: {_one_line(message)}", file=sys.stderr)


def _load_counters(path: str) -> tuple[Counter, ...]:
    """A counters CSV read defensively (regular file, bounded, UTF-8) and parsed."""
    try:
        return counters.parse(read_text(path), path)
    except FileProblem as err:
        raise counters.CountersError(f"--collectors={quote(path)} {err}; give a dcgm-exporter counters CSV") from None
    except csv.Error as err:
        raise counters.CountersError(f"--collectors={quote(path)}: not a CSV file ({err})") from None


def _profiling(name: str) -> bool:
    """Whether a DCGM profiling field (1000-1099) is read through the profiling collector: not when a
    catalogue row of another collector serves it (the PCIe byte totals are NVML fields of ``pcie``)."""
    spec = next((spec for spec in METRICS if spec.compat_name and field_id(spec.compat_name) == field_id(name)), None)
    return spec is None or spec.collector == "profiling"


def with_profiling_for(compat: Sequence[Counter], settings: Settings) -> Settings:
    """dcgm-exporter collects what its counters list names: in its mode the profiling collector (on by
    default) is on when the list names profiling fields (DCGM_FI_PROF_*, field ids 1000-1099) and off when
    it names none, unless it was switched off (or on) explicitly."""
    if "profiling" in settings.collectors_chosen:
        return settings
    wanted = [row.field for row in compat if 1000 <= (field_id(row.field) or 0) <= 1099 and _profiling(row.field)]
    if not wanted:
        return replace(settings, collectors=settings.collectors - {"profiling"})
    log.info(
        "the counters list names profiling fields (%s): the profiling collector is on (--no-collector.profiling "
        "turns it off)", ", ".join(wanted[:3]) + (", ..." if len(wanted) > 3 else "")
    )  # fmt: skip
    return replace(settings, collectors=settings.collectors | {"profiling"})


def _compat_counters(settings: Settings) -> tuple[tuple[Counter, ...], Settings]:
    """dcgm-exporter's counters: its ConfigMap (-m) over the file (-f) over the profile's default list;
    and the settings with the dcgm-exporter profile chosen (:mod:`gpu_exporter.compat.releases`), said in
    one start-up line."""
    spec = settings.dcgm_exporter.configmap
    rows: tuple[Counter, ...] | None = None
    if spec:
        text = read_counters(spec, os.environ, settings.kubelet_token_file, settings.kubelet_ca_file)
        rows = counters.parse(text, f"ConfigMap {spec}")
    elif settings.collectors_file:
        rows = _load_counters(settings.collectors_file)
    if settings.dcgm_exporter_version:
        release = releases.by_version(settings.dcgm_exporter_version)
        why = f"--dcgm-exporter.version {settings.dcgm_exporter_version}"
    else:
        release, why = releases.from_names([row.field for row in rows or ()])
    if rows is None:
        rows = counters.parse(release.defaults, f"dcgm-exporter {release.name}'s default counters")
    label = settings.hostname_label or release.hostname_label
    log.info(
        "dcgm-exporter profile %s (dcgm-exporter %s, DCGM %s): %s; host label %s, %s",
        release.name, "/".join(release.covers), release.dcgm, why, label,
        f"counters from {spec or settings.collectors_file}" if spec or settings.collectors_file
        else "its default counters",
    )  # fmt: skip
    return rows, replace(settings, dcgm_exporter_release=release.name)


#: Settings a SIGHUP applies without a restart.
LIVE = ("log_level", "log_format", "web_config_file", "max_connections", "header_timeout", "idle_timeout",
        "probes_without_auth")  # fmt: skip


def _reloader(argv: Sequence[str], server: Server) -> Callable[[], None]:
    """SIGHUP: read the flags, environment and config file again, apply what can change live and
    name what needs a restart. A bad file is logged and changes nothing."""
    flags = {option.field: option.flag for option in OPTIONS}

    def reload() -> None:
        try:
            new = parse_settings(argv, dict(os.environ))
        except (ConfigError, SystemExit) as err:
            log.error("config not reloaded, the running settings stay: %s", _one_line(err))
            return
        current = server.settings
        if current.metric_names == "dcgm-exporter" and "profiling" not in new.collectors_chosen:
            # on or off as the counters list made it (with_profiling_for)
            kept = current.collectors & {"profiling"}
            new = replace(new, collectors=(new.collectors - {"profiling"}) | kept)
        new = replace(new, dcgm_exporter_release=current.dcgm_exporter_release)  # chosen at start-up
        changed = [item.name for item in fields(Settings) if getattr(new, item.name) != getattr(current, item.name)]
        server.web.reload(new.web_config_file)
        if new.log_level != current.log_level or new.log_format != current.log_format:
            setup(new.log_level, new.log_format)
        server.settings = replace(current, **{name: getattr(new, name) for name in LIVE})
        restart = [flags.get(name, name) for name in changed if name not in LIVE]
        if restart:
            log.warning("changed settings that need a restart to apply: %s", ", ".join(restart))
        log.info("reload done", extra=LIMITED)

    return reload


class _StoppedEarly(Exception):
    """A stop signal arrived before the server took over signal handling."""


def _early_signals() -> None:
    """Until the server's own handlers are in place: SIGTERM/SIGINT/SIGQUIT end the start cleanly,
    SIGHUP/SIGUSR1/SIGUSR2 are ignored (nothing to reload yet), so no signal kills silently."""

    def stop(signum: int, _frame: object) -> None:
        raise _StoppedEarly(signal.Signals(signum).name)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
        signal.signal(signum, stop)
    for signum in (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, signal.SIG_IGN)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the exporter until SIGTERM/SIGINT (exit 0); 2 for usage errors, 1 when it cannot start."""
    _early_signals()
    try:
        return _main(argv)
    except _StoppedEarly as stopped:
        log.info("received %s while starting: exiting", stopped)
        return 0


#: The subcommands, which may come after flags (``gpu-exporter --simulate mig snapshot``).
SUBCOMMANDS = ("snapshot", "doctor", "check", "pause", "resume")


def subcommand_first(args: Sequence[str]) -> list[str]:
    """``args`` with a subcommand named anywhere among them moved to the front: a bare word that is not
    the value of the flag before it (a flag whose value is optional never takes a subcommand's name)."""
    actions = build_parser()._option_string_actions  # argparse keeps no public map of flags to arity
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        if arg in SUBCOMMANDS:
            return [arg, *args[:i], *args[i + 1 :]]
        action = actions.get(arg) if arg.startswith("-") and "=" not in arg else None
        if action is not None and action.nargs is None:  # the next word is its value
            i += 1
        elif action is not None and action.nargs == "?" and i + 1 < len(args):
            following = args[i + 1]
            if not following.startswith("-") and following not in SUBCOMMANDS:
                i += 1
        i += 1
    return list(args)


def _main(argv: Sequence[str] | None) -> int:
    args = subcommand_first(sys.argv[1:] if argv is None else argv)
    code = subcommand(args, parse_settings)  # snapshot, doctor, check, pause, resume
    if code is not None:
        return code
    try:
        settings = parse_settings(args, dict(os.environ))
    except ConfigError as err:
        _error(err)
        return USAGE_ERROR
    setup(settings.log_level, settings.log_format)
    for warning in settings.dcgm_exporter.warnings:  # each its own template: the burst limit is per template
        log.warning(warning)  # no arguments: the text is never %-formatted
    try:
        web = WebConfigSource(settings.web_config_file)
    except WebConfigError as err:
        _error(err)
        return USAGE_ERROR
    compat: tuple[Counter, ...] | None = None
    if settings.metric_names == "dcgm-exporter":
        try:
            compat, settings = _compat_counters(settings)
        except counters.CountersError as err:
            _error(err)
            return USAGE_ERROR
        except ConfigMapError as err:
            _error(err)
            return USAGE_ERROR if err.content else 1
        settings = with_profiling_for(compat, settings)
    try:
        chosen = select(settings)
    except BackendUnavailable as err:
        _error(err)
        return 1
    settings = with_interval(settings, chosen[0])
    try:
        sock = listen(settings)
    except BindError as err:
        _error(err)
        return 1
    scheme = "https" if web.config.tls is not None else "http"
    log.info(
        "gpu-exporter %s listening on %s (%s), sampling every %gs",
        __version__,
        bound_address(settings, sock),
        scheme,
        settings.collect_interval,
    )
    app = create_app(settings, lambda _settings: chosen, compat)
    app.router.redirect_slashes = False  # no redirects: one would be built from the client's Host header
    server = Server(app, settings, sock, web)
    server.reload_hook = _reloader(args, server)
    try:
        return asyncio.run(server.run())
    finally:
        flush_repeats(force=True)
