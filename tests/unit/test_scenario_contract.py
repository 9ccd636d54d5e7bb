"""One contract for the two NVML fakes: the scenario keys that SCENARIO.md documents are the keys that
the C fake (tests/fakenvml/*.c) and the simulator (src/gpu_exporter/simulate/*.py) read.

Nothing here is a hand list. The documented keys come from the key tables of
``src/gpu_exporter/simulate/SCENARIO.md`` (the column named ``key``; ``{a,b}`` alternatives; an
upper-case letter is an index, ``FUNCTION`` a symbol; a cell marked *(C fake only)* or *(simulator
only)* is claimed by that fake alone). The keys a fake reads come from its source: every key-shaped
string literal (C) or string/f-string (Python) that stands where a key goes — a look-up's key argument,
an argument of a function that passes it on to a look-up, a table, an assignment, a return — with its
placeholders (``%u``, ``%d``, ``{k}``) as an index and ``%s``/``{name}`` as a hole that other such
literals fill. A documented key is read by a fake when its literals can spell it; a literal that helps
spell no documented key is a key read but undocumented (or dead code). In-process, no build, no run.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache

from tests.harness import REPO

ROOT = REPO
DOC_NAME = "src/gpu_exporter/simulate/SCENARIO.md"
DOC = ROOT / DOC_NAME
C_DIR = ROOT / "tests/fakenvml"
PY_DIR = ROOT / "src/gpu_exporter/simulate"
C_FAKE, SIMULATOR = "C fake", "simulator"
ONLY = {"(C fake only)": C_FAKE, "(simulator only)": SIMULATOR}

HOLE = "\x00"  # a %s or {expr}: filled by another literal, an index or a symbol
_SHAPE = re.compile(r"^[a-z0-9_.#\x00]*[a-z\x00][a-z0-9_.#\x00]*$")
# Look-ups and the positions of their key arguments; (positions, first of a printf-style tail or None).
Positions = tuple[frozenset[int], int | None]
C_LOOKUPS: dict[str, Positions] = {
    "fake_get": (frozenset({1}), None),
    "fake_dev_str": (frozenset(), 1),
    "fake_dev_u64": (frozenset(), 2),
    "fake_dev_f64": (frozenset(), 2),
    "fake_gpu_str": (frozenset({2}), None),
    "fake_gpu_u64": (frozenset({3}), None),
    "fake_gpu_f64": (frozenset({3}), None),
    "fake_uint": (frozenset({2}), None),
    "fake_ull": (frozenset({2}), None),
    "snprintf": (frozenset(), 2),
}
# The simulator's: call.Call's accessors, Scenario.get and Library's value readers.
PY_LOOKUPS: dict[str, Positions] = {
    name: (frozenset({0}), None) for name in ("text", "u64", "f64", "get", "uint_value", "float_value", "error_value")
}
PY_LOOKUPS |= {"out": (frozenset({1}), None), "flag": (frozenset({1}), None), "out_pair": (frozenset({1, 3}), None)}


def _is_key_arg(positions: Positions | None, index: int) -> bool:
    if positions is None:
        return False
    fixed, tail = positions
    return index in fixed or (tail is not None and index >= tail)


@dataclass(frozen=True)
class Literal:
    """A key or key template a fake's source reads, with where it stands."""

    pattern: str
    where: str


@dataclass
class DocKey:
    pattern: str  # gpuN. dropped, indexes as '#', FUNCTION as '*'
    spelled: str  # as the document writes it
    fakes: frozenset[str]


@dataclass
class Reading:
    """Which documented keys one fake's literals spell, and which literals spell none."""

    fake: str
    literals: list[Literal]
    read: set[str] = field(default_factory=set)
    used: set[str] = field(default_factory=set)


def _relative(pattern: str) -> str:
    """Keys are compared without their ``gpuN.`` prefix (look-ups that add it take the rest)."""
    for prefix in ("gpu#.", f"gpu{HOLE}."):
        if pattern.startswith(prefix):
            return pattern[len(prefix) :]
    return pattern


# --- the document ---------------------------------------------------------------------------------


def _expand(text: str) -> Iterator[str]:
    match = re.search(r"\{([^{}]*)\}", text)
    if match is None:
        yield text
        return
    for choice in match[1].split(","):
        yield from _expand(text[: match.start()] + choice.strip() + text[match.end() :])


def _normalise(spelled: str) -> str:
    key = spelled.replace("FUNCTION", "*")
    return _relative(re.sub(r"(?<![A-Z])[A-Z](?![A-Z])", "#", key))


def _column(text: str, heads: Callable[[str], bool]) -> Iterator[tuple[str, str]]:
    """(cell, line) of the column whose header ``heads`` accepts, for every body row of every table."""
    column = None
    for line in text.splitlines():
        if not line.startswith("|"):
            column = None
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if column is None:
            column = next((i for i, cell in enumerate(cells) if heads(cell)), -1)
        elif column >= 0 and not set(cells[0]) <= set("-: "):
            yield cells[column], line


def documented_values(text: str) -> frozenset[str]:
    """Words a key takes as its value, from table columns headed ``name in …`` (e.g. the sampling types
    ``gpuN.samples.unsupported`` lists): a fake spells them, but they are no keys."""
    cells = _column(text, lambda head: head.startswith("name in"))
    return frozenset(word for cell, _line in cells for word in re.findall(r"`([^`]+)`", cell))


def documented_keys(text: str) -> list[DocKey]:
    """Every key of every table with a ``key`` column, expanded."""
    keys: list[DocKey] = []
    for cell, line in _column(text, lambda head: head == "key"):
        claims = {fake for marker, fake in ONLY.items() if marker in cell}
        fakes = frozenset(claims or {C_FAKE, SIMULATOR})
        for span in re.findall(r"`([^`]+)`", cell):
            assert "<" not in span and "…" not in span, f"SCENARIO.md: spell key `{span}` out in full ({line})"
            keys += [DocKey(_normalise(key), key, fakes) for key in _expand(span)]
    return keys


# --- the C fake -----------------------------------------------------------------------------------


def _blank(match: re.Match[str]) -> str:
    return re.sub(r"[^\n]", " ", match[0])


def _c_functions(text: str) -> Iterator[tuple[str, list[str], int, int]]:
    """(name, parameter names, body start, body end) of each function defined at the top level."""
    for match in re.finditer(r"^[A-Za-z_][\w \t*]*?\b(\w+)\s*\(([^;{)]*)\)\s*\{", text, re.M):
        depth, end = 0, match.end() - 1
        for end in range(match.end() - 1, len(text)):
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            if depth == 0:
                break
        params = [re.findall(r"\w+", p)[-1] for p in match[2].split(",") if re.findall(r"\w+", p)]
        yield match[1], params, match.end(), end


def _c_calls(text: str) -> Iterator[tuple[str, list[tuple[int, str]]]]:
    """(callee, [(start, text) of each argument]) of every call in ``text``."""
    for match in re.finditer(r"\b(\w+)\s*\(", text):
        args, depth, begin = [], 1, match.end()
        for end in range(match.end(), len(text)):
            char = text[end]
            depth += {"(": 1, ")": -1}.get(char, 0)
            if (char == "," and depth == 1) or depth == 0:
                args.append((begin, text[begin:end]))
                begin = end + 1
            if depth == 0:
                break
        yield match[1], args


def _c_names(expr: str) -> set[str]:
    """Identifiers in ``expr``, less those used as a struct or pointer (``c->gpu`` gives ``gpu``)."""
    return set(re.findall(r"\b(?<![.>])([A-Za-z_]\w*)\b(?!\s*(?:->|\.|\())", expr))


def _c_key_names(body: str, keyed: dict[str, Positions]) -> set[str]:
    """Identifiers that reach a key argument, directly or through assignments and snprintf."""
    names: set[str] = set()
    calls = list(_c_calls(body))
    for callee, args in calls:
        for i, (_, arg) in enumerate(args):
            if _is_key_arg(keyed.get(callee), i):
                names |= _c_names(arg)
    grown = True
    while grown:
        before = len(names)
        for match in re.finditer(r"\b(\w+)\s*=(?!=)([^;]*);", body):
            if match[1] in names:
                names |= _c_names(match[2])
        for callee, args in calls:
            if callee in ("snprintf", "vsnprintf") and args and _c_names(args[0][1]) & names:
                names |= {n for _, arg in args[2:] for n in _c_names(arg)}
        grown = len(names) > before
    return names


def c_sources() -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(C_DIR.glob("*.c"))}


def c_literals(sources: dict[str, str]) -> list[Literal]:
    """The key literals of the C fake's ``sources`` (file name -> text)."""
    texts = {}
    for name, source in sources.items():
        text = re.sub(r"/\*.*?\*/|//[^\n]*", _blank, source, flags=re.S)
        texts[name] = re.sub(r"^#include[^\n]*", _blank, text, flags=re.M)
    # Functions that pass a parameter on to a look-up (transitively) take keys at its position.
    keyed = dict(C_LOOKUPS)
    grown = True
    while grown:
        grown = False
        for text in texts.values():
            for name, params, start, end in _c_functions(text):
                if name in keyed:
                    continue
                reaching = _c_key_names(text[start:end], keyed)
                positions = frozenset(i for i, param in enumerate(params) if param in reaching)
                if positions:
                    keyed[name] = (positions, None)
                    grown = True
    found = []
    for name, text in texts.items():
        for match in re.finditer(r'"((?:[^"\\\n]|\\.)*)"', text):
            pattern = re.sub(r"%[du]", "#", re.sub(r"%s", HOLE, match[1]))
            if not _SHAPE.match(pattern) or _relative(pattern) in ("", HOLE):
                continue
            call = _c_enclosing_call(text, match.start())
            if call is None or _is_key_arg(keyed.get(call[0]), call[1]):
                line = text.count("\n", 0, match.start()) + 1
                found.append(Literal(_relative(pattern), f"tests/fakenvml/{name}:{line}"))
    return found


def _c_enclosing_call(text: str, pos: int) -> tuple[str, int] | None:
    """(callee, argument index) of the call whose argument list holds ``pos`` within its statement,
    or None (a table, a return, an assignment)."""
    depth, commas = 0, 0
    for i in range(pos - 1, -1, -1):
        char = text[i]
        if char in ";{}" and depth == 0:
            return None
        if char == "," and depth == 0:
            commas += 1
        elif char == ")":
            depth += 1
        elif char == "(":
            if depth == 0:
                callee = re.search(r"(\w+)\s*$", text[:i])
                return (callee[1], commas) if callee else None
            depth -= 1
    return None


# --- the simulator --------------------------------------------------------------------------------


def _callee(call: ast.Call) -> str | None:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _py_template(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = [v.value if isinstance(v, ast.Constant) else HOLE for v in node.values]
        return re.sub(f"{HOLE}+", HOLE, "".join(str(p) for p in parts))
    return None


def _py_names(node: ast.AST) -> set[str]:
    """Names in ``node``, less those used as an object (``c.gpu`` gives nothing)."""
    objects = {id(n.value) for n in ast.walk(node) if isinstance(n, ast.Attribute)}
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and id(n) not in objects}


def _py_keyed(trees: dict[str, ast.Module]) -> dict[str, Positions]:
    """Look-ups, and the functions that pass a parameter on to one (through local assignments)."""
    keyed = dict(PY_LOOKUPS)
    functions = [f for tree in trees.values() for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)]
    grown = True
    while grown:
        grown = False
        for function in functions:
            if function.name in keyed:
                continue
            names: set[str] = set()
            for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
                for i, arg in enumerate(call.args):
                    if _is_key_arg(keyed.get(_callee(call) or ""), i):
                        names |= _py_names(arg)
            assigns = [n for n in ast.walk(function) if isinstance(n, ast.Assign)]
            for _ in assigns:
                for assign in assigns:
                    if any(isinstance(t, ast.Name) and t.id in names for t in assign.targets):
                        names |= _py_names(assign.value)
            params = [a.arg for a in function.args.args if a.arg != "self"]
            positions = frozenset(i for i, param in enumerate(params) if param in names)
            if positions:
                keyed[function.name] = (positions, None)
                grown = True
    return keyed


def _py_stands_for_key(node: ast.AST, parents: dict[ast.AST, ast.AST], keyed: dict[str, Positions]) -> bool:
    """Whether a string stands where a key goes: a key argument, a table, an assignment, a return
    (not a comparison, an index, a keyword argument, a docstring or another function's argument)."""
    child, parent = node, parents.get(node)
    while parent is not None:
        if isinstance(parent, ast.Compare | ast.Subscript | ast.keyword | ast.Expr):
            return False  # a comparison, an index, a keyword argument, a docstring
        if isinstance(parent, ast.Dict):
            return child in parent.values
        if isinstance(parent, ast.BinOp) and not isinstance(parent.op, ast.Add):
            return False
        if isinstance(parent, ast.Call):
            index = next((i for i, arg in enumerate(parent.args) if arg is child), -1)
            return _is_key_arg(keyed.get(_callee(parent) or ""), index)
        if isinstance(parent, ast.Tuple | ast.List | ast.Set | ast.DictComp | ast.ListComp | ast.stmt):
            return True
        child, parent = parent, parents.get(parent)
    return True


def py_sources() -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(PY_DIR.glob("*.py"))}


def py_literals(sources: dict[str, str]) -> list[Literal]:
    """The key literals of the simulator's ``sources`` (file name -> text)."""
    trees = {name: ast.parse(source) for name, source in sources.items()}
    keyed = _py_keyed(trees)
    found = []
    for name, tree in trees.items():
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.expr) or isinstance(parents.get(node), ast.JoinedStr | ast.FormattedValue):
                continue  # not an expression, or a part of an f-string or its format spec
            template = _py_template(node)
            if template is None or not _SHAPE.match(template) or _relative(template) in ("", HOLE):
                continue
            if _py_stands_for_key(node, parents, keyed):
                found.append(Literal(_relative(template), f"src/gpu_exporter/simulate/{name}:{node.lineno}"))
    return found


# --- spelling documented keys with a fake's literals ------------------------------------------------


def reading(fake: str, literals: list[Literal], keys: list[DocKey]) -> Reading:
    patterns = sorted({lit.pattern for lit in literals})

    @cache
    def spell(text: str) -> frozenset[str] | None:
        """The literals used by every way of spelling ``text``, or None when there is none."""
        used: set[str] = set()
        ok = False
        for pattern in patterns:
            got = fit(pattern, text)
            if got is None and pattern.startswith(HOLE):  # a leading hole may be the empty gpuN. scope
                got = fit(pattern[1:], text)
            if got is not None:
                ok = True
                used |= got | {pattern}
        return frozenset(used) if ok else None

    @cache
    def fit(pattern: str, text: str) -> frozenset[str] | None:
        if not pattern:
            return frozenset() if not text else None
        if pattern[0] != HOLE:
            return fit(pattern[1:], text[1:]) if text and pattern[0] == text[0] else None
        used: set[str] = set()
        ok = False
        for end in range(1, len(text) + 1):
            piece, rest = text[:end], fit(pattern[1:], text[end:])
            if rest is None:
                continue
            filled = frozenset() if piece in ("#", "*") else spell(piece)
            if filled is not None:
                ok = True
                used |= filled | rest
        return frozenset(used) if ok else None

    result = Reading(fake, literals)
    for key in keys:
        used = spell(key.pattern)
        if used is not None:
            result.read.add(key.pattern)
            result.used |= used
    return result


def problems(keys: list[DocKey], readings: list[Reading], values: frozenset[str] = frozenset()) -> list[str]:
    found = []
    for r in readings:
        for key in keys:
            if r.fake in key.fakes and key.pattern not in r.read:
                found.append(
                    f"`{key.spelled}` is documented in {DOC_NAME} but the {r.fake} does not read it: make the "
                    f"{r.fake} read it, mark its cell ({'simulator' if r.fake == C_FAKE else 'C fake'} only) "
                    "if only the other fake does, or delete it from the table if nothing should"
                )
            if r.fake not in key.fakes and key.pattern in r.read:
                found.append(
                    f"`{key.spelled}` is marked ({'/'.join(sorted(key.fakes))} only) in {DOC_NAME} but the {r.fake} "
                    "reads it too: drop the marker, or the read"
                )
        for lit in r.literals:
            if lit.pattern not in r.used and lit.pattern not in values:
                shown = lit.pattern.replace(HOLE, "%s")
                found.append(
                    f"the {r.fake} reads key `{shown}` ({lit.where}) that no key of {DOC_NAME} spells: document "
                    "it in a key table (marked if only this fake reads it), or remove the dead read"
                )
    return found


def _disagreements(doc: str, c: dict[str, str], py: dict[str, str]) -> list[str]:
    keys = documented_keys(doc)
    assert len(keys) > 200, f"the key tables of {DOC_NAME} were not found"
    readings = [reading(C_FAKE, c_literals(c), keys), reading(SIMULATOR, py_literals(py), keys)]
    return problems(keys, readings, documented_values(doc))


def test_scenario_document_and_both_fakes_agree_on_the_keys() -> None:
    found = _disagreements(DOC.read_text(), c_sources(), py_sources())
    assert not found, f"{DOC_NAME} and the fakes disagree:\n" + "\n".join(sorted(set(found)))


def _plant(sources: dict[str, str], name: str, old: str, new: str) -> dict[str, str]:
    assert sources[name].count(old) == 1, f"{name} no longer has {old!r}: plant the drift elsewhere"
    return sources | {name: sources[name].replace(old, new)}


def test_drift_is_caught_and_named() -> None:
    """Drift planted in memory: keys read but undocumented (a look-up, a table entry, a key passed on
    to a helper), a documented key read by neither fake, and a fake-only marker that is wrong."""
    doc, c, py = DOC.read_text(), c_sources(), py_sources()
    c = _plant(c, "device.c", '&value, "temperature.margin"', '&value, "temperature.peak"')
    c = _plant(c, "links.c", '"symbol_errors"},', '"symbol_errors"}, {0, "phantom_errors"},')
    py = _plant(py, "platform.py", '("slotNumber", "platform.slot"),', '("slotNumber", "platform.wraith"),')
    doc = doc.replace("| `energy` |", "| `power.ghost` | nothing |\n| `energy` |", 1)
    doc = doc.replace("| `memory.unrepairable_layout` |", "| `memory.unrepairable_layout` (C fake only) |", 1)
    found = "\n".join(_disagreements(doc, c, py))
    assert "the C fake reads key `temperature.peak` (tests/fakenvml/device.c:" in found, found
    assert "the C fake reads key `phantom_errors` (tests/fakenvml/links.c:" in found, found
    assert "the simulator reads key `platform.wraith` (src/gpu_exporter/simulate/platform.py:" in found, found
    assert f"`temperature.margin` is documented in {DOC_NAME} but the C fake does not read it" in found, found
    assert f"`platform.slot` is documented in {DOC_NAME} but the simulator does not read it" in found, found
    assert "`power.ghost` is documented" in found and "the C fake does not read it" in found, found
    assert "`memory.unrepairable_layout` is marked (C fake only)" in found and "the simulator reads it too" in found
