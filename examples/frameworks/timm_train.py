"""A training script whose loaders are built by timm's ``create_loader`` (as timm's ``train.py`` builds them),
over a folder of JPEGs in class sub-directories, with timm's own augmentation, a validation loader, and a
checkpoint each epoch. Nothing in it knows about dataprof.

    pip install timm
    python examples/frameworks/timm_train.py --epochs 2 --workers 2
    dataprof tune examples/frameworks/timm_train.py --epochs 100 --workers 4
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch
from timm.data import create_dataset, create_loader
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from images import DEFAULT_ROOT, generate_jpegs  # noqa: E402
from train import TinyCNN  # noqa: E402

CLASSES = 4


def image_folder(images: int, size: int) -> Path:
    """``images`` JPEGs in ``CLASSES`` class folders (made once), as an ImageNet-style folder."""
    root = DEFAULT_ROOT.parent / f"folder_{images}_{size}"
    for label in range(CLASSES):
        generate_jpegs(root / f"class_{label}", images // CLASSES, size)
    return root


def evaluate(model: nn.Module, loader: Any, loss_fn: nn.Module, when: str) -> None:
    """The evaluation loss under ``no_grad``, its loader's knobs said first."""
    print(f"val loader: num_workers={loader.num_workers} prefetch_factor={loader.prefetch_factor} "
          f"persistent_workers={loader.persistent_workers}", flush=True)
    model.eval()
    with torch.no_grad():
        losses = [loss_fn(model(images), labels).item() for images, labels in loader]
    print(f"Eval: {when} loss {sum(losses) / max(len(losses), 1):.3f}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--val-workers", type=int, default=None, help="the validation loader's (default: --workers)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--size", type=int, default=96)
    parser.add_argument("--input-size", type=int, default=64)
    parser.add_argument("--no-persistent-workers", action="store_true", help="start the workers each epoch")
    parser.add_argument("--eval-first", type=int, default=0, metavar="K",
                        help="evaluate K times before training (a resumed run checking its checkpoint)")
    opts = parser.parse_args()
    root = image_folder(opts.images, opts.size)
    device = torch.device("cpu")
    loader_train = create_loader(create_dataset("", root=str(root), is_training=True),
                                 input_size=(3, opts.input_size, opts.input_size), batch_size=opts.batch_size,
                                 is_training=True, use_prefetcher=False, num_workers=opts.workers, device=device,
                                 persistent_workers=not opts.no_persistent_workers)
    loader_eval = create_loader(create_dataset("", root=str(root), is_training=False),
                                input_size=(3, opts.input_size, opts.input_size), batch_size=opts.batch_size,
                                is_training=False, use_prefetcher=False, device=device,
                                num_workers=opts.workers if opts.val_workers is None else opts.val_workers)
    model = TinyCNN(CLASSES)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(opts.eval_first):
        evaluate(model, loader_eval, loss_fn, "start")
    for epoch in range(opts.epochs):
        model.train()
        started = last = time.perf_counter()
        for index, (images, labels) in enumerate(loader_train):
            loss = loss_fn(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            now = time.perf_counter()
            print(f"Train: {epoch} [{index}/{len(loader_train)}] time {now - last:.4f} loss {loss.item():.3f}",
                  flush=True)
            last = now
        print(f"train epoch {epoch}: {len(loader_train)} steps in {time.perf_counter() - started:.4f} s", flush=True)
        evaluate(model, loader_eval, loss_fn, str(epoch))
        torch.save({"epoch": epoch, "state_dict": model.state_dict()}, "last.pth.tar")
    return 0


if __name__ == "__main__":
    sys.exit(main())
