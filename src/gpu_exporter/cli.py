"""Command line: flags → Settings → app → uvicorn. The one composition root.

Usage errors print one line (``gpu-exporter: error: …``) and exit 2; no traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

import uvicorn

from gpu_exporter import __version__, counters
from gpu_exporter.app import create_app
from gpu_exporter.backends import select
from gpu_exporter.backends.base import BackendUnavailable
from gpu_exporter.catalogue import COLLECTORS, DEFAULT_OFF
from gpu_exporter.config import CONFIG_FILE_ENV, CONFIG_FILE_FLAG, OPTIONS, ConfigError, Settings, collector_env, load
from gpu_exporter.counters import Counter
from gpu_exporter.logs import setup

USAGE_ERROR = 2


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
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"gpu-exporter {__version__}")
    parser.add_argument(
        CONFIG_FILE_FLAG,
        dest="config_file",
        metavar="FILE",
        help=f"YAML file with the same settings, e.g. 'web: {{listen-address: \":9400\"}}' [{CONFIG_FILE_ENV}]",
    )
    for option in OPTIONS:
        envs = ", ".join(option.envs)
        extra = {"nargs": "?", "const": "true"} if option.switch else {}
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
    return parser


def parse_settings(argv: Sequence[str], env: dict[str, str]) -> Settings:
    """Flags and environment → Settings; raises ConfigError for bad values."""
    args = vars(build_parser().parse_args(argv))
    collector_flags = {name: args[f"collector_{name}"] for name in COLLECTORS if args[f"collector_{name}"] is not None}
    flags = {key: value for key, value in args.items() if not key.startswith("collector_")}
    return load(flags, collector_flags, env)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the exporter until SIGINT/SIGTERM; 2 for usage errors, 1 if the server cannot start."""
    try:
        settings = parse_settings(sys.argv[1:] if argv is None else argv, dict(os.environ))
    except ConfigError as err:
        print(f"gpu-exporter: error: {err}", file=sys.stderr)
        return USAGE_ERROR
    compat: tuple[Counter, ...] | None = None
    if settings.metric_names == "dcgm-exporter":
        try:
            compat = counters.load(settings.collectors_file) if settings.collectors_file else counters.defaults()
        except counters.CountersError as err:
            print(f"gpu-exporter: error: {err}", file=sys.stderr)
            return USAGE_ERROR
    setup(settings.log_level, settings.log_format)
    if settings.kubernetes:
        logging.getLogger(__name__).warning(
            "--kubernetes: pod attribution is not built yet; series carry no pod labels"
        )
    try:
        chosen = select(settings)
    except BackendUnavailable as err:
        print(f"gpu-exporter: error: {err}", file=sys.stderr)
        return 1
    logging.getLogger(__name__).info(
        "gpu-exporter %s listening on %s, sampling every %gs",
        __version__,
        settings.listen_address,
        settings.collect_interval,
    )
    config = uvicorn.Config(
        create_app(settings, lambda _settings: chosen, compat),
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        lifespan="on",
        server_header=False,
    )
    server = uvicorn.Server(config)
    server.run()
    return 0 if server.started else 1
