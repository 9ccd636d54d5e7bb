"""A host or container without the NVIDIA driver, in process (nvmlInit fails as pynvml raises it): one
line with the cause and one fix (in a container without device nodes the container's fix, not the
host's and the container's both), and the status page, the terminal view and ``snapshot`` say it in
those words, not the ``library_not_found`` word that ``gpu_exporter_backend_info{reason}`` carries
(``/readyz`` gives both)."""

from __future__ import annotations

import pynvml
import pytest

from gpu_exporter.app import not_ready_reason
from gpu_exporter.assemble import bare_sampler
from gpu_exporter.backends.base import BackendUnavailable
from gpu_exporter.backends.nvml import NvmlBackend, discovery
from gpu_exporter.catalogue import DEFAULT_COLLECTORS, enabled_specs
from gpu_exporter.commands.snapshot import _no_data
from gpu_exporter.status import page, terminal
from gpu_exporter.status.view import status

NOT_FOUND = "libnvidia-ml.so.1 not found"


def _no_library() -> None:
    raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)


def _message(monkeypatch: pytest.MonkeyPatch, container: bool) -> BackendUnavailable:
    monkeypatch.setattr(pynvml, "nvmlInit", _no_library)
    monkeypatch.setattr(discovery, "_in_container_without_devices", lambda: container)
    with pytest.raises(BackendUnavailable) as raised:
        discovery.init()
    return raised.value


def test_on_a_host_the_driver_is_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    err = _message(monkeypatch, container=False)
    assert err.reason == "library_not_found"
    assert str(err).startswith(f"{NOT_FOUND}: install the NVIDIA driver, or in a container run with the NVIDIA")


def test_in_a_container_without_devices_the_container_hint_comes_once(monkeypatch: pytest.MonkeyPatch) -> None:
    message = str(_message(monkeypatch, container=True))
    assert message.startswith(f"{NOT_FOUND}: this looks like a container without /dev/nvidia* device nodes")
    assert message.count("container toolkit") == 1 and "install the NVIDIA driver" not in message
    assert "\n" not in message


def test_page_terminal_and_snapshot_say_it_in_words(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pynvml, "nvmlInit", _no_library)
    monkeypatch.setattr(discovery, "_in_container_without_devices", lambda: False)
    specs = enabled_specs(DEFAULT_COLLECTORS)
    sampler = bare_sampler(NvmlBackend(), specs, 5.0, "requested")
    try:
        snapshot = sampler.run_cycle()
        ready = not_ready_reason(sampler, 5.0, False)
    finally:
        sampler.stop()
    assert ready.startswith(f"nvml backend is down (library_not_found): {NOT_FOUND}: install the NVIDIA driver")
    assert (snapshot.stats.backend_up, snapshot.stats.backend_reason) == (False, "library_not_found")
    view = status(snapshot, "node-7")
    assert view["backend_problem"].startswith(f"{NOT_FOUND}: install the NVIDIA driver")
    html = page.page(view, "/metrics")
    text = terminal.render(view)
    line = _no_data(view)
    for shown in (html, text, line):
        assert NOT_FOUND in shown and "library_not_found" not in shown, shown
    assert "Backend nvml, down: libnvidia-ml.so.1 not found" in html
    assert f"backend down: {NOT_FOUND}: install the NVIDIA driver" in page.cards_html(view)
    assert line.startswith(f"no GPU data: nvml backend down: {NOT_FOUND}: install the NVIDIA driver")
