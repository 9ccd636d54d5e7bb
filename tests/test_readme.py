"""The README's generated tables match the option table and the catalogue."""

from __future__ import annotations

from gpu_exporter.catalogue import FIXED, METRICS
from gpu_exporter.cli import build_parser
from tests.readme import README, render


def test_generated_sections_are_current() -> None:
    text = README.read_text()
    assert render(text) == text, "README tables are stale: run .venv/bin/python -m tests.readme"


def test_every_flag_and_metric_is_documented() -> None:
    text = README.read_text()
    for action in build_parser()._actions:
        for flag in action.option_strings:
            if flag.startswith("--") and flag != "--help":
                assert f"`{flag}" in text or f"/ `{flag}`" in text, flag
    for name in [spec.name for spec in METRICS] + list(FIXED):
        assert f"`{name}`" in text, name


def test_deploy_and_status_sections_say_what_is_true() -> None:
    """The Status section named --simulate as not built; the Deploy section did not say that the
    manifests' image name is a placeholder, that ServiceMonitor and PrometheusRule need the Prometheus
    Operator's CRDs, or that the image build pulls its base from a registry."""
    import re

    import yaml

    text = README.read_text()
    status = text[text.index("\n## Status\n") :]
    assert "--simulate" not in status.split("Not yet")[1], "README says --simulate is not built"
    kustomization = README.parent / "deploy" / "kubernetes" / "base" / "kustomization.yaml"
    image = yaml.safe_load(kustomization.read_text())["images"][0]["newName"]
    deploy = text[text.index("\n## Deploy\n") : text.index("\n## Testing without a GPU\n")]
    assert f"`{image}`" in deploy and "placeholder" in deploy
    assert re.search(r"ServiceMonitor and PrometheusRule need the Prometheus Operator's\s+CRDs", deploy)
    assert "BASE_IMAGE" in deploy and "Docker Hub" in deploy
