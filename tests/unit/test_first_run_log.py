"""A quiet, true first run, in process: the default ``--simulate`` host's sampler logs one short line
per GPU about what it lacks and one line for the backend, over its first cycles (it logged 24 lines,
a 3.9 KB list per GPU and 16 lines about sample buffers); the names and the driver's words are at
debug level, and on the status page's cards. The process's own start-up lines (listening, backend
chosen) are held by ``tests/process/test_simulate.py``."""

from __future__ import annotations

import logging

import pytest

from gpu_exporter.status.page import card_html
from gpu_exporter.status.view import cards
from tests.unit.simhost import cycles

GPUS = 8  # the default host
#: A line a person reads at a glance (the message; the log adds its timestamp and logger).
SHORT = 200


def test_default_host_first_cycles_say_one_short_line_per_gpu(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    snapshots = cycles(3)
    assert snapshots[-1].sampled_gpus == GPUS
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name.startswith("gpu_exporter")]
    info = [message for level, message in said if level >= logging.INFO]
    lacks = [message for message in info if "not supported here" in message]
    assert len(lacks) == GPUS and len(info) <= GPUS + 2, info
    assert all(len(message) <= SHORT for message in info), [m for m in info if len(m) > SHORT]
    assert {message.split(" ")[1] for message in lacks} == {str(gpu) for gpu in range(GPUS)}
    ready = [message for message in info if "backend ready" in message]
    assert ready == ["nvml backend ready: driver 550.54.15, 8 GPU(s): 0-7 NVIDIA H100 80GB HBM3"]
    # the details: at debug level, and on each GPU's card
    details = [message for level, message in said if level == logging.DEBUG and ": not supported here: " in message]
    assert len(details) == GPUS and all("gpu_fan_speed_ratio" in message for message in details)
    gpu_cards = [card for card in cards(snapshots[-1]) if card["kind"] == "gpu"]
    assert len(gpu_cards) == GPUS
    for card in gpu_cards:
        assert "gpu_fan_speed_ratio" in card["unsupported"]
        [detail] = [message for message in details if message.startswith(f"GPU {card['index']} ")]
        assert detail.split(": not supported here: ")[1].startswith(", ".join(card["unsupported"]) + ";")
        html = card_html(card)  # one click away on the page, not spread over the card
        summary = f"<details class='lacks'><summary>{len(card['unsupported'])} value(s) not supported here"
        assert summary in html and "gpu_fan_speed_ratio" in html.split(summary)[1]
