"""Single source, checked: metric names are spelled only in the catalogue, entity labels only in model.py.

In process, with ``ast`` over ``src/gpu_exporter`` (well under a second). A metric name here is any
family name or row key the catalogue defines (native rows, identity, events and self-metrics); the
dcgm-exporter names (``DCGM_FI_*``, ``DCGM_EXP_*``) are dcgm-exporter's facts, kept in
``compat/field_names.py``, and not covered. An entity label is any label key ``model.py`` writes
onto an entity. Docstrings are prose and not checked. Label *reads* (``dict(entity.labels)["gpu"]``)
are not checked either: only code that writes a label set — a dict display, or ``(label, value)``
pairs inside a tuple or list — must leave the spelling to ``model.py``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping

from gpu_exporter import model
from gpu_exporter.catalogue import ALL_METRICS, DEVICE_LABELS, FIXED, LINK_LABEL, MIG_LABELS, keys
from tests.harness import REPO

PACKAGE = REPO / "src" / "gpu_exporter"
FAMILIES = frozenset({spec.name for spec in ALL_METRICS} | set(FIXED))
METRIC_NAMES = FAMILIES | {spec.key for spec in ALL_METRICS}

#: (module, literal) → why that module may spell that metric name. Nothing else may.
METRIC_EXCEPTIONS: dict[tuple[str, str], str] = {}
#: (module, label) → why that module may write that label key. Nothing else may.
LABEL_EXCEPTIONS: dict[tuple[str, str], str] = {
    # dcgm-exporter's own label names, which its output must carry byte for byte; some coincide
    # with ours (gpu, pci_bus_id, and nvlink on its link series).
    ("compat/series.py", "gpu"): "dcgm-exporter's label",
    ("compat/series.py", "pci_bus_id"): "dcgm-exporter's label",
    ("compat/series.py", "nvlink"): "dcgm-exporter's label",
    # The status API's JSON fields of a card and a process row, documented for its readers; not
    # series labels, though some share a label's name.
    **{
        ("status/view.py", name): "status JSON field"
        for name in ("uuid", "name", "pid", "user", "namespace", "pod", "container")
    },
    # The fields of a Kubernetes Event object (metadata.name, .namespace, involvedObject.name) that the
    # node condition's Events send to the API server; not series labels.
    **{("attribution/nodeevents.py", name): "Kubernetes Event field" for name in ("name", "namespace")},
    # NVML's utilization struct members (nvmlUtilization_t.gpu, .memory), a backend's vocabulary.
    ("backends/nvml/readers.py", "gpu"): "NVML struct member",
}


def _labels_model_writes() -> frozenset[str]:
    """Label keys ``model.py`` writes: first items of its (label, value) pairs and its dict keys."""
    tree = ast.parse((PACKAGE / "model.py").read_text())
    found = {LINK_LABEL}  # the vocabulary's, written by model.nvlink and model.nvswitch_port
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple) and len(node.elts) == 2 and _text(node.elts[0]) is not None:
            found.add(str(_text(node.elts[0])))
        elif isinstance(node, ast.Dict):
            found.update(str(_text(key)) for key in node.keys if _text(key) is not None)
    return frozenset(label for label in found if label.isidentifier())  # not a default such as ("", "")


def _text(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _modules(skip: tuple[str, ...]) -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if not name.startswith(skip):
            yield name, ast.parse(path.read_text(), filename=str(path))


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the docstring nodes of ``tree`` (prose, which may name a metric)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and _text(first.value) is not None:
                found.add(id(first.value))
    return found


def metric_names_outside_catalogue(exceptions: Mapping[tuple[str, str], str] = METRIC_EXCEPTIONS) -> list[str]:
    """One line per string literal outside ``catalogue/`` that is a metric name or row key, or
    starts building a row key by hand (``"gpu_nvlink_errors_total{type="`` in an f-string)."""
    problems = []
    for name, tree in _modules(skip=("catalogue/",)):
        prose = _docstrings(tree)
        for node in ast.walk(tree):
            value = _text(node)
            if value is None or id(node) in prose or (name, value) in exceptions:
                continue
            family = value.partition("{")[0]
            if value in METRIC_NAMES or ("{" in value and family in FAMILIES):
                problems.append(
                    f"src/gpu_exporter/{name}:{node.lineno}: metric name {value!r} spelled outside the catalogue; "
                    "fix: take it from the catalogue (a row's .name/.key, catalogue.fixed, catalogue.keys, "
                    "catalogue.key_of for a variant row)"
                )
    return problems


def entity_labels_outside_model(exceptions: Mapping[tuple[str, str], str] = LABEL_EXCEPTIONS) -> list[str]:
    """One line per label key that ``model.py`` owns, written as a label outside ``model.py``."""
    owned = _labels_model_writes()
    problems = []
    for name, tree in _modules(skip=("catalogue/", "model.py")):
        for node in ast.walk(tree):
            written: list[ast.AST] = []
            if isinstance(node, ast.Dict):
                written += [key for key in node.keys if key is not None]
            elif isinstance(node, ast.Tuple | ast.List):
                written += [elt.elts[0] for elt in node.elts if isinstance(elt, ast.Tuple) and len(elt.elts) == 2]
            for key in written:
                label = _text(key)
                if label in owned and (name, label) not in exceptions:
                    problems.append(
                        f"src/gpu_exporter/{name}:{key.lineno}: entity label {label!r} written outside model.py; "
                        "fix: build the entity (or its labels) with a gpu_exporter.model constructor, or take "
                        "an existing entity's .labels"
                    )
    return problems


def test_no_metric_name_outside_the_catalogue() -> None:
    problems = metric_names_outside_catalogue()
    assert not problems, "\n".join(problems)


def test_no_entity_label_written_outside_model() -> None:
    problems = entity_labels_outside_model()
    assert not problems, "\n".join(problems)


def test_catalogue_keys_name_rows() -> None:
    """Each constant of catalogue.keys (which repeats a name the rows spell) is a row's key or family."""
    stale = {name: value for name, value in vars(keys).items() if name.isupper() and value not in METRIC_NAMES}
    assert not stale, f"catalogue.keys constants that name no catalogue row: {stale}"


def test_exceptions_are_still_needed() -> None:
    """A named exception that no longer matches anything is removed, not kept 'just in case'."""
    for check, exceptions in (
        (metric_names_outside_catalogue, METRIC_EXCEPTIONS),
        (entity_labels_outside_model, LABEL_EXCEPTIONS),
    ):
        found = {(line.split(":")[0].removeprefix("src/gpu_exporter/"), line.split("'")[1]) for line in check({})}
        assert set(exceptions) <= found, f"exceptions that match nothing: {sorted(set(exceptions) - found)}"


def test_model_labels_match_the_catalogue_vocabulary() -> None:
    """The catalogue declares the labels of its fixed metrics (gpu_up, gpu_mig_info, ...); the
    entities model.py builds carry exactly those, in that order."""
    assert [k for k, _ in model.gpu(0, "GPU-0").labels] == list(DEVICE_LABELS)
    mig = model.mig(0, "GPU-0", 1, 0, "1g.10gb", "MIG-0", "")
    assert [k for k, _ in mig.labels] == [*DEVICE_LABELS, *MIG_LABELS]
    assert [k for k, _ in model.nvlink(0, "GPU-0", 3).labels] == [*DEVICE_LABELS, LINK_LABEL]
