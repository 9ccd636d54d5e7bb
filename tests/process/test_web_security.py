"""The process-tier tests of tests/system/test_web_security.py (split by what they start)."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.system.test_web_security import _wait
from tests.webtls import bcrypt_hash, launch


def test_probes_without_auth_and_sighup_reload(fakenvml_dir: Path, tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  prometheus: {bcrypt_hash('pw')}\n")
    settings = tmp_path / "config.yml"
    settings.write_text("web:\n  probes-without-auth: false\ncollect-interval: 1h\n")
    exporter = launch(fakenvml_dir, tmp_path, "--config.file", str(settings), "--web.config.file", str(web))
    try:
        assert exporter.get("/healthz").status_code == 401
        assert exporter.get("/metrics", auth=("prometheus", "pw")).status_code == 200
        settings.write_text("web:\n  probes-without-auth: true\ncollect-interval: 2s\n")
        exporter.process.send_signal(signal.SIGHUP)
        _wait(lambda: exporter.get("/healthz").status_code == 200, "probes open after SIGHUP")
        assert exporter.get("/readyz").status_code == 200
        assert exporter.get("/health").status_code == 200  # dcgm-exporter's probe path, as NVIDIA's chart uses it
        assert exporter.get("/metrics").status_code == 401  # metrics stay protected
        assert "need a restart to apply: --collect-interval" in exporter.log()
        settings.write_text("web: [\n")  # a broken file on SIGHUP: logged, nothing changes, still running
        exporter.process.send_signal(signal.SIGHUP)
        _wait(lambda: "config not reloaded" in exporter.log(), "reload error logged")
        assert exporter.process.poll() is None and exporter.get("/healthz").status_code == 200
    finally:
        exporter.stop()
    assert exporter.process.returncode == 0


def test_web_config_file_from_dcgm_exporter_variable(fakenvml_dir: Path, tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users: {{u: '{bcrypt_hash('p')}'}}\n")
    exporter = launch(fakenvml_dir, tmp_path, env={"DCGM_EXPORTER_WEB_CONFIG_FILE": str(web)})
    try:
        assert exporter.get("/metrics").status_code == 401
        assert exporter.get("/metrics", auth=("u", "p")).status_code == 200
    finally:
        exporter.stop()
