"""The house rules a newcomer relies on, held: every public definition says what it means, no function or
module grows past what one can read at once."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from dataprof.results.vocabulary import (
    CacheMode,
    DatasetKind,
    FindingId,
    Framework,
    Severity,
    StartMethod,
    TrialStatus,
    WorkerKind,
)
from tests.conftest import parsed

PACKAGE = Path(__file__).resolve().parent.parent / "dataprof"
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 350
"""A module past this is split by noun (what it holds), not by cutting functions into pieces."""


@functools.cache
def sources() -> list[tuple[Path, ast.Module, int]]:
    """Every module of the package, parsed once for all the rules."""
    return [(path, parsed(path), len(path.read_text().splitlines()))
            for path in sorted(PACKAGE.rglob("*.py"))]


def public(body: list[ast.stmt], prefix: str = "") -> list[tuple[str, ast.AST]]:
    """Public functions and classes, and the public methods of classes (private ones' included)."""
    found: list[tuple[str, ast.AST]] = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if not node.name.startswith("_"):
                found.append((prefix + node.name, node))
            if isinstance(node, ast.ClassDef):
                found += public(node.body, f"{prefix}{node.name}.")
    return found


def test_every_public_definition_has_a_docstring() -> None:
    missing = [f"{path.relative_to(PACKAGE.parent)}: {name}" for path, tree, _ in sources()
               for name, node in public(tree.body) if ast.get_docstring(node) is None]  # type: ignore[arg-type]
    assert missing == []


def test_no_function_is_longer_than_a_screen() -> None:
    long = [f"{path.relative_to(PACKAGE.parent)}: {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path, tree, _ in sources() for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == []


def test_no_module_is_longer_than_a_sitting() -> None:
    large = [f"{path.relative_to(PACKAGE.parent)} ({lines} lines)" for path, _, lines in sources()
             if lines > MAX_MODULE_LINES]
    assert large == []


WORDS = {word.value for word in (*Severity, *TrialStatus, *WorkerKind, *CacheMode, *StartMethod, *DatasetKind)} \
    - {"auto"}
"""The vocabulary's words, each compared only as its enum member. ``auto`` is also the word of ``--device``,
``--framework`` and ``--workers``: it is left out, and ``CacheMode.AUTO`` is compared as a member by custom."""
ID_HOLDERS = {"id", "primary", "verdict"}


def _literals(node: ast.expr) -> list[str]:
    elements = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)]


def _holds_an_id(node: ast.expr) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
    return name in ID_HOLDERS


def test_no_word_of_the_vocabulary_is_compared_as_a_string_literal() -> None:
    """``status == "ok"`` passes a typo silently; ``status == TrialStatus.OK`` cannot. The same for worker kinds,
    cache modes, start methods, dataset kinds and frameworks (a framework's name is the backends' business:
    there, it is the name of a module too), and for finding ids."""
    ids = {word.value for word in FindingId}
    found = []
    for path, tree, _ in sources():
        words = WORDS if path.parent.name == "backends" else WORDS | {word.value for word in Framework}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            literals = [word for operand in operands for word in _literals(operand)]
            if any(word in words for word in literals) or \
                    (any(word in ids for word in literals) and any(_holds_an_id(operand) for operand in operands)):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
