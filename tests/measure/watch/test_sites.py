"""Where the user built a loader: past the library functions that built it for them, the split they say, and a
loader built from another taking its site; a re-created loader is one loader; an override the script undid."""

from __future__ import annotations

import sys
import types
from typing import Any

from dataprof.measure.watch.sites import TAG, Tag, origin

LIBRARY = "/venv/lib/python3.11/site-packages/fakelib/data.py"
SOURCE = '''
def create_loader(make, is_training=False):
    return make()

def get_eval_dataloader(make):
    return make()

def prepare(dataloader, make):
    return make()

def wrapper(obj, init):
    init(obj)

def wrapped(cls):
    obj = cls.__new__(cls)
    wrapper(obj, cls.__init__)
    return obj

def evaluate(make):
    return get_eval_dataloader(make)

def inner_training_loop(make, is_training=True, eval_on_start=True):
    train_dataloader = create_loader(make, is_training=True)
    evaluated = evaluate(make) if eval_on_start else None
    return train_dataloader, evaluated
'''


class Loader:
    """A loader whose constructor asks where it comes from, as the watch's patched ``__init__`` does."""

    def __init__(self, wrapped: bool = False) -> None:
        self.where = origin(self)
        self.__dict__[TAG] = Tag(self.where)


def library() -> Any:
    module = types.ModuleType("fakelib.data")
    exec(compile(SOURCE, LIBRARY, "exec"), module.__dict__)
    return module


def here() -> int:
    return sys._getframe(1).f_lineno


def test_a_loader_built_by_a_library_function_is_sited_at_the_user_s_call_with_the_split_it_says() -> None:
    lib = library()
    line = here() + 1
    made = lib.create_loader(Loader, is_training=True)
    assert made.where.site.endswith(f"test_sites.py:{line}") and made.where.split == "train"
    assert made.where.built_by == ("fakelib.data:create_loader",)
    assert lib.get_eval_dataloader(Loader).where.split == "val"


def test_a_user_s_own_loader_line_and_a_hook_named_for_its_split() -> None:
    def val_dataloader() -> Loader:  # a Lightning hook: the user's function, named for its split
        return Loader()

    line = here() + 1
    made = Loader()
    assert made.where.site.endswith(f"test_sites.py:{line}") and made.where.split is None
    assert made.where.built_by == () and val_dataloader().where.split == "val"

    def train(loaders: list[Loader]) -> None:  # a user's training function builds both: no split from its name
        loaders.append(Loader())

    built: list[Loader] = []
    train(built)
    assert built[0].where.split is None


def test_a_loader_built_from_another_takes_its_site_and_a_wrapper_of_its_constructor_is_not_a_builder() -> None:
    lib = library()
    original = lib.create_loader(Loader, is_training=True)
    shard = lib.prepare(original, Loader)  # accelerate's prepare: a new loader from the user's
    assert shard.where.site == original.where.site and shard.where.split == "train"
    assert shard.where.built_by == ("fakelib.data:create_loader",)
    line = here() + 1
    wrapped = lib.wrapped(Loader)  # Lightning's wrapper of __init__ holds the loader: no builder
    assert wrapped.where.site.endswith(f"test_sites.py:{line}") and wrapped.where.built_by == ()


def test_a_framework_s_eval_loader_built_inside_its_training_loop_keeps_its_split_and_not_the_train_loader_s() -> None:
    """HF Trainer's shape: ``_inner_training_loop`` holds the train loader, then evaluates (``eval_on_start``):
    the eval loader, built in ``get_eval_dataloader``, is the val split at the user's call, never filed under the
    enclosing frame's train loader."""
    lib = library()
    line = here() + 1
    train, evaluated = lib.inner_training_loop(Loader)
    assert train.where.split == "train" and evaluated.where.split == "val"
    assert evaluated.where.site.endswith(f"test_sites.py:{line}") and train.where.site == evaluated.where.site
    assert evaluated.where.built_by[0] == "fakelib.data:get_eval_dataloader"
    shard = lib.prepare(evaluated, Loader)  # accelerate's prepare of the eval loader: its split, its site
    assert shard.where.split == "val" and shard.where.site == evaluated.where.site


def test_a_user_s_own_folder_named_torch_is_the_user_s(tmp_path: Any) -> None:
    """A frame is torch's only when its file is under the installed torch: the user's ``torch/`` folder (a
    checkout, a package of their own of that name) is where their loader is built."""
    mine = tmp_path / "torch" / "data.py"
    mine.parent.mkdir()
    mine.write_text("def make(cls):\n    return cls()\n")
    module = types.ModuleType("mine")
    exec(compile(mine.read_text(), str(mine), "exec"), module.__dict__)
    made = module.make(Loader)
    assert made.where.site.endswith("torch/data.py:2") and made.where.built_by == ()
