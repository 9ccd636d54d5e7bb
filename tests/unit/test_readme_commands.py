"""The README's commands run as written: a command it tells the reader to run names the program where
its install command puts it (a virtual environment, whose ``bin`` is not on ``PATH``), never a bare
``gpu-exporter`` that a fresh shell does not find. A bare name in a sentence that only mentions a command
(``gpu-exporter doctor`` refuses ``--simulate``) is not a command to run."""

from __future__ import annotations

import re

from tests.harness import REPO

README = REPO / "README.md"
_SPAN = re.compile(r"`([^`]+)`")
_VENV = re.compile(r"python3 -m venv (\S+) && (\S+)/bin/pip install")


def bare_commands(text: str) -> list[str]:
    """The code spans of sentences that tell the reader to run something and start with the bare program."""
    prose = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    found = []
    for sentence in re.split(r"(?<=[.:])\s", prose.replace("\n", " ")):
        if not re.search(r"\b[Rr]un\b", sentence):
            continue
        found += [span for span in _SPAN.findall(sentence) if span.startswith("gpu-exporter ")]
    return found


def test_commands_to_run_name_the_installed_program() -> None:
    assert bare_commands(README.read_text(encoding="utf-8")) == []


def test_the_path_given_is_the_one_the_install_creates() -> None:
    text = README.read_text(encoding="utf-8")
    venvs = {venv for venv, again in _VENV.findall(text) if venv == again}
    assert venvs == {".venv", "~/.local/gpu-exporter"}, venvs
    for span in _SPAN.findall(re.sub(r"```.*?```", "", text, flags=re.DOTALL)):
        program = span.split()[0]
        if program.endswith("/gpu-exporter"):
            assert program.removesuffix("/bin/gpu-exporter") in venvs, span


def test_the_venv_package_is_named_before_the_first_venv() -> None:
    """Debian's python3 has no ensurepip without ``python3-venv``: ``python3 -m venv`` fails there."""
    text = README.read_text(encoding="utf-8")
    assert "python3-venv" in text[: text.index("python3 -m venv ")]


def test_a_bare_command_to_run_is_caught() -> None:
    text = "Then run `gpu-exporter snapshot` for a look\nor `gpu-exporter doctor`. `gpu-exporter doctor` refuses it."
    assert bare_commands(text) == ["gpu-exporter snapshot", "gpu-exporter doctor"]
