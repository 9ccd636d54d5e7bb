"""Every logger in the package is named after its module (``logging.getLogger(__name__)``), so the
``logger=`` of a log line says which file wrote it. A hand-written name drifts when a module moves (the
unsupported memo logged as ``gpu_exporter.pipeline.memo`` long after it became ``sampling/memo.py``).
"""

from __future__ import annotations

import ast

from tests.harness import REPO

PACKAGE = REPO / "src" / "gpu_exporter"
#: Modules allowed another argument, and why.
REPLAYS = {
    "logs.py": "a summary of suppressed lines is written under the logger of the lines it counts",
}


def _get_logger_calls(tree: ast.AST) -> list[ast.Call]:
    calls = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name == "getLogger":
            calls.append(node)
    return calls


def misnamed(source: str, relative: str) -> list[str]:
    """``file:line`` of each ``getLogger`` call in ``source`` whose argument is not ``__name__``."""
    found = []
    for call in _get_logger_calls(ast.parse(source)):
        args = [*call.args, *(keyword.value for keyword in call.keywords)]
        if not args:
            continue  # the root logger, which logs.setup configures
        if len(args) == 1 and isinstance(args[0], ast.Name) and args[0].id == "__name__":
            continue
        if relative in REPLAYS and not isinstance(args[0], ast.Constant):
            continue
        found.append(f"{relative}:{call.lineno}: {ast.unparse(call)}")
    return found


def test_every_logger_is_named_after_its_module() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += misnamed(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE)))
    assert found == [], "use logging.getLogger(__name__):\n" + "\n".join(found)


def test_the_check_sees_a_hand_written_name() -> None:
    source = 'import logging\nlog = logging.getLogger("gpu_exporter.pipeline.memo")\n'
    assert misnamed(source, "sampling/memo.py") == [
        "sampling/memo.py:2: logging.getLogger('gpu_exporter.pipeline.memo')"
    ]
    assert misnamed('from logging import getLogger\nlog = getLogger("x")\n', "logs.py") == ["logs.py:2: getLogger('x')"]
    assert misnamed("import logging\nlog = logging.getLogger(__name__)\n", "a.py") == []
