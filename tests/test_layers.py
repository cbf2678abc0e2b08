"""The layer map of ARCHITECTURE.md, held: no module imports a layer above it, and no import circle.

Every import counts, at module level or inside a function (lazily), under
TYPE_CHECKING or not: a lazy upward import is still an upward dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "dataprof"

LAYERS: dict[str, tuple[str, ...]] = {
    "data": ("dataprof.errors", "dataprof.machine", "dataprof.units", "dataprof.version", "dataprof.config",
             "dataprof.measured", "dataprof.model", "dataprof.runs",
             "dataprof.inspection", "dataprof.stats"),
    "decisions": ("dataprof.search", "dataprof.recommend", "dataprof.diagnose", "dataprof.checks", "dataprof.gates",
                  "dataprof.compare", "dataprof.decide", "dataprof.verdict"),
    "measurement": ("dataprof.measure", "dataprof.backends", "dataprof.target"),
    "presentation": ("dataprof.render", "dataprof.progress"),
    "orchestration": ("dataprof.options", "dataprof.sweeper", "dataprof.distributed", "dataprof.api"),
    "interface": ("dataprof.cli", "dataprof.cli_options", "dataprof.cli_run", "dataprof.output", "dataprof.__main__",
                  "dataprof"),
}
"""Each layer's modules (a package stands for every module in it)."""

MAY_IMPORT: dict[str, set[str]] = {
    "data": {"data"},
    "decisions": {"data", "decisions"},
    "measurement": {"data", "measurement"},
    "presentation": {"data", "decisions", "presentation"},
    "orchestration": {"data", "decisions", "measurement", "presentation", "orchestration"},
    "interface": {"data", "decisions", "measurement", "presentation", "orchestration", "interface"},
}
"""Decisions and measurement are siblings: neither imports the other, so every decision runs on saved data."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> str:
    best = max(((prefix, layer) for layer, prefixes in LAYERS.items() for prefix in prefixes
                if module == prefix or module.startswith(prefix + ".")), key=lambda item: len(item[0]))
    return best[1]


def imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules ``module`` imports, anywhere in its source."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            names = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known]
            found.update(names or [base])
    return {name for name in found if name in known and name != module}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {module: imports(module, path, known) for module, path in known.items()}


def test_every_module_has_a_layer() -> None:
    for module in modules():
        assert layer_of(module) in MAY_IMPORT, module


def test_no_module_imports_a_layer_above_it() -> None:
    upward = sorted(f"{module} ({layer_of(module)}) imports {target} ({layer_of(target)})"
                    for module, targets in graph().items() for target in targets
                    if layer_of(target) not in MAY_IMPORT[layer_of(module)])
    assert upward == []


def test_no_import_circle() -> None:
    edges = graph()
    circles: list[list[str]] = []
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(edges[module]):
            if state.get(target) == 1:
                circles.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module)
    assert circles == []


@pytest.mark.parametrize(("source", "expected"), [
    ("from dataprof.render.html import summary_fragment\n", {"dataprof.render.html"}),
    ("def f():\n    from dataprof import cli\n", {"dataprof.cli"}),
    ("from ..render import console\n", {"dataprof.render.console"}),
    ("import dataprof.search\nfrom dataprof.model import Report\n", {"dataprof.search", "dataprof.model"}),
])
def test_the_parser_sees_every_form_of_import(tmp_path: Path, source: str, expected: set[str]) -> None:
    fake = tmp_path / "example.py"
    fake.write_text(source)
    assert imports("dataprof.measure.example", fake, modules()) == expected
