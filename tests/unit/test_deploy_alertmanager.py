"""The unit-tier tests of tests/system/test_deploy_alertmanager.py (split by what they start)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from tests.system.test_deploy_alertmanager import (
    DINGTALK_CONFIG,
    EXAMPLE,
    FEISHU_FUNCTIONS,
    FEISHU_NAMES,
    GO_BUILTINS,
    TEMPLATE_KEYWORDS,
    TEMPLATES,
    defined,
)


def test_feishu_template_fits_the_adapter() -> None:
    path = TEMPLATES / "feishu.tmpl"
    assert defined(path) >= FEISHU_NAMES
    text = re.sub(r"\{\{/\*.*?\*/\}\}", "", path.read_text(), flags=re.DOTALL)
    used = set()
    for action in re.findall(r"\{\{-?(.*?)-?\}\}", text, flags=re.DOTALL):
        action = re.sub(r'"[^"]*"', '""', action)
        used |= set(re.findall(r"(?:^|[|(])\s*([a-zA-Z]\w*)", action.strip()))
    assert used - GO_BUILTINS - FEISHU_FUNCTIONS - TEMPLATE_KEYWORDS == set()


def test_dingtalk_adapter_configuration() -> None:
    config = yaml.safe_load(DINGTALK_CONFIG.read_text())
    assert [Path(template).name for template in config["templates"]] == ["dingtalk.tmpl"]
    names = defined(TEMPLATES / "dingtalk.tmpl")
    example = yaml.safe_load(EXAMPLE.read_text())
    urls = [hook["url"] for r in example["receivers"] for hook in r.get("webhook_configs", [])]
    for target, settings in config["targets"].items():
        assert any(urlsplit(url).path == f"/dingtalk/{target}/send" for url in urls), target
        assert settings["url"].startswith("https://oapi.dingtalk.com/robot/send?access_token=")
        for field in ("title", "text"):
            assert set(re.findall(r'template "([^"]+)"', settings["message"][field])) <= names, field
