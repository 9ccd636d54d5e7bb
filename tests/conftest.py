"""Shared pytest fixtures."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.fakenvml.build import BuildError, build

# The exporters the tests start make no control socket unless a test gives one (--control.socket): the
# default is one per host, under /run, and exporters started side by side would contend for it.
os.environ.setdefault("GPU_EXPORTER_CONTROL_SOCKET", "")


@pytest.fixture(scope="session")
def fakenvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding the fake ``libnvidia-ml.so.1``, built once per session.

    Point a new process at it with ``LD_LIBRARY_PATH`` and describe the GPUs in the file named by
    ``FAKE_NVML_SCENARIO`` (format: ``tests/fakenvml/README.md``).
    """
    try:
        return build(tmp_path_factory.mktemp("fakenvml"))
    except BuildError as exc:
        pytest.fail(f"fakenvml: {exc}", pytrace=False)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``gpu`` need a real NVIDIA GPU: skip them, saying so, where nvidia-smi is missing."""
    if shutil.which("nvidia-smi") is not None:
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU here (nvidia-smi not found): gpu-marked tests skipped")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
