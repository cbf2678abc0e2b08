"""Every choice the command line offers is mapped to what implements it, and nothing implemented is hidden."""

from __future__ import annotations

import click
import pytest

from dataprof import cli
from dataprof.backends import get_backend
from dataprof.decide.gates import SEVERITY_ORDER
from dataprof.decide.search import STRATEGIES, Budget
from dataprof.errors import UsageError
from dataprof.results.settings import FRAMEWORKS, KNOBS, SearchSpace


def choices(command: click.Command, option: str) -> tuple[str, ...]:
    param = next(p for p in command.params if p.name == option)
    assert isinstance(param.type, click.Choice)
    return tuple(param.type.choices)


def test_every_strategy_choice_builds_a_strategy() -> None:
    assert choices(cli.sweep, "strategy") == tuple(STRATEGIES)
    space = SearchSpace(workers=(0, 2))
    for name in choices(cli.sweep, "strategy"):
        strategy = STRATEGIES[name](space, Budget(usable_cpus=2), False, None, None)
        assert strategy.propose([]) is not None  # its first proposal: the baseline


@pytest.mark.parametrize("command", [cli.sweep, cli.inspect])
def test_every_framework_choice_is_a_backend_or_auto(command: click.Command) -> None:
    offered = choices(command, "framework")
    assert offered == ("auto", *FRAMEWORKS) and set(FRAMEWORKS) == set(KNOBS)
    for name in FRAMEWORKS:
        try:
            assert get_backend(name).name == name
        except UsageError as exc:  # a framework that is not installed says how to install it
            assert "pip install" in str(exc)


def test_every_fail_on_choice_is_a_severity() -> None:
    assert set(choices(cli.sweep, "fail_on")) == set(SEVERITY_ORDER) - {"info"}
