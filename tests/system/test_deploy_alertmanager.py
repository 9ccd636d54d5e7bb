"""The Alertmanager example's receivers (paging webhook, DingTalk and Feishu through their webhook
adapters, e-mail) and their message templates, end to end: a real Alertmanager with the example
configuration, pointed at a webhook server and an SMTP server in the test, receives alerts shaped as
Prometheus sends them (annotations rendered from the shipped rules); the test asserts what each
receiver got. The adapters themselves cannot be installed here: the test checks the Alertmanager side
(the requests the adapters would receive) and has Alertmanager render the adapters' templates with
the same alerts (through extra e-mail receivers), since both adapters use Alertmanager's template data.
"""

from __future__ import annotations

import email
import email.policy
import re
import socketserver
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from email.message import EmailMessage
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import yaml

from tests.harness import REPO
from tests.unit.test_alerts import Webhooks, alertmanager, tool, wait_until

ALERTS = REPO / "alerts"
EXAMPLE = ALERTS / "alertmanager.example.yml"
TEMPLATES = ALERTS / "templates"
DINGTALK_CONFIG = ALERTS / "adapters" / "dingtalk.yml"
#: What the Feishu adapter (alertmanager-webhook-adapter) renders, and the functions it offers besides
#: Go's builtins; Alertmanager has the same functions, so a template limited to them works in both.
FEISHU_NAMES = {"prom.title", "prom.text", "prom.markdown"}
FEISHU_FUNCTIONS = {"toUpper", "toLower", "title", "join", "markdown"}
GO_BUILTINS = {"and", "or", "not", "len", "index", "slice", "print", "printf", "println", "eq", "ne", "lt", "le",
               "gt", "ge", "html", "js", "urlquery", "call"}  # fmt: skip
TEMPLATE_KEYWORDS = {"define", "template", "if", "else", "end", "range", "with", "block", "break", "continue"}


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def defined(path: Path) -> set[str]:
    return set(re.findall(r'\{\{-?\s*define\s+"([^"]+)"', path.read_text()))


# --- configuration and templates ------------------------------------------------------------------------


def test_amtool_loads_the_example_with_its_templates() -> None:
    result = run(tool("amtool"), "check-config", str(EXAMPLE))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 templates" in result.stdout and "3 receivers" in result.stdout
    config = yaml.safe_load(EXAMPLE.read_text())
    assert [(EXAMPLE.parent / glob).is_file() for glob in config["templates"]] == [True]
    receivers = {receiver["name"]: receiver for receiver in config["receivers"]}
    chat_urls = [hook["url"] for hook in receivers["chat"]["webhook_configs"]]
    assert any("/dingtalk/" in url for url in chat_urls) and any("channel_type=feishu" in url for url in chat_urls)
    for name in ("pager", "chat"):
        assert receivers[name]["email_configs"], name


def test_every_template_renders_with_alertmanager() -> None:
    """amtool renders each message template with Alertmanager's own example data: the syntax, fields and
    functions are Alertmanager's (prometheus-webhook-dingtalk uses the same data and functions). The
    per-alert helpers (``*.alert*``, given one alert) are rendered through them."""
    names = set()
    for path in sorted(TEMPLATES.glob("*.tmpl")):
        for name in defined(path) - {name for name in defined(path) if ".alert" in name}:
            names.add(name)
            result = run(tool("amtool"), "template", "render", f"--template.glob={TEMPLATES}/*.tmpl",
                         f'--template.text={{{{ template "{name}" . }}}}')  # fmt: skip
            assert result.returncode == 0 and result.stdout.strip(), (path.name, name, result.stderr)
    assert {"gpu.email.subject", "gpu.email.text", "gpu.email.html", "gpu.dingtalk.title"} <= names


# --- end to end ------------------------------------------------------------------------------------------


class Smtp:
    """A minimal SMTP server on 127.0.0.1 (EHLO, MAIL, RCPT, DATA, RSET, NOOP, QUIT; no TLS, no AUTH) that
    keeps every message it accepts."""

    def __init__(self) -> None:
        self.messages: list[tuple[list[str], EmailMessage]] = []
        lock = threading.Lock()
        messages = self.messages

        class Handler(socketserver.StreamRequestHandler):
            def reply(self, line: str) -> None:
                self.wfile.write(line.encode() + b"\r\n")

            def handle(self) -> None:
                self.reply("220 localhost ESMTP gpu-exporter-test")
                recipients: list[str] = []
                while line := self.rfile.readline():
                    verb = line.decode(errors="replace").strip().split(" ", 1)[0].upper()
                    if verb in {"EHLO", "HELO"}:
                        self.reply("250-localhost")
                        self.reply("250 8BITMIME")
                    elif verb == "MAIL":
                        recipients = []
                        self.reply("250 OK")
                    elif verb == "RCPT":
                        recipients.append(re.sub(r".*<([^>]*)>.*", r"\1", line.decode().strip()))
                        self.reply("250 OK")
                    elif verb == "DATA":
                        self.reply("354 End data with <CR><LF>.<CR><LF>")
                        body = bytearray()
                        while (data := self.rfile.readline()) not in {b".\r\n", b".\n", b""}:
                            body += data[1:] if data.startswith(b"..") else data
                        parsed = email.message_from_bytes(bytes(body), policy=email.policy.default)
                        assert isinstance(parsed, EmailMessage)
                        with lock:
                            messages.append((recipients, parsed))
                        self.reply("250 OK queued")
                    elif verb in {"RSET", "NOOP"}:
                        self.reply("250 OK")
                    elif verb == "QUIT":
                        self.reply("221 Bye")
                        return
                    else:
                        self.reply("502 Command not implemented")

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def to(self, address: str) -> list[EmailMessage]:
        return [message for recipients, message in list(self.messages) if address in recipients]

    @contextmanager
    def running(self) -> Iterator[Smtp]:
        self.thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()
            self.thread.join(5)


def rule(name: str) -> dict[str, Any]:
    data = yaml.safe_load((ALERTS / "gpu-alerts.rules.yml").read_text())
    return next(r for group in data["groups"] for r in group["rules"] if r.get("alert") == name)


def as_prometheus_sends(name: str, labels: dict[str, str], value: str) -> dict[str, Any]:
    """An alert as Prometheus posts it: the rule's labels and its annotations with the labels and value
    filled in (the rules use only ``{{ $labels.NAME }}`` and ``{{ $value }}`` in the alerts used here)."""
    spec = rule(name)
    all_labels = {"alertname": name, "job": "gpu-exporter", **labels, **spec["labels"]}

    def fill(text: str) -> str:
        text = re.sub(r"\{\{\s*\$labels\.(\w+)\s*\}\}", lambda m: all_labels[m.group(1)], text)
        text = re.sub(r"\{\{\s*\$value\s*\}\}", value, text)
        assert "{{" not in text, text
        return text

    annotations = {key: fill(text) for key, text in spec["annotations"].items()}
    return {"labels": all_labels, "annotations": annotations, "startsAt": datetime.now(UTC).isoformat(),
            "generatorURL": "http://prometheus.example.internal:9090/graph"}  # fmt: skip


def test_receivers_end_to_end(tmp_path: Path) -> None:
    hot = as_prometheus_sends("GPUTemperatureHigh", {"instance": "gpu-node-7", "gpu": "2",
                              "uuid": "GPU-7f0e0000-0000-4000-8000-000000000002"}, "91")  # fmt: skip
    fallen = as_prometheus_sends("GPUFallenOffBus", {"instance": "gpu-node-9", "gpu": "5",
                                 "uuid": "GPU-9f0e0000-0000-4000-8000-000000000005"}, "1")  # fmt: skip
    assert hot["labels"]["severity"] == "warning" and fallen["labels"]["severity"] == "critical"
    assert "91" in hot["annotations"]["description"]

    with Webhooks().running() as hooks, Smtp().running() as smtp:
        config: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
        webhook = urlsplit(hooks.url)
        for receiver in config["receivers"]:
            for hook in receiver.get("webhook_configs", []):
                hook["url"] = urlsplit(hook["url"])._replace(scheme=webhook.scheme, netloc=webhook.netloc).geturl()
        config["global"].update(smtp_smarthost=smtp.address, smtp_require_tls=False)
        # The example's template path is relative to its folder; the copy lives elsewhere. The adapters'
        # templates are loaded too, for the two extra e-mails that render them with these alerts.
        config["templates"] = [str(TEMPLATES / "*.tmpl")]
        chat = next(r for r in config["receivers"] if r["name"] == "chat")
        chat["email_configs"] += [
            {"to": "render-dingtalk@test", "text": '{{ template "gpu.dingtalk.content" . }}'},
            {"to": "render-feishu@test", "text": '{{ template "prom.markdown" . }}'},
        ]
        config["route"].update(group_wait="1s", group_interval="5s", repeat_interval="1h")

        with alertmanager(tmp_path, config) as url:
            posted = httpx.post(f"{url}/api/v2/alerts", json=[hot, fallen], timeout=10)
            assert posted.status_code == 200, posted.text

            dingtalk = "/dingtalk/gpu/send"
            feishu = "/webhook/send?channel_type=feishu&token=FEISHU_BOT_TOKEN"
            pager = "/alertmanager"
            addresses = ("gpu-team@example.com", "gpu-oncall@example.com", "render-dingtalk@test",
                         "render-feishu@test")  # fmt: skip

            def arrived() -> bool:
                return all(hooks.alerts(path) for path in (dingtalk, feishu, pager)) and all(
                    smtp.to(address) for address in addresses
                )

            wait_until(arrived, 60, f"webhooks {hooks.received} and mail to {addresses}")

    # Webhooks: what each adapter (and the pager) receives.
    for path, expected in ((dingtalk, hot), (feishu, hot), (pager, fallen)):
        (alert,) = hooks.alerts(path)
        assert alert["labels"] == expected["labels"] and alert["annotations"] == expected["annotations"], path

    def shows_everything(text: str, alert: dict[str, Any]) -> None:
        labels, notes = alert["labels"], alert["annotations"]
        for needle in (labels["alertname"], labels["instance"], labels["gpu"], labels["uuid"], notes["summary"],
                       notes["description"], notes["runbook_url"]):  # fmt: skip
            assert needle in text, f"{needle!r} missing from:\n{text}"

    # E-mail: warning to the team, critical to on-call; subject, text and HTML parts.
    for address, alert in (("gpu-team@example.com", hot), ("gpu-oncall@example.com", fallen)):
        (message,) = smtp.to(address)
        labels = alert["labels"]
        assert message["Subject"] == f"[FIRING:1] {labels['alertname']} on {labels['instance']} GPU {labels['gpu']}"
        assert message["From"] == "alertmanager@example.com"
        plain = message.get_body(("plain",))
        html = message.get_body(("html",))
        assert plain is not None and html is not None
        shows_everything(plain.get_content(), alert)
        assert f'<a href="{alert["annotations"]["runbook_url"]}">' in html.get_content()
        assert f"<td>{labels['gpu']} ({labels['uuid']})</td>" in html.get_content()

    # The adapters' messages, rendered by Alertmanager from the same alert.
    for address in ("render-dingtalk@test", "render-feishu@test"):
        (message,) = smtp.to(address)
        body = message.get_body(("plain",))
        assert body is not None
        text = body.get_content()
        shows_everything(text, hot)
        assert f"[Runbook]({hot['annotations']['runbook_url']})" in text
