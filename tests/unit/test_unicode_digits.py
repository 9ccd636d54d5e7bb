"""Digits that are not ASCII (superscript two, Arabic-Indic three, fullwidth one) are not numbers to
any parser of outside text: str.isdigit() and a str regex's \\d accept them, int() takes some and
raises on others; each parser must skip them, or refuse them with its usual message."""

from __future__ import annotations

import pytest

from gpu_exporter.attribution.cgroups import parse as parse_cgroups
from gpu_exporter.attribution.hpcjobs import _NAME
from gpu_exporter.cli import parse_settings
from gpu_exporter.config import ConfigError

DIGITS = ("\u00b2", "\u0663", "\uff11")


@pytest.mark.parametrize("digit", DIGITS)
def test_cgroup_job_ids_are_ascii(digit: str) -> None:
    assert parse_cgroups(f"0::/system.slice/slurmstepd.scope/job_{digit}/step_0\n").slurm_job == ""
    assert parse_cgroups("0::/system.slice/slurmstepd.scope/job_7/step_0\n").slurm_job == "7"


@pytest.mark.parametrize("digit", DIGITS)
def test_hpc_job_file_names_are_ascii(digit: str) -> None:
    assert _NAME.match(f"1{digit}") is None and _NAME.match("12.3") is not None


@pytest.mark.parametrize("digit", DIGITS)
@pytest.mark.parametrize("flag", ["--web.max-connections", "--web.listen-address"])
def test_flags_refuse_unicode_digits_with_their_message(digit: str, flag: str) -> None:
    given = f":9{digit}00" if flag == "--web.listen-address" else f"1{digit}"
    with pytest.raises(ConfigError) as caught:
        parse_settings([flag, given], {})
    assert "whole number" in str(caught.value) or "HOST:PORT" in str(caught.value)
