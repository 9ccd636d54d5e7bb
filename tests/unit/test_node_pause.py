"""The node-label pause (issue 37, Kubernetes), in process: the label gpu-exporter.io/pause=full or
=profiling on this node pauses for the annotation's duration (default 10 minutes, at most an hour);
removing it resumes; only a change acts, so a pause that ended on its own is not asked again while the
label stays; a value that is no scope, a bad duration and an API server that does not answer are
logged and change nothing. The node object is what GET /api/v1/nodes/NODE returns."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gpu_exporter.control.nodelabel import FOR_ANNOTATION, LABEL, NodeLabelPause, NodeLabels
from gpu_exporter.options import parse_duration
from gpu_exporter.sampling.pause import DEFAULT_SECONDS, Pauses


class _Clock:
    def __init__(self) -> None:
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


class _Node:
    """The API server's answer for this node, as the test sets it (an exception: the request fails)."""

    def __init__(self) -> None:
        self.labels: dict[str, str] = {"kubernetes.io/hostname": "gpu-7"}
        self.annotations: dict[str, str] = {}
        self.failure: Exception | None = None

    def __call__(self) -> dict[str, Any]:
        if self.failure is not None:
            raise self.failure
        return {"kind": "Node", "metadata": {"name": "gpu-7", "labels": dict(self.labels),
                                             "annotations": dict(self.annotations)}}  # fmt: skip


def _setup() -> tuple[_Node, Pauses, _Clock, NodeLabels]:
    node, clock = _Node(), _Clock()
    pauses = Pauses(clock, lambda: 1_800_000_000.0 + clock.now)
    return node, pauses, clock, NodeLabels(node, [NodeLabelPause(pauses, lambda v: parse_duration(v, 1.0, 3600.0))])


def test_the_label_pauses_for_the_annotations_duration_and_its_removal_resumes() -> None:
    node, pauses, clock, watcher = _setup()
    watcher.check()
    assert pauses.current() is None
    node.labels[LABEL], node.annotations[FOR_ANNOTATION] = "full", "15m"
    watcher.check()
    pause = pauses.current()
    assert pause is not None and pause.scope == "full" and pause.until == clock.now + 900
    assert pause.source == f"node label {LABEL}=full"
    del node.labels[LABEL]
    watcher.check()
    assert pauses.current() is None
    node.labels[LABEL] = "profiling"
    del node.annotations[FOR_ANNOTATION]
    watcher.check()
    pause = pauses.current()
    assert pause is not None and pause.scope == "profiling" and pause.until == clock.now + DEFAULT_SECONDS


def test_a_pause_that_ended_on_its_own_is_not_asked_again_while_the_label_stays() -> None:
    node, pauses, clock, watcher = _setup()
    node.labels[LABEL], node.annotations[FOR_ANNOTATION] = "full", "1m"
    watcher.check()
    clock.now += 60
    for _ in range(3):
        watcher.check()
        assert pauses.current() is None  # a forgotten label cannot blind monitoring
    node.labels[LABEL] = "profiling"  # a new value: a new pause
    watcher.check()
    assert pauses.current() is not None


def test_a_pause_asked_otherwise_is_left_alone_when_no_label_comes(caplog: pytest.LogCaptureFixture) -> None:
    node, pauses, _clock, watcher = _setup()
    pauses.request("full", 600, "gpu-exporter pause")
    watcher.check()  # no label, never was: nothing to end
    assert pauses.current() is not None
    caplog.set_level(logging.WARNING)
    node.labels[LABEL] = "yes"
    watcher.check()
    assert "is not one of profiling, full: ignored" in caplog.text
    assert dict(watcher.current().failures) == {"invalid_label": 1}  # counted in the self-metrics
    node.labels[LABEL], node.annotations[FOR_ANNOTATION] = "full", "2h"
    watcher.check()
    assert "pausing for the default 600s" in caplog.text
    current = pauses.current()
    assert current is not None and current.source.startswith("node label")


def test_an_api_server_that_does_not_answer_is_logged_once_and_changes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    node, pauses, _clock, watcher = _setup()
    node.labels[LABEL] = "full"
    watcher.check()
    caplog.set_level(logging.INFO)
    node.failure = RuntimeError("HTTP 403: nodes is forbidden")
    for _ in range(3):
        watcher.check()
    assert caplog.text.count("cannot read this node (HTTP 403") == 1
    assert pauses.current() is not None  # the pause asked stays; it ends on its own
    node.failure = None
    del node.labels[LABEL]
    watcher.check()
    assert "read again" in caplog.text and pauses.current() is None
