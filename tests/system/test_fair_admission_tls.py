"""One noisy address never starves another's fresh scrape, with TLS (issue 40): 3,000 connections
from 127.0.0.1 that send one byte of a ClientHello and stop, each reopened as soon as it is closed,
while an honest client opens new TLS connections from 127.0.0.2 (certificates made with openssl)."""

from __future__ import annotations

from pathlib import Path

from tests.flood import Flood
from tests.process.test_fair_admission import _answered
from tests.webtls import launch, make_certs


def test_tls_handshakes_from_one_address(fakenvml_dir: Path, tmp_path: Path) -> None:
    """With TLS: 3,000 connections from one address that send one byte of a ClientHello and stop."""
    certs = make_certs(tmp_path / "certs")
    web = tmp_path / "web.yml"
    web.write_text(
        f"tls_server_config: {{cert_file: {certs.path('server.crt')}, key_file: {certs.path('server.key')}}}\n"
    )
    exporter = launch(fakenvml_dir, tmp_path, "--collect-interval", "1h", "--web.config.file", str(web))
    try:
        with Flood(exporter.port, 3000, hello=b"\x16") as flood:
            flood.wait_for("closed", 3000)
            _answered(f"https://127.0.0.1:{exporter.port}", verify=certs.client_context(with_client_cert=False))
    finally:
        exporter.stop()
