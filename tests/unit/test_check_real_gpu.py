"""scripts/check_real_gpu.py without a GPU: its parsers on the output shapes of nvidia-smi, nvidia-smi dmon
--gpm-metrics, dcgmi dmon and the exporter, its table, and its exit codes where it cannot run (the run
itself needs a real GPU: docs/real-gpu-check.md)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.harness import REPO

SCRIPT = REPO / "scripts" / "check_real_gpu.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_real_gpu", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module's annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_parsers_and_table() -> None:
    script = _script()
    exposition = (
        "# TYPE gpu_sm_active_ratio gauge\n"
        'gpu_sm_active_ratio{gpu="0",uuid="GPU-a"} 0.35\n'
        'gpu_sm_active_ratio{gpu="0",uuid="GPU-a",gpu_instance="1",compute_instance="0",profile="3g.40gb"} 0.2\n'
        'gpu_utilization_ratio{gpu="1",uuid="GPU-b"} 0.97\n'
    )
    assert script.parse_metrics(exposition) == {
        ("gpu_sm_active_ratio", "0"): 0.35,
        ("gpu_utilization_ratio", "1"): 0.97,
    }
    smi = "0, 97, 10240, 71, 612.34, 1980\n1, [N/A], 20480, 64, 455.00, 1755\n"
    parsed = script.parse_smi(smi)
    assert parsed[("utilization.gpu", "0")] == 97 and ("utilization.gpu", "1") not in parsed
    assert parsed[("power.draw", "0")] == 612.34 and parsed[("clocks.sm", "1")] == 1755
    ids = [1, 2, 3, 5, 10]
    dmon = (
        "# gpu  gpm1  gpm2  gpm3  gpm5  gpm10\n# Idx     %     %     %     %      %\n"
        "    0    97    35    12     8     41\n    1     -     -     -     -      -\n"
    )
    assert script.parse_dmon(dmon, ids) == {(1, "0"): [97.0], (2, "0"): [35.0], (3, "0"): [12.0], (5, "0"): [8.0],
                                            (10, "0"): [41.0]}  # fmt: skip
    dcgmi = (
        "#Entity   GRACT   SMACT   SMOCC   TENSO   DRAMA\nID\n"
        "GPU 0     0.970   0.350   0.125   0.080   0.415\nGPU 1  N/A N/A N/A N/A N/A\n"
    )
    got = script.parse_dmon(dcgmi, ids, dcgm=True)
    assert got[(2, "0")] == [35.0] and got[(10, "0")] == [41.5] and (2, "1") not in got
    rows = [script.Row("0", "SM activity %", "dmon --gpm-metrics", 35.0, 38.0, 10.0),
            script.Row("0", "power W", "nvidia-smi", 300.0, 612.0, 40.0),
            script.Row("1", "SM activity %", "dmon --gpm-metrics", None, None, 10.0)]  # fmt: skip
    assert [row.verdict for row in rows] == ["agree", "DIFFER", "n/a"]
    text = script.table(rows)
    assert text.splitlines()[0].split() == ["GPU", "quantity", "reference", "gpu-exporter", "reference", "value",
                                            "tolerance", "verdict"]  # fmt: skip
    assert "| 0 | power W | nvidia-smi | 300.0 | 612.0 | ±40 | DIFFER |" in script.table(rows, markdown=True)
