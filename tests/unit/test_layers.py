"""The package's layers as a test: every import in ``src/gpu_exporter`` goes down (or sideways within
its own room), as the README's Layout section describes. Bottom up: the catalogue, the entity model and the
option rows; the backends (and their registry); sampling (over ``backends.base`` only); attribution,
exposition and status over sampling; the simulator; compat over exposition; the settings; the commands;
``http`` knows nothing of GPUs; ``assemble`` (the composition root), ``app`` and ``cli`` compose them. A
named exception says why it is one, and no chain of imports, exceptions included, leads from a room back
to itself (imports inside functions count).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

from tests.harness import REPO

SRC = REPO / "src"
PACKAGE = "gpu_exporter"
#: Shared basics anyone may import: the version, defensive file reading, logging.
BASICS = ("gpu_exporter", "gpu_exporter.files", "gpu_exporter.logs")
_BELOW_SAMPLING = ("catalogue", "model", "backends.base")
_SAMPLED = (*_BELOW_SAMPLING, "sampling")
#: Room (a top-level module or package) → the rooms or modules it may import besides its own and BASICS.
ALLOWED: dict[str, tuple[str, ...]] = {
    "catalogue": (),
    "model": ("catalogue",),
    "options": ("catalogue",),
    "backends": ("catalogue", "model", "options"),
    "sampling": _BELOW_SAMPLING,
    "attribution": _SAMPLED,
    "simulate": ("catalogue", "model", "backends", "options"),
    "exposition": _SAMPLED,
    "status": _SAMPLED,
    "compat": (*_SAMPLED, "exposition"),
    "config": ("catalogue", "options", "backends.registry", "simulate"),
    "http": ("config",),
    "assemble": (*_SAMPLED, "backends", "attribution", "exposition", "compat", "config", "simulate", "control",
                 "options"),
    "control": (*_SAMPLED,),
    "commands": (*_SAMPLED, "backends", "attribution", "exposition", "compat", "status", "assemble", "config",
                 "options", "control"),
    "app": (*_SAMPLED, "backends", "attribution", "exposition", "compat", "status", "assemble", "config", "http",
            "control"),
    "cli": ("catalogue", "model", "backends", "sampling", "attribution", "exposition", "status", "compat", "config",
            "options", "http", "assemble", "commands", "app"),
    "__main__": ("cli",),
}  # fmt: skip
#: (importing module, imported module or room) → why the import may cross the layers.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("simulate.processes", "attribution.procfs"): "a scenario's processes answer as /proc does (its protocol)",
    ("status.view", "simulate.builtins"): "the status page says when every value is simulated",
    ("config", "compat.flags"): "dcgm-exporter's flags are options of the one command line",
    ("config", "compat.releases"): "--dcgm-exporter.version takes a release gpu-exporter has a profile for",
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    base = SRC.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports(path: Path) -> Iterable[tuple[str, int]]:
    """The package's modules ``path`` imports (``from a import b`` is ``a.b`` when that is a module)."""
    module = _module_name(path)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names if alias.name.startswith(PACKAGE))
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                package = module.split(".")[: len(module.split(".")) - node.level + (path.name == "__init__.py")]
                base = ".".join([*package, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            if base == PACKAGE or base.startswith(PACKAGE + "."):
                for alias in node.names:
                    name = f"{base}.{alias.name}"
                    yield (name if _is_module(name) else base), node.lineno


def _room(dotted: str) -> str:
    """``gpu_exporter.sampling.sampler`` → ``sampling``; the package itself → ``gpu_exporter``."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else PACKAGE


def _within(dotted: str, prefixes: Iterable[str]) -> bool:
    short = dotted.removeprefix(PACKAGE + ".")
    return any(short == prefix or short.startswith(prefix + ".") for prefix in prefixes)


def violations(edges: Iterable[tuple[str, str, int]]) -> list[str]:
    """Each (importer, imported, line) that crosses the layers, as a line naming it and the fix."""
    found = []
    for importer, imported, line in edges:
        room = _room(importer)
        if imported in BASICS or _room(imported) == room:
            continue
        if room not in ALLOWED:
            found.append(f"{importer}: room {room!r} has no layer: add it to ALLOWED in tests/unit/test_layers.py")
            continue
        short = importer.removeprefix(PACKAGE + ".")
        if _within(imported, ALLOWED[room]) or any(
            short == who and _within(imported, (what,)) for who, what in EXCEPTIONS
        ):
            continue
        found.append(
            f"{importer} (line {line}) imports {imported}, which is not below {room!r}: move the code to the "
            f"layer that may know it, pass it in through a protocol, or name the exception in EXCEPTIONS with why"
        )
    return found


def _edges() -> list[tuple[str, str, int]]:
    return [
        (_module_name(path), imported, line)
        for path in sorted((SRC / PACKAGE).rglob("*.py"))
        if "proto" not in path.parts
        for imported, line in imports(path)
    ]


def test_every_import_goes_down_the_layers() -> None:
    edges = _edges()
    assert len(edges) > 200, "the import reader found too few imports: it is broken"
    assert violations(edges) == []


def cycles(edges: Iterable[tuple[str, str, int]]) -> list[str]:
    """Each loop between rooms (a strongly connected set of two or more), as a line naming one import per edge."""
    graph: dict[str, dict[str, str]] = {}
    for importer, imported, line in edges:
        source, target = _room(importer), _room(imported)
        if imported not in BASICS and source != target:
            graph.setdefault(source, {}).setdefault(target, f"{importer} (line {line}) imports {imported}")
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[str] = []

    def visit(room: str) -> None:  # Tarjan's strongly connected components
        order[room] = low[room] = len(order)
        stack.append(room)
        for target in graph.get(room, {}):
            if target not in order:
                visit(target)
                low[room] = min(low[room], low[target])
            elif target in stack:
                low[room] = min(low[room], order[target])
        if low[room] == order[room]:
            component = []
            while (member := stack.pop()) != room:
                component.append(member)
            component.append(room)
            if len(component) > 1:
                how = "; ".join(why for r in sorted(component) for t, why in graph[r].items() if t in component)
                found.append(f"rooms {sorted(component)} import each other: {how}: break the loop")

    for room in sorted(graph):
        if room not in order:
            visit(room)
    return found


def test_rooms_form_no_loop() -> None:
    assert cycles(_edges()) == []


def test_a_planted_import_loop_fails() -> None:
    # An exception would let backends import the sampler's snapshot; the loop check still refuses it.
    planted = [("gpu_exporter.backends.base", "gpu_exporter.sampling.snapshot", 7)]
    (found,) = cycles([*_edges(), *planted])
    assert found.startswith("rooms ['backends', 'sampling'] import each other: ")
    assert "gpu_exporter.backends.base (line 7) imports gpu_exporter.sampling.snapshot" in found


def test_every_exception_is_still_used() -> None:
    edges = _edges()
    unused = [
        pair
        for pair in EXCEPTIONS
        if not any(
            importer.removeprefix(PACKAGE + ".") == pair[0] and _within(imported, (pair[1],))
            for importer, imported, _line in edges
        )
    ]
    assert unused == [], f"exceptions no import needs any more (remove them): {unused}"


def test_a_planted_cross_layer_import_fails() -> None:
    # The sampler importing its renderer (the knot this layout untied), and http learning about GPUs.
    planted = [
        ("gpu_exporter.sampling.sampler", "gpu_exporter.exposition.render", 1),
        ("gpu_exporter.http.server", "gpu_exporter.sampling.snapshot", 2),
        ("gpu_exporter.sampling.convert", "gpu_exporter.backends.nvml.readers", 3),
    ]
    found = violations([*_edges(), *planted])
    assert len(found) == 3, found
    assert "gpu_exporter.sampling.sampler (line 1) imports gpu_exporter.exposition.render" in found[0]


def test_a_new_room_must_declare_its_layer() -> None:
    assert violations([("gpu_exporter.newroom.thing", "gpu_exporter.catalogue", 1)]) == [
        "gpu_exporter.newroom.thing: room 'newroom' has no layer: add it to ALLOWED in tests/unit/test_layers.py"
    ]
