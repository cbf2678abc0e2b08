"""Which function built a loader: whether its script is safe to import is read as text, in the training's process,
without parsing it (a parse there leaves freed nodes in the heap every forked worker then copies)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from dataprof.measure.watch.factory import _guarded


@pytest.mark.parametrize(("source", "guarded"), [
    ("def main():\n    pass\n\n\nif __name__ == \"__main__\":\n    main()\n", True),
    ("def main():\n    pass\n\nif __name__=='__main__':  # the training\n    main()\n", True),
    ("import torch\nfor epoch in range(3):\n    pass\n", False),
    ("def main():\n    if __name__ == \"__main__\":\n        pass\n", False),  # not at the top level
])
def test_a_script_is_guarded_when_a_top_level_if_tests_its_name(tmp_path: Path, source: str, guarded: bool,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "train.py"
    script.write_text(source)

    def no_parse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the script was parsed in the training's process")

    monkeypatch.setattr(ast, "parse", no_parse)
    assert _guarded(str(script)) is guarded
    assert _guarded(str(tmp_path / "missing.py")) is False
