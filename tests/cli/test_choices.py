"""Every choice the command line offers is mapped to what implements it, and nothing implemented is hidden."""

from __future__ import annotations

import click
import pytest

from dataprof.backends import get_backend
from dataprof.cli.inspect import inspect
from dataprof.cli.sweep import sweep
from dataprof.decide.search import STRATEGIES, Budget
from dataprof.errors import UsageError
from dataprof.results.knobs import LoaderConfig
from dataprof.results.registry import FRAMEWORKS
from dataprof.results.space import SearchSpace


def choices(command: click.Command, option: str) -> tuple[str, ...]:
    param = next(p for p in command.params if p.name == option)
    assert isinstance(param.type, click.Choice)
    return tuple(param.type.choices)


def test_every_strategy_choice_builds_a_strategy_that_measures_the_baseline_first() -> None:
    assert choices(sweep, "strategy") == ("adaptive", "grid")
    space = SearchSpace(workers=(0, 2))
    for name in choices(sweep, "strategy"):
        first = STRATEGIES[name](space, Budget(usable_cpus=2), False, None, None).propose([])
        assert first is not None and first.config == LoaderConfig(0), name


@pytest.mark.parametrize("command", [sweep, inspect])
def test_every_framework_choice_is_a_backend_or_auto(command: click.Command) -> None:
    assert choices(command, "framework") == ("auto", "torch", "paddle")
    for name in FRAMEWORKS:
        try:
            assert get_backend(name).name == name
        except UsageError as exc:  # a framework that is not installed says how to install it
            assert "pip install" in str(exc)


def test_fail_on_offers_the_severities_a_finding_can_fail_a_gate_at() -> None:
    assert choices(sweep, "fail_on") == ("warning", "critical")
