"""``--simulate VALUE`` that is neither a built-in nor a scenario file: one line that says what is
wrong with it (a file that does not exist says so, with where it was looked for), checked when the
settings are parsed, so the command exits 2 before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_exporter.cli import parse_settings
from gpu_exporter.config import ConfigError
from gpu_exporter.simulate.builtins import BUILTINS, resolve


def _error(value: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_settings(["--simulate", value], {})
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_missing_file_says_it_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "host.scn"
    message = _error(str(missing))
    assert message.endswith(f"the file {missing} does not exist"), message
    assert "neither" not in message and all(name in message for name in BUILTINS)


def test_a_relative_path_says_where_it_was_looked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert _error("scenarios/host.scn").endswith(
        f"the file scenarios/host.scn does not exist (looked for {tmp_path / 'scenarios' / 'host.scn'})"
    )


def test_a_bare_word_may_be_a_misspelt_built_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert "there is no built-in scenario 'lostgpu' and the file lostgpu does not exist" in _error("lostgpu")


def test_a_directory_is_not_a_scenario_file(tmp_path: Path) -> None:
    assert _error(str(tmp_path)).endswith(f"{tmp_path} is a directory")


def test_an_existing_file_and_a_built_in_resolve(tmp_path: Path) -> None:
    scenario = tmp_path / "host.scn"
    scenario.write_text("gpu0.name = Simulated GPU\n")
    assert resolve(str(scenario)) == str(scenario)
    assert Path(resolve("default")).is_file()
