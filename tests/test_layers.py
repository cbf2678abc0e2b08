"""The layer map of ARCHITECTURE.md, held: no module imports a layer above it, and no import circle.

Every import counts, at module level or inside a function (lazily), under
TYPE_CHECKING or not: a lazy upward import is still an upward dependency.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from tests.conftest import parsed

PACKAGE = Path(__file__).resolve().parent.parent / "dataprof"

LAYERS: dict[str, tuple[str, ...]] = {
    "base": ("dataprof.errors", "dataprof.version"),
    "results": ("dataprof.results",),
    "decide": ("dataprof.decide",),
    "backends": ("dataprof.backends",),
    "measure": ("dataprof.measure",),
    "render": ("dataprof.render",),
    "orchestration": ("dataprof.sweeper", "dataprof.distributed", "dataprof.tuner"),
    "api": ("dataprof", "dataprof.api"),
    "cli": ("dataprof.cli", "dataprof.__main__"),
}
"""Each layer's folders (a package stands for every module in it) and the few modules directly in ``dataprof/``.
A module under none of them has no layer, and fails :func:`test_every_module_has_a_layer`."""

MAY_IMPORT: dict[str, set[str]] = {
    "base": {"base"},
    "results": {"base", "results"},
    "decide": {"base", "results", "decide"},
    "backends": {"base", "results", "backends"},
    "measure": {"base", "results", "backends", "measure"},
    "render": {"base", "results", "decide", "render"},
    "orchestration": {"base", "results", "decide", "backends", "measure", "render", "orchestration"},
    "api": {"base", "results", "decide", "backends", "measure", "render", "orchestration", "api"},
    "cli": {"base", "results", "decide", "backends", "measure", "render", "orchestration", "api", "cli"},
}
"""Decisions and measurement are siblings: neither imports the other, so every decision runs on saved data. The
command line is the top: it reads option text into values (through ``results.text``, which the API uses too) and
calls the API; nothing imports it."""

MAX_TOP_LEVEL_MODULES = 8
"""Modules directly in ``dataprof/``: the face and the orchestration beside it; everything else lives in a room."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> str | None:
    """The layer of ``module``: that of the folder it is in, or its own entry directly in ``dataprof/``."""
    found = [(prefix, layer) for layer, prefixes in LAYERS.items() for prefix in prefixes
             if module == prefix or (prefix != "dataprof" and module.startswith(prefix + "."))]
    return max(found, key=lambda item: len(item[0]))[1] if found else None


def imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules ``module`` imports, anywhere in its source."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(parsed(path)):
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


@functools.cache
def graph() -> dict[str, set[str]]:
    """Each module's imports of the package's modules, read once for all the rules."""
    known = modules()
    return {module: imports(module, path, known) for module, path in known.items()}


def test_every_module_has_a_layer() -> None:
    assert [module for module in modules() if layer_of(module) is None] == []


def test_a_module_outside_the_map_has_no_layer() -> None:
    assert layer_of("dataprof.brand_new_module") is None
    assert layer_of("dataprof.brand_new_room.module") is None
    assert layer_of("dataprof.decide.brand_new_module") == "decide"


def test_few_modules_live_directly_in_the_package() -> None:
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


def test_no_module_imports_a_layer_above_it() -> None:
    upward = sorted(f"{module} ({layer_of(module)}) imports {target} ({layer_of(target)})"
                    for module, targets in graph().items() for target in targets
                    if layer_of(target) not in MAY_IMPORT[layer_of(module) or "base"])
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
    ("from ..render import sweep\n", {"dataprof.render.sweep"}),
    ("import dataprof.decide.search\nfrom dataprof.results.sweep import Report\n",
     {"dataprof.decide.search", "dataprof.results.sweep"}),
])
def test_the_parser_sees_every_form_of_import(tmp_path: Path, source: str, expected: set[str]) -> None:
    fake = tmp_path / "example.py"
    fake.write_text(source)
    assert imports("dataprof.measure.example", fake, modules()) == expected


def test_only_the_command_line_may_import_the_command_line() -> None:
    assert [layer for layer, allowed in MAY_IMPORT.items() if "cli" in allowed] == ["cli"]
    assert "cli" not in MAY_IMPORT["api"]
