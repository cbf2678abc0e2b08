from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from dataprof.backends.common import check_batchable as check
from dataprof.backends.common import footprint
from dataprof.backends.target import build_dataset, load_object, parse_kwarg, split_target
from dataprof.backends.torch_backend import TorchBackend
from dataprof.errors import TargetError, UsageError
from tests.conftest import FIXTURES

TORCH = TorchBackend()


def dataset_kind(dataset: object) -> str:
    return TORCH.dataset_kind(dataset)


def check_batchable(dataset: object, collate: Any, batch_size: int) -> dict[str, Any]:
    return check(dataset, dataset_kind(dataset), collate or TORCH.default_collate(), batch_size)

DATASETS = FIXTURES / "datasets.py"


def load(attr: str, **kwargs: object) -> object:
    name = f"{DATASETS}:{attr}"
    return build_dataset(load_object(name), kwargs, name)


def test_kwarg_values_are_literals_or_strings() -> None:
    assert parse_kwarg("n=3") == ("n", 3)
    assert parse_kwarg("sizes=[1, 2]") == ("sizes", [1, 2])
    assert parse_kwarg("root=/data/train") == ("root", "/data/train")
    assert parse_kwarg("flag=None") == ("flag", None)
    with pytest.raises(UsageError, match="KEY=VALUE"):
        parse_kwarg("novalue")


def test_split_target_needs_a_colon() -> None:
    assert split_target("a.b:C") == ("a.b", "C")
    with pytest.raises(UsageError, match="MODULE:ATTR"):
        split_target("a.b.C")


def test_class_factory_and_instance() -> None:
    assert len(load("Tiny", length=10)) == 10  # type: ignore[arg-type]
    made = load("make_tiny", length=7, scale=2.0)
    assert len(made) == 7 and made.scale == 2.0  # type: ignore[arg-type, attr-defined]
    assert len(load("tiny_instance")) == 128  # type: ignore[arg-type]


def test_module_path_uses_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "data.py").write_text("class DS:\n    def __len__(self): return 3\n    def __getitem__(self, i): return i\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    obj = load_object("mypkg.data:DS", cwd=str(tmp_path))
    assert len(build_dataset(obj, {}, "mypkg.data:DS")) == 3


def test_iterable_is_recognised() -> None:
    assert dataset_kind(load("Stream")) == "iterable"
    assert dataset_kind(load("Tiny")) == "map"


@pytest.mark.parametrize("target,message", [
    ("no_such_module_xyz:DS", "module 'no_such_module_xyz' not found"),
    ("/nonexistent/file.py:DS", "target file not found"),
    (f"{DATASETS}:Missing", "has no attribute 'Missing'; it defines: BadInit"),
])
def test_load_errors_name_the_problem(target: str, message: str) -> None:
    with pytest.raises(TargetError, match=message):
        load_object(target)


def test_import_error_inside_user_module_is_not_called_missing(tmp_path: Path) -> None:
    (tmp_path / "needs_dep.py").write_text("import no_such_dependency_abc\n")
    with pytest.raises(TargetError, match=r"importing .*needs_dep.py raised ModuleNotFoundError"):
        load_object(f"{tmp_path / 'needs_dep.py'}:X")


def test_constructor_error_shows_user_exception_and_line() -> None:
    with pytest.raises(TargetError, match=r"BadInit\(\.\.\.\) raised FileNotFoundError: no such directory: "
                                          r"/nonexistent/data \(at .*datasets.py:\d+\)"):
        load("BadInit")


def test_not_a_dataset() -> None:
    with pytest.raises(TargetError, match="is a int, not a Dataset"):
        load("NOT_A_DATASET")


def test_bad_kwargs_are_reported() -> None:
    with pytest.raises(TargetError, match="does not accept these --arg values"):
        load("Tiny", colour="red")


def test_empty_dataset() -> None:
    with pytest.raises(TargetError, match="the dataset is empty"):
        check_batchable(load("Empty"), None, 8)


def test_unbatchable_samples_say_which_shapes() -> None:
    with pytest.raises(TargetError, match=r"cannot be batched.*Tensor\[3\] float32 vs Tensor\[4\] float32"):
        check_batchable(load("Ragged"), None, 8)


def test_getitem_error_names_the_index() -> None:
    with pytest.raises(TargetError, match=r"dataset\[3\] raised ValueError: corrupt record 3 \(at .*datasets.py"):
        check_batchable(load("RaisesAt", bad_index=3), None, 8)


def test_custom_collate_makes_ragged_batchable() -> None:
    batch = check_batchable(load("Ragged"), lambda samples: samples, 8)
    assert batch["sample"].startswith("Tensor[")
    # A list of 8 tensors: 8 shared-memory handles and the list itself.
    assert (batch["batch_samples"], batch["batch_tensors"], batch["batch_objects"]) == (8, 8, 1)


def test_batch_footprint_counts_arrays_and_python_objects() -> None:
    import numpy as np
    import torch

    weight = footprint({"image": torch.zeros(4, 3, dtype=torch.uint8), "ids": [1, 2, 3], "raw": np.zeros(5),
                        "name": "abcd"})
    assert weight == {"bytes": 12 + 40 + 4 + len("image") + len("ids") + len("raw") + len("name"),
                      "tensors": 2, "objects": 1 + 4 + 1 + 3 + 1}


def test_a_users_checkout_under_a_directory_named_dataprof_is_the_users(tmp_path: Path) -> None:
    from dataprof.backends.target import user_frame

    home = tmp_path / "dataprof" / "src"
    home.mkdir(parents=True)
    (home / "mydata.py").write_text("def load():\n    raise ValueError('bad shard')\n")
    sys.path.insert(0, str(home))
    try:
        import mydata  # type: ignore[import-not-found]

        try:
            mydata.load()
        except ValueError as exc:
            assert user_frame(exc) == f"{home / 'mydata.py'}:2"
    finally:
        sys.path.remove(str(home))
        sys.modules.pop("mydata", None)
