"""The control socket (issue 37), in process: owner-only permissions from the start, one JSON line each
way, a pause set and ended through it on a fake clock, bad requests refused without changing anything,
a stale socket file replaced, a live one left alone, and an unusable path logged, never fatal."""

from __future__ import annotations

import logging
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_exporter.control.client import Unreachable, ask
from gpu_exporter.control.protocol import answer
from gpu_exporter.control.server import ControlServer
from gpu_exporter.sampling.pause import MAX_SECONDS, Pauses


class _Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> _Clock:
    return _Clock()


@pytest.fixture
def pauses(clock: _Clock) -> Pauses:
    return Pauses(clock, lambda: 1_800_000_000.0 + clock.now)


@pytest.fixture
def served(tmp_path: Path, pauses: Pauses) -> Iterator[str]:
    path = str(tmp_path / "run" / "control.sock")  # its folder is made, owner-only
    server = ControlServer(path, pauses)
    assert server.start()
    try:
        yield path
    finally:
        server.stop()
    assert not os.path.exists(path)


def test_the_socket_is_the_owners_only(served: str) -> None:
    mode = os.stat(served).st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(served)).st_mode) == 0o700


def test_pause_resume_and_a_pause_that_ends_on_its_own(served: str, pauses: Pauses, clock: _Clock) -> None:
    reply = ask(served, {"command": "pause", "scope": "full", "seconds": 90})
    assert reply == {"ok": True, "pause": {"scope": "full", "until": "2027-01-15T08:02:20Z",
                                           "source": "gpu-exporter pause"}}  # fmt: skip
    current = pauses.current()
    assert current is not None and current.scope == "full" and current.until == clock.now + 90
    assert ask(served, {"command": "resume"}) == {"ok": True, "pause": None}
    assert pauses.current() is None
    ask(served, {"command": "pause", "scope": "profiling", "seconds": 30})
    clock.now += 29.9
    assert ask(served, {"command": "status"})["pause"]["scope"] == "profiling"
    clock.now += 0.1  # it ends on its own
    assert ask(served, {"command": "status"}) == {"ok": True, "pause": None} and pauses.current() is None


@pytest.mark.parametrize(
    ("request_line", "error"),
    [
        (b"not json", "not one line of JSON"),
        (b'{"command": "reboot"}', "names no command"),
        (b'{"command": "pause", "scope": "gpu", "seconds": 60}', "scope is one of profiling, full"),
        (b'{"command": "pause", "scope": "full", "seconds": "10m"}', "seconds is a number"),
        (b'{"command": "pause", "scope": "full", "seconds": 0}', "more than 0s and at most 3600s"),
        (b'{"command": "pause", "scope": "full", "seconds": 3601}', "at most 3600s"),
        (b'{"command": "pause", "scope": "full", "seconds": NaN}', "at most 3600s"),
    ],
)
def test_bad_requests_are_refused_and_change_nothing(request_line: bytes, error: str, pauses: Pauses) -> None:
    reply = answer(request_line, pauses, "test")
    assert reply["ok"] is False and error in reply["error"], reply
    assert pauses.current() is None


def test_the_longest_pause_is_allowed(pauses: Pauses) -> None:
    assert answer(b'{"command": "pause", "scope": "full", "seconds": %d}' % MAX_SECONDS, pauses, "t")["ok"]


def test_a_stale_socket_is_replaced_and_a_live_one_left_alone(tmp_path: Path, pauses: Pauses) -> None:
    path = tmp_path / "control.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody listens: an exporter that did not stop cleanly
    first = ControlServer(str(path), pauses)
    assert first.start()
    try:
        second = ControlServer(str(path), pauses)
        assert not second.start()  # another exporter serves it: not taken over
        assert ask(str(path), {"command": "status"}) == {"ok": True, "pause": None}
    finally:
        first.stop()


def test_an_unusable_path_is_logged_and_not_fatal(
    tmp_path: Path, pauses: Pauses, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    regular = tmp_path / "file"
    regular.write_text("")
    assert not ControlServer(str(regular), pauses).start()
    assert "control socket" in caplog.text and "--control.socket" in caplog.text and "not a socket" in caplog.text


def test_the_client_says_when_no_exporter_answers(tmp_path: Path) -> None:
    with pytest.raises(Unreachable, match="no control socket at .*is gpu-exporter running"):
        ask(str(tmp_path / "absent.sock"), {"command": "status"})


def test_the_default_paths_failure_is_no_warning(
    tmp_path: Path, pauses: Pauses, caplog: pytest.LogCaptureFixture
) -> None:
    """An unprivileged container has no /run/gpu-exporter: the default's socket failing is info."""
    caplog.set_level(logging.INFO)
    regular = tmp_path / "file"
    regular.write_text("")
    assert not ControlServer(str(regular), pauses, asked=False).start()
    assert [record.levelno for record in caplog.records] == [logging.INFO]
