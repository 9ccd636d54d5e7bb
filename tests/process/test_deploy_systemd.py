"""The process-tier tests of tests/system/test_deploy_systemd.py (split by what they start)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def test_attribution_works_under_the_attribution_units_proc_and_not_the_hardened_ones(
    fakenvml_dir: Path, tmp_path: Path
) -> None:
    """systemd is not PID 1 here, so the units cannot run; their /proc settings can, with the kernel's own
    mechanism: ProtectProc=invisible is /proc mounted with hidepid=invisible, seen by the hardened unit's
    unprivileged user; the attribution unit's is a plain /proc seen by root without capabilities. A root
    process on GPU 0 is named under the second and not under the first. Needs root and unshare (skipped
    otherwise); a few seconds."""
    import os
    import tempfile

    from tests.harness import SCENARIOS, value
    from tests.process.test_faults import wait_for
    from tests.webtls import launch

    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("setpriv"):
        pytest.skip("needs root, unshare and setpriv to mount a /proc as the units do")
    shared = Path(tempfile.mkdtemp(prefix="gpu-exporter-unit-"))  # readable by the unprivileged user
    shared.chmod(0o755)
    lib = shared / "lib"
    shutil.copytree(fakenvml_dir, lib)
    owned = subprocess.Popen(["sleep", "60"])  # a root process on GPU 0
    scenario = shared / "host.scn"
    scenario.write_text((SCENARIOS / "h100x4.scn").read_text() + f"gpu0.process.0.pid = {owned.pid}\n")
    for path in (shared, lib, *lib.iterdir(), scenario):
        path.chmod(0o755 if path.is_dir() or path.suffix == ".so" else 0o644)
    names = {}
    try:
        for unit, options, user in (
            ("hardened", "hidepid=invisible", ("--reuid=65534", "--regid=65534", "--clear-groups")),
            ("attribution", "defaults", ("--clear-groups", "--inh-caps=-all", "--bounding-set=-all")),
        ):
            proc = shared / f"proc-{unit}"
            proc.mkdir()
            mount = f'mount -t proc -o {options} proc {proc} && exec setpriv {" ".join(user)} "$0" "$@"'
            exporter = launch(
                lib, tmp_path, "--path.procfs", str(proc), "--collect-interval", "200ms",
                scenario=scenario, prefix=("unshare", "-m", "sh", "-c", mount),
                ready=lambda e: e.get("/healthz").status_code == 200,
            )  # fmt: skip
            try:
                parsed = wait_for(exporter, lambda p: value(p, "gpu_processes", gpu="0", pid=str(owned.pid)) == 1)
            finally:
                exporter.stop()
            [labels] = [dict(k) for k in parsed["gpu_processes"] if dict(k)["pid"] == str(owned.pid)]
            names[unit] = (labels["process"], labels["user"])
    finally:
        owned.kill()
        owned.wait()
        shutil.rmtree(shared, ignore_errors=True)
    assert names == {"hardened": ("", ""), "attribution": ("sleep", "root")}, names
