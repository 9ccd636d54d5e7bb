"""The process-tier tests of tests/unit/test_dcgm_fields.py (split by what they start)."""

from __future__ import annotations

from pathlib import Path

from tests.harness import SCENARIOS, start
from tests.unit.test_dcgm_fields import IDENTITY_CSV


def test_identity_fields_and_p2p_status_out_of_process(fakenvml_dir: Path, tmp_path: Path) -> None:
    """The real exporter on the fake NVML: identity values and label fields as DCGM encodes them, and
    DCGM_EXP_P2P_STATUS with one series per ordered pair of GPUs (N × (N - 1)), read once at discovery."""
    csv = tmp_path / "identity.csv"
    csv.write_text(IDENTITY_CSV)
    exporter = start(
        fakenvml_dir, SCENARIOS / "h100x4.scn", tmp_path, "-f", str(csv), "--collect-interval", "1h",
        env={"NODE_NAME": "node-1"}, trace=True,
    )  # fmt: skip
    try:
        text = exporter.metrics()
    finally:
        exporter.stop()
    lead = (
        'gpu="2",UUID="GPU-4a1e0c2d-2b7f-4c3a-9e21-5d8f6a0b1c22",pci_bus_id="00000000:58:00.0",device="nvidia2",'
        'modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",DCGM_FI_DEV_BRAND="NVIDIA",'
        'DCGM_FI_DEV_INFOROM_IMAGE_VER="G520.0200.00.05"'
    )
    assert f"DCGM_FI_DEV_CUDA_COMPUTE_CAPABILITY{{{lead}}} 589824" in text  # 9 << 16 | 0
    assert f"DCGM_FI_DEV_PCI_COMBINED_ID{{{lead}}} 590352606" in text  # 0x233010DE
    p2p = [line for line in text.splitlines() if line.startswith("DCGM_EXP_P2P_STATUS{")]
    assert len(p2p) == 12, p2p
    assert f'DCGM_EXP_P2P_STATUS{{{lead},link_status="OK",peer_gpu="0"}} 0' in p2p
    assert f'DCGM_EXP_P2P_STATUS{{{lead},link_status="TopologyNotSupported",peer_gpu="3"}} 3' in p2p
    assert exporter.trace_path is not None
    calls = exporter.trace_path.read_text().splitlines()
    assert sum(line.startswith("nvmlDeviceGetP2PStatus ") for line in calls) == 12, "once per pair, at discovery"
