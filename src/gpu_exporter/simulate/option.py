"""``--simulate``: the option that serves a simulated host, a row of the option table (``config.OPTIONS``)."""

from __future__ import annotations

from gpu_exporter.options import Option
from gpu_exporter.simulate.builtins import resolve


def _scenario(value: str) -> str:
    """A built-in scenario name or a readable scenario file (checked now, so a typo exits 2); empty: off."""
    if value:
        resolve(value)
    return value


OPTION = Option(
    "--simulate", "simulate", ("simulate",), _scenario,
    "Serve a simulated GPU host instead of reading GPUs (no driver needed, every output marked "
    "simulated): a built-in scenario (default, mig, old-gpu, lost-gpu; the flag alone is default) or "
    "a scenario file in the test fake's format (default: off).", "SCENARIO", bare="default",
)  # fmt: skip
