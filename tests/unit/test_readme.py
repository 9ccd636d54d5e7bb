"""The documentation's generated tables match the option table and the catalogue, and the README and
docs say what is true."""

from __future__ import annotations

from gpu_exporter.catalogue import FIXED, METRICS
from gpu_exporter.cli import build_parser
from tests.readme import DOCS, GENERATED, README, SECTIONS, render


def test_generated_sections_are_current() -> None:
    for path, names in GENERATED.items():
        text = path.read_text()
        assert render(text, names, path.name) == text, f"{path.name} is stale: run .venv/bin/python -m tests.readme"


def test_generated_markers_are_only_where_the_generator_writes() -> None:
    """A table whose markers sit in a file the generator does not write would go stale unnoticed."""
    for path in [README, *sorted(DOCS.rglob("*.md"))]:
        text = path.read_text()
        for name in SECTIONS:
            expected = 1 if name in GENERATED.get(path, ()) else 0
            assert text.count(f"<!-- generated:{name} -->") == expected, f"{path.name}: section {name}"


def test_every_flag_and_metric_is_documented() -> None:
    text = "".join(path.read_text() for path in GENERATED)
    for action in build_parser()._actions:
        for flag in action.option_strings:
            if flag.startswith("--") and flag != "--help":
                assert f"`{flag}" in text or f"/ `{flag}`" in text, flag
    for name in [spec.name for spec in METRICS] + list(FIXED):
        assert f"`{name}`" in text, name


def test_deploy_and_status_sections_say_what_is_true() -> None:
    """The Status section named --simulate as not built; the deployment page did not say that the
    manifests' image name is a placeholder, that ServiceMonitor and PrometheusRule need the Prometheus
    Operator's CRDs, or that the image build pulls its base from a registry."""
    import re

    import yaml

    text = README.read_text()
    status = text[text.index("\n## Status\n") :]
    assert "--simulate" not in status.split("Not yet")[1], "README says --simulate is not built"
    kustomization = README.parent / "deploy" / "kubernetes" / "base" / "kustomization.yaml"
    image = yaml.safe_load(kustomization.read_text())["images"][0]["newName"]
    deploy = (DOCS / "deployment.md").read_text()
    assert f"`{image}`" in deploy and "placeholder" in deploy
    assert re.search(r"ServiceMonitor and PrometheusRule need the Prometheus Operator's\s+CRDs", deploy)
    assert "BASE_IMAGE" in deploy and "Docker Hub" in deploy
