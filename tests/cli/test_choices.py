"""Every choice the command line offers is mapped to what implements it, and nothing implemented is hidden."""

from __future__ import annotations

import click
import pytest

from dataprof import cli
from dataprof.backends import get_backend
from dataprof.decide.search import STRATEGIES, Budget
from dataprof.errors import UsageError
from dataprof.results.settings import FRAMEWORKS, LoaderConfig, SearchSpace


def choices(command: click.Command, option: str) -> tuple[str, ...]:
    param = next(p for p in command.params if p.name == option)
    assert isinstance(param.type, click.Choice)
    return tuple(param.type.choices)


def test_every_strategy_choice_builds_a_strategy_that_measures_the_baseline_first() -> None:
    assert choices(cli.sweep, "strategy") == ("adaptive", "grid")
    space = SearchSpace(workers=(0, 2))
    for name in choices(cli.sweep, "strategy"):
        first = STRATEGIES[name](space, Budget(usable_cpus=2), False, None, None).propose([])
        assert first is not None and first.config == LoaderConfig(0), name


@pytest.mark.parametrize("command", [cli.sweep, cli.inspect])
def test_every_framework_choice_is_a_backend_or_auto(command: click.Command) -> None:
    assert choices(command, "framework") == ("auto", "torch", "paddle")
    for name in FRAMEWORKS:
        try:
            assert get_backend(name).name == name
        except UsageError as exc:  # a framework that is not installed says how to install it
            assert "pip install" in str(exc)


def test_fail_on_offers_the_severities_a_finding_can_fail_a_gate_at() -> None:
    assert choices(cli.sweep, "fail_on") == ("warning", "critical")
