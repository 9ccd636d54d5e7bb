"""The system-tier tests of tests/process/test_first_minutes.py (split by what they start)."""

from __future__ import annotations

from pathlib import Path

from tests.webtls import launch, make_certs


def test_tls_web_config_logs_no_http2_warning(fakenvml_dir: Path, tmp_path: Path) -> None:
    """A TLS web config that says nothing about HTTP/2 logged 'http_server_config.http2: only HTTP/1.1 is
    served'; only an explicit http2: true is worth a word."""
    certs = make_certs(tmp_path / "certs")
    tls = f"tls_server_config:\n  cert_file: {certs.path('server.crt')}\n  key_file: {certs.path('server.key')}\n"
    logs = []
    for extra in ("", "http_server_config: {http2: true}\n"):
        config = tmp_path / "web.yml"
        config.write_text(tls + extra)
        exporter = launch(fakenvml_dir, tmp_path, "--web.config.file", str(config), "--collect-interval", "1h")
        exporter.stop()
        logs.append(exporter.log())
    assert "http2" not in logs[0], logs[0]
    assert "http_server_config.http2: only HTTP/1.1 is served" in logs[1]
