"""`python -m course train`: the training loop of notebook 06 from the command line."""
import argparse
import json
import math
import sys
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")  # where Debian's dataset-fashion-mnist puts it
QUICK_TRAIN, QUICK_TEST = 16384, 2000  # --quick: the first images of each set


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and exit code 2 (no usage dump, no traceback)."""

    def error(self, message):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def add_arguments(p):
    p.add_argument("--dataset", choices=["mnist", "fashion-mnist"], default="mnist")
    p.add_argument("--data-dir", type=Path, default=None,
                   help="directory with the four IDX files (default: the bundled MNIST, or Debian's Fashion-MNIST)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--hidden", type=int, default=128, help="hidden units")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: 0.1 sgd, 0.05 momentum, 1e-3 adam)")
    p.add_argument("--optimizer", choices=["sgd", "momentum", "adam"], default="sgd")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true",
                   help=f"the first {QUICK_TRAIN} training and {QUICK_TEST} test images; in the simulator 7x7-pooled images, "
                        "at most 16 hidden units, the kernels for 2 steps, then notebook 06's NumPy twin on every "
                        "training image: checks the pipeline in under a minute and still learns")
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON to this file")
    p.add_argument("--mine", action="store_true", help="run your passing exercise solutions (course.mine) wherever "
                   "they exist, the course's kernels elsewhere; prints which are yours")


def validate(args, error):
    """Call error(message) for arguments that make no sense, before any work starts."""
    for name in ("epochs", "hidden", "batch_size"):
        if getattr(args, name) < 1:
            error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.lr is not None and not (math.isfinite(args.lr) and args.lr > 0):
        error(f"--lr must be a positive number, got {args.lr}")
    if args.data_dir is not None and not args.data_dir.is_dir():
        error(f"--data-dir {args.data_dir} is not a directory")
    if args.out is not None and not args.out.parent.is_dir():
        error(f"--out {args.out}: the directory {args.out.parent} does not exist")


def run(args, error):
    """Load the data, train, print per-epoch metrics and `test accuracy: 0.xxxx`, write JSON if asked."""
    import numpy as np

    import course
    from course.data import IDXError, load_mnist
    from course.device import describe
    from course.train import fit, fit_sim, pool
    from course.update import Diverged

    mine = None
    if args.mine:  # before loading: the IDX header parser is a piece too
        from course.mine import trainer_keys, use_mine
        mine = {k: "yours" if fn is not None else why
                for k, (fn, why) in use_mine(trainer_keys(args.optimizer), label="--mine").items()}
    lr = args.lr if args.lr is not None else {"sgd": 0.1, "momentum": 0.05, "adam": 1e-3}[args.optimizer]
    root = args.data_dir
    if root is None and args.dataset == "fashion-mnist":
        root = FASHION_DIR
        if not root.is_dir():
            error(f"Fashion-MNIST not found in {root}: `apt install dataset-fashion-mnist`, or "
                  "`python -m course download --dataset fashion-mnist --root DIR` and --data-dir DIR")
    try:
        X_train, y_train, X_test, y_test = load_mnist(root)
    except (FileNotFoundError, IDXError) as e:
        error(str(e))
    hidden, batch_size, train = args.hidden, args.batch_size, fit
    if args.quick:
        X_full, y_full = X_train, y_train
        X_train, y_train = X_train[:QUICK_TRAIN], y_train[:QUICK_TRAIN]
        X_test, y_test = X_test[:QUICK_TEST], y_test[:QUICK_TEST]
        if course.SIMULATOR:  # a kernel step takes seconds there: 2 on the kernels, then the NumPy twin (checked)
            X_train, y_train, X_test = pool(X_full, 4), y_full, pool(X_test, 4)   # the twin takes every image
            hidden, batch_size = min(hidden, 16), min(batch_size, 32)
            train = partial(fit_sim, kernel_steps=2)
        print(f"--quick: {len(X_train)} training and {len(X_test)} test images of {X_train.shape[1]} pixels, "
              f"hidden {hidden}, batch size {batch_size}")
    if batch_size > len(X_train):
        error(f"--batch-size {batch_size} is larger than the {len(X_train)} training images")
    device = describe(course.SIMULATOR)
    print(f"{args.dataset}: {len(X_train):,} training / {len(X_test):,} test images on {device['name']}; "
          f"{X_train.shape[1]}-{hidden}-10, {args.optimizer} lr={lr:g}, batch size {batch_size}, {args.epochs} epochs")
    try:
        hist = train(X_train, y_train, X_test, y_test, hidden=hidden, epochs=args.epochs, batch_size=batch_size,
                   lr=lr, optimizer=args.optimizer, seed=args.seed, log_every=10 if args.quick else 50)
    except Diverged as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    last = hist["epoch"][-1]
    print(f"test accuracy: {last['test_acc']:.4f}")
    if args.out is not None:
        result = dict(date=datetime.now(timezone.utc).isoformat(timespec="seconds"), device=device,
                      dataset=args.dataset, quick=args.quick, hidden=hidden, batch_size=batch_size, lr=lr,
                      optimizer=args.optimizer, seed=args.seed, epochs=hist["epoch"],
                      test_accuracy=last["test_acc"], test_loss=last["test_loss"],
                      seconds_per_epoch=float(np.median([e["seconds"] for e in hist["epoch"]])),
                      loss_curve=dict(step=hist["step"], loss=hist["loss"]), mine=mine)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0
