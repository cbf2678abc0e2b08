"""The vocabulary of the documents: every word is mapped wherever a mapping of its kind lives, documented, and
read back strictly."""

from __future__ import annotations

import json

import pytest

from dataprof.decide.ranks import GRAVITY
from dataprof.errors import UsageError
from dataprof.render.view import SEVERITY_STYLE
from dataprof.results.load import load_document
from dataprof.results.vocabulary import TITLES, FindingId, Severity, TrialStatus
from tests.conftest import DATA, ROOT

PAGES = ("diagnosis.md", "run.md", "inspect.md")


def test_every_finding_id_has_one_title() -> None:
    assert set(TITLES) == set(FindingId)
    assert all(title and title == title.strip() for title in TITLES.values())


def test_every_finding_id_is_documented() -> None:
    docs = "".join((ROOT / "docs" / page).read_text() for page in PAGES)
    assert [word.value for word in FindingId if f"`{word.value}`" not in docs] == []


def test_every_severity_has_a_style_and_an_order() -> None:
    assert set(SEVERITY_STYLE) == set(Severity)
    assert [s.rank for s in (Severity.INFO, Severity.WARNING, Severity.CRITICAL)] == [0, 1, 2]


def test_every_status_has_a_gravity_for_the_ranks_to_agree_on() -> None:
    assert set(GRAVITY) == set(TrialStatus) and GRAVITY[TrialStatus.OK] == max(GRAVITY.values())


def test_a_word_is_its_string_in_json_and_in_text() -> None:
    assert json.dumps({"severity": Severity.CRITICAL}) == '{"severity": "critical"}'
    assert f"{TrialStatus.OOM}: killed" == "oom: killed" and {"oom": 1}[TrialStatus.OOM] == 1


@pytest.mark.parametrize(("key", "word"), [("severity", "severe"), ("id", "io-bound")])
def test_a_document_with_an_unknown_word_is_malformed(tmp_path, key: str, word: str) -> None:  # type: ignore[no-untyped-def]
    data = json.loads((DATA / "sweep" / "io_bound.json").read_text())
    data["diagnosis"]["findings"][0][key] = word
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    with pytest.raises(UsageError, match="malformed dataprof result"):
        load_document(path)
