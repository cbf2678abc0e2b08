"""Where to make tune's edit when a library builds the loader (pure): the library's own argument for each knob
(HF Trainer's ``TrainingArguments``, timm's ``create_loader``, mmengine's dataloader config), found from the
functions that built the loader."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Builder:
    """A library function that builds loaders for its users, and how its users set each knob."""

    function: str
    """``module:qualname`` prefix of the function (in a loader's ``built_by``)."""
    name: str
    """How the answer names it."""
    call: str
    """Where the arguments go: ``{}`` stands for them."""
    arguments: dict[str, str]
    """Each knob's argument there; a knob not here cannot be set through it."""


BUILDERS = (
    Builder("transformers.trainer:Trainer.", "HF Trainer", "TrainingArguments({})",
            {"num_workers": "dataloader_num_workers", "prefetch_factor": "dataloader_prefetch_factor",
             "persistent_workers": "dataloader_persistent_workers", "pin_memory": "dataloader_pin_memory",
             "multiprocessing_context": "dataloader_multiprocessing_context"}),
    Builder("timm.data.loader:create_loader", "timm's create_loader", "create_loader(..., {})",
            {"num_workers": "num_workers", "persistent_workers": "persistent_workers", "pin_memory": "pin_memory"}),
    Builder("mmengine.runner", "mmengine's Runner", "train_dataloader=dict(..., {})",
            {"num_workers": "num_workers", "prefetch_factor": "prefetch_factor",
             "persistent_workers": "persistent_workers", "pin_memory": "pin_memory"}),
)
"""The libraries whose loaders tune says how to set; any other library's loader is named by its function."""


def builder_of(built_by: tuple[str, ...]) -> Builder | None:
    """The known library that built a loader (from its ``built_by``, innermost first); None when none did."""
    for function in built_by:
        for builder in BUILDERS:
            if function.startswith(builder.function):
                return builder
    return None


def edit_through(built_by: tuple[str, ...], changes: dict[str, Any]) -> str | None:
    """The edit that makes ``changes`` through the library that builds the loader: ``TrainingArguments(
    dataloader_num_workers=4)``, with the knobs it has no argument for named; a function of another library
    named; None when the user's own line builds the loader."""
    if not built_by:
        return None
    builder = builder_of(built_by)
    if builder is None:
        return f"the loader is built by {built_by[0]}: set these where you call it, or in the DataLoader it makes"
    settable = {k: v for k, v in changes.items() if k in builder.arguments}
    edit = builder.call.format(", ".join(f"{builder.arguments[k]}={v!r}" for k, v in settable.items()))
    unsettable = sorted(set(changes) - set(settable))
    return f"through {builder.name}: {edit}" + (
        f"; {', '.join(unsettable)}: no argument of {builder.name}" if unsettable else "")
