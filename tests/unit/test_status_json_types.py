"""The status JSON (``/api/v1/status``, ``gpu-exporter snapshot --json``) gives whole numbers as
numbers: process ids, PCIe generations and widths, ECC error counts (it gave pids as strings and
PCIe generations as floats); the folded ``pid="other"`` row has no pid (``null``)."""

from __future__ import annotations

import json

from gpu_exporter import model
from gpu_exporter.backends.base import DeviceIdentity, HostIdentity
from gpu_exporter.catalogue import keys
from gpu_exporter.sampling.snapshot import DeviceView, SelfStats, Snapshot
from gpu_exporter.status import page, terminal
from gpu_exporter.status.view import status
from tests.unit.simhost import cycles

WHOLE = ("pcie_generation", "pcie_generation_max", "pcie_width", "pcie_width_max", "ecc_uncorrected_volatile")


def test_the_default_hosts_json_has_ints_where_the_values_are_whole() -> None:
    [snapshot] = cycles(1)
    body = json.loads(json.dumps(status(snapshot, "node-7")))  # as the command prints it
    gpus = body["gpus"]
    processes = [process for card in gpus for process in card["processes"]]
    assert processes and all(type(process["pid"]) is int for process in processes), processes
    for card in gpus:
        for key in WHOLE:
            assert type(card[key]) is int, (card["title"], key, card[key])
    assert {card["pcie_generation_max"] for card in gpus} == {5}


class _Exposition:
    text = b""

    def get(self, name: str, gzipped: bool = False) -> bytes | None:
        return None

    def ready(self, name: str, gzipped: bool) -> bool:
        return True


def test_the_folded_row_has_no_pid_and_shows_as_other() -> None:
    gpu = model.gpu(0, "GPU-0")
    mine = model.process(gpu, 4242, "python3", "root")
    other = model.other_process(model.process(gpu, 9999))
    samples = {gpu: {keys.PCIE_GENERATION: 4.0}, mine: {}, other: {keys.PROCESSES: 3.0}}
    device = DeviceView(DeviceIdentity(0, "GPU-0", "GPU"), True, samples)
    stats = SelfStats("0", "nvml", True, "", 5.0)
    snapshot = Snapshot(0.0, HostIdentity(), (device,), stats, _Exposition())
    [card] = json.loads(json.dumps(status(snapshot, "node-7")))["gpus"]
    assert card["pcie_generation"] == 4 and type(card["pcie_generation"]) is int
    rows = {process["pid"]: process for process in card["processes"]}
    assert set(rows) == {4242, None} and rows[None]["processes"] == 3 and type(rows[None]["processes"]) is int
    view = status(snapshot, "node-7")
    assert "<td>other</td>" in page.card_html(view["gpus"][0]) and "/other(" in terminal.render(view)
