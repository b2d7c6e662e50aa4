"""`python -m course train`: the training loop of notebook 06 from the command line."""
import sys
import time
from functools import partial
from datetime import datetime, timezone
from pathlib import Path

from course.tools.cli import (CommandError, bounded_int, device_ready, directory, natural_int, output_file,
                              positive_float)

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")  # where Debian's dataset-fashion-mnist puts it
MAX_HIDDEN = 65536   # 784 x 65,536 float32 weights are 205 MB (x4 with Adam's state and the gradient)
MAX_BATCH = 65536
MAX_EPOCHS = 10000   # more is a typo (1e20), not a run anyone waits for: --epochs above it exits 2
QUICK_TRAIN, QUICK_TEST = 16384, 2000  # --quick: the first images of each set


def add_parser(sub):
    """Register `train` and its options on the subcommands of `python -m course`."""
    p = sub.add_parser("train", help="train the MLP (notebook 06's loop) and print the test accuracy")
    p.add_argument("--dataset", choices=["mnist", "fashion-mnist"], default=None,
                   help="which dataset the files must be (default: mnist, or whatever --data-dir holds)")
    p.add_argument("--data-dir", type=directory, default=None,
                   help="directory with the four IDX files (default: the bundled MNIST, or Debian's Fashion-MNIST)")
    p.add_argument("--epochs", type=bounded_int(MAX_EPOCHS), default=10)
    p.add_argument("--hidden", type=bounded_int(MAX_HIDDEN), default=128, help="hidden units")
    p.add_argument("--batch-size", type=bounded_int(MAX_BATCH), default=64)
    p.add_argument("--lr", type=positive_float, default=None,
                   help="learning rate (default: 0.1 sgd, 0.05 momentum, 1e-3 adam)")
    p.add_argument("--optimizer", choices=["sgd", "momentum", "adam"], default="sgd")
    p.add_argument("--seed", type=natural_int, default=0)
    p.add_argument("--quick", action="store_true",
                   help=f"the first {QUICK_TRAIN} training and {QUICK_TEST} test images; in the simulator alone "
                        "(COURSE_DEVICE=sim) 7x7-pooled images, at most 16 hidden units, the kernels for 2 steps, then "
                        "notebook 06's NumPy twin on every training image: checks the pipeline in under a minute and "
                        "still learns")
    p.add_argument("--out", type=output_file, default=None, help="write the results as JSON to this file")
    p.add_argument("--mine", action="store_true", help="run your passing exercise solutions (course.runtime.mine) wherever "
                   "they exist, the course's kernels elsewhere; prints which are yours")
    p.set_defaults(run=run)
    return p


def load(args):
    """The four arrays and the name of the dataset they are, or CommandError."""
    from course.data import IDXError, identify, load_mnist
    root = args.data_dir
    if root is None and args.dataset == "fashion-mnist":
        root = FASHION_DIR
        if not root.is_dir():
            raise CommandError(f"Fashion-MNIST not found in {root}: `apt install dataset-fashion-mnist`, or "
                               "`python -m course download --dataset fashion-mnist --root DIR` and --data-dir DIR")
    try:
        data = load_mnist(root, dataset=args.dataset or (None if root else "mnist"))
        found = identify(root) if root else "mnist"
    except (FileNotFoundError, IDXError) as e:
        raise CommandError(str(e)) from None
    return data, found or "other (verified by its SHA256SUMS)", root


def closing_note(hist, optimizer, seconds):
    """What trained the network, where, at which sizes, and how long it took (wall clock, compiling included)."""
    from course.runtime.mine import step_pieces, trained
    from course.runtime.timing import label
    return label(f"trained in {seconds:.0f} s") + ": " + trained(hist, "the network", step_pieces(optimizer))


def run(args):
    """Load the data, train, print per-epoch metrics and `test accuracy: 0.xxxx`, write JSON if asked."""
    import numpy as np

    import course

    lr = args.lr if args.lr is not None else {"sgd": 0.1, "momentum": 0.05, "adam": 1e-3}[args.optimizer]
    simulator = course.runs_on() == "sim"  # numba's simulator alone: kernels too slow to train
    mine = None
    if args.mine:  # before loading: the IDX header parser is a piece too
        device_ready()
        from course.runtime.mine import trainer_keys, use_mine
        mine = {k: "yours" if fn is not None else why
                for k, (fn, why) in use_mine(trainer_keys(args.optimizer), label="--mine").items()}
    (X_train, y_train, X_test, y_test), dataset, root = load(args)
    hidden, batch_size, n_train, n_test = args.hidden, args.batch_size, len(X_train), len(X_test)
    if args.quick:
        n_train, n_test = min(QUICK_TRAIN, len(X_train)), min(QUICK_TEST, len(X_test))
        if simulator:  # the NumPy twin takes every training image (below)
            n_train = len(X_train)
            hidden, batch_size = min(hidden, 16), min(batch_size, 32)
    if batch_size > n_train:
        raise CommandError(f"--batch-size {batch_size} is larger than the {n_train} training images")
    if n_test == 0:
        raise CommandError(f"the data in {root or 'data/mnist'} has no test images: there is nothing to evaluate on")
    device_ready()  # every argument is fine: now the device (and numba)
    from course.runtime.device import describe
    from course.train import fit, fit_sim, pool
    from course.update import Diverged

    train = fit
    if args.quick:
        X_train, y_train, X_test, y_test = X_train[:n_train], y_train[:n_train], X_test[:n_test], y_test[:n_test]
        if simulator:  # a kernel step takes seconds there: 2 on the kernels, then the NumPy twin (checked)
            X_train, X_test = pool(X_train, 4), pool(X_test, 4)
            train = partial(fit_sim, kernel_steps=2)
        print(f"--quick: {len(X_train)} training and {len(X_test)} test images of {X_train.shape[1]} pixels, "
              f"hidden {hidden}, batch size {batch_size}")
    device = describe(course.SIMULATOR)
    print(f"{dataset}: {len(X_train):,} training / {len(X_test):,} test images on {device['name']}; "
          f"{X_train.shape[1]}-{hidden}-10, {args.optimizer} lr={lr:g}, batch size {batch_size}, {args.epochs} epochs")
    t0 = time.perf_counter()
    try:
        hist = train(X_train, y_train, X_test, y_test, hidden=hidden, epochs=args.epochs, batch_size=batch_size,
                   lr=lr, optimizer=args.optimizer, seed=args.seed, log_every=10 if args.quick else 50)
    except Diverged as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except AssertionError as e:  # fit_sim: the kernels' first steps differ from the NumPy twin's
        if train is fit:
            raise
        whose = "; --mine: the table above says which kernels were yours" if mine else ""
        print(f"error: {' '.join(str(e).split())}{whose}", file=sys.stderr)
        return 1
    print(closing_note(hist, args.optimizer, time.perf_counter() - t0))
    last = hist["epoch"][-1]
    print(f"test accuracy: {last['test_acc']:.4f}")
    if args.out is None:
        return 0
    from course.tools.cli import write_json
    result = dict(date=datetime.now(timezone.utc).isoformat(timespec="seconds"), device=device,
                  dataset=dataset, data_dir=str(root) if root else None, quick=args.quick, hidden=hidden,
                  batch_size=batch_size, lr=lr, optimizer=args.optimizer, seed=args.seed, epochs=hist["epoch"],
                  test_accuracy=last["test_acc"], test_loss=last["test_loss"],
                  seconds_per_epoch=float(np.median([e["seconds"] for e in hist["epoch"]])),
                  loss_curve=dict(step=hist["step"], loss=hist["loss"]), mine=mine)
    return write_json(args.out, result)
