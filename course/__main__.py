"""Command line: python -m course info | doctor | train | bench | race | export [--check] | exercises [--check] | execute | download
| nbgrader-setup | student-build (the last two: teachers' tools, course/tools/teach.py)."""
import os
import sys

from .tools import cli_train
from .tools.cli import CommandError, OneLineParser, bounded_int, device_ready, fraction, output_file, positive_int

COMMANDS = "info, doctor, train, bench, race, export, exercises, execute, download, nbgrader-setup, student-build"


def run_info(args):
    device_ready()
    import course
    course.info()
    return 0


def run_doctor(args):
    from .runtime.doctor import main as doctor
    return doctor()


def run_bench(args):
    device_ready()
    from .tools.bench import run  # written with notebooks 08-11

    def error(message):
        raise CommandError(message)
    return run(args, error)


def run_race(args):
    from .tools.race import needs_gpu, run  # written with notebook 14
    if needs_gpu(args):  # before the device's banner: one line
        raise CommandError(needs_gpu(args))
    device_ready()

    def error(message):
        raise CommandError(message)
    return run(args, error)


def run_generate(args):
    from .tools import nbtools
    try:
        stale = (nbtools.export(check=args.check) if args.cmd == "export" else
                 nbtools.make_exercises(check=args.check, force=args.force))
    except ValueError as e:  # a notebook that is not JSON, a student's edited copy, two cells of one exercise
        raise CommandError(str(e)) from None
    for path in stale:
        print(("out of date: " if args.check else "wrote ") + str(path))
    if args.check and stale:
        print(f"run `python -m course {args.cmd}` and commit the result", file=sys.stderr)
        return 1
    return 0


def run_execute(args):
    from .tools import nbtools
    paths = args.notebooks or nbtools.solution_notebooks()
    for path in paths:  # every file is checked before the first notebook runs
        problem = nbtools.unreadable(path)
        if problem:
            raise CommandError(problem)
    return 0 if all([nbtools.execute(p, args.timeout) for p in paths]) else 1


def run_download(args):
    from .tools.download import DownloadError, download
    try:
        for path in download(args.root, args.dataset, args.mirror, deadline=args.deadline):
            print(f"ok {path}")
    except DownloadError as e:
        raise CommandError(str(e)) from None
    return 0


def parser():
    p = OneLineParser(prog="python -m course", description=__doc__)
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=OneLineParser)
    sub.add_parser("info", help="print the device the kernels run on").set_defaults(run=run_info)
    sub.add_parser("doctor", help="check Python, the packages, the driver and the GPU: one line with its fix per "
                                  "problem, exit code 1 if there is any").set_defaults(run=run_doctor)
    cli_train.add_parser(sub)
    b = sub.add_parser("bench", help="time one epoch of the same model through every implementation (notebooks 08-14)")
    b.add_argument("--quick", action="store_true", help="a tiny run that checks the pipeline (works in the simulator)")
    b.add_argument("--out", type=output_file, default=None, help="write the results as JSON to this file")
    b.set_defaults(run=run_bench)
    from .tools import race
    r = sub.add_parser("race", help="time to a test accuracy: the course's fastest loop against PyTorch's, each "
                                    "after the same sweep (notebook 14)")
    r.add_argument("--quick", action="store_true", help="a tiny run that checks the pipeline (works in the simulator)")
    r.add_argument("--target", type=fraction, default=race.TARGET, help=f"test accuracy to reach (default {race.TARGET})")
    r.add_argument("--seeds", type=bounded_int(race.MAX_SEEDS), default=race.SEEDS, help=f"seeds of each final row (default {race.SEEDS})")
    r.add_argument("--out", type=output_file, default=None, help="write the results as JSON to this file")
    r.set_defaults(run=run_race)
    for name, what in (("export", "course/ modules from the notebooks' #| export cells"),
                       ("exercises", "student notebooks in notebooks/exercises/")):
        s = sub.add_parser(name, help=f"regenerate {what}")
        s.add_argument("--check", action="store_true", help="only check they are up to date (exit 1 if not)")
        if name == "exercises":
            s.add_argument("--force", action="store_true", help="replace student copies that were edited since this "
                           "command wrote them, keeping each in notebooks/exercises/backup-DATE-TIME/")
        s.set_defaults(run=run_generate)
    x = sub.add_parser("execute", help="run notebooks top to bottom and save them with their outputs "
                                       "(a notebook with a failing cell is left as it was)")
    x.add_argument("notebooks", nargs="*", help="default: every solution notebook")
    x.add_argument("--timeout", type=positive_int, default=1200, help="seconds per cell, at least 1 (default 1200)")
    x.set_defaults(run=run_execute)
    d = sub.add_parser("download", help="fetch missing dataset files from a public mirror, verified by SHA-256")
    d.add_argument("--dataset", choices=["mnist", "fashion-mnist"], default="mnist")
    d.add_argument("--root", required=True, help="directory to put the four files in")
    d.add_argument("--mirror", default=None, help="base URL, http:// or https:// (default: the dataset's usual mirror)")
    d.add_argument("--deadline", type=positive_int, default=600, help="seconds allowed for each file (default 600)")
    d.set_defaults(run=run_download)
    return p


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] in (["nbgrader-setup"], ["student-build"]):  # teachers' tools
        from .tools.teach import main as teach
        return teach(argv)
    p = parser()
    args = p.parse_args(argv)
    if getattr(args, "run", None) is None:
        p.error(f"choose a command: {COMMANDS} (python -m course COMMAND --help for its options)")
    prog = f"{p.prog} {args.cmd}"
    try:
        return args.run(args)
    except CommandError as e:
        print(f"{prog}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        import threading
        threading.excepthook = lambda args: None  # the simulator's threads of the interrupted launch: not news
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print(f"{prog}: error: out of memory: try a smaller --hidden or --batch-size", file=sys.stderr)
        return 2
    except Exception as e:  # a GPU that cannot be used (COURSE_DEVICE=gpu without one) or out of GPU memory
        line = cuda_problem(e)
        if line is None:
            raise
        print(f"{prog}: error: {line}", file=sys.stderr)
        return 2


def cuda_problem(e):
    """One line for an error from the CUDA driver (no usable GPU, out of device memory), or None."""
    if "numba" not in type(e).__module__:
        return None
    name, first = type(e).__name__, " ".join(str(e).split()).rstrip(" :")
    if name == "CudaSupportError":
        return f"no usable CUDA GPU ({first}): unset COURSE_DEVICE, or set COURSE_DEVICE=sim for the simulator"
    if "OUT_OF_MEMORY" in str(e):
        return "out of GPU memory: try a smaller --hidden or --batch-size"
    if name in ("CudaAPIError", "CudaDriverError"):
        return f"CUDA error: {first}"
    return None


if __name__ == "__main__":
    code = main()
    if code == 130:  # do not wait for the simulator's threads of an interrupted launch (one may wait at a barrier)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
