"""Command line: python -m course info | train | bench | export [--check] | exercises [--check] | execute | download
| nbgrader-setup | student-build (the last two: teachers' tools, course/teach.py)."""
import sys

from .cli_train import OneLineParser, add_arguments, validate


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] in (["nbgrader-setup"], ["student-build"]):  # teachers' tools
        from .teach import main as teach
        return teach(argv)
    p = OneLineParser(prog="python -m course", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help="print the device the kernels run on")
    t = sub.add_parser("train", help="train the MLP (notebook 06's loop) and print the test accuracy")
    add_arguments(t)
    b = sub.add_parser("bench", help="time one epoch of the same model through every implementation (notebook 08)")
    b.add_argument("--quick", action="store_true", help="a tiny run that checks the pipeline (works in the simulator)")
    b.add_argument("--out", default=None, help="write the results as JSON to this file")
    for name, what in (("export", "course/ modules from the notebooks' #| export cells"),
                       ("exercises", "student notebooks in notebooks/exercises/")):
        s = sub.add_parser(name, help=f"regenerate {what}")
        s.add_argument("--check", action="store_true", help="only check they are up to date (exit 1 if not)")
    x = sub.add_parser("execute", help="run notebooks top to bottom and save them with their outputs")
    x.add_argument("notebooks", nargs="*", help="default: every solution notebook")
    x.add_argument("--timeout", type=int, default=1200, help="seconds per cell")
    d = sub.add_parser("download", help="fetch missing dataset files from a public mirror, verified by SHA-256")
    d.add_argument("--dataset", choices=["mnist", "fashion-mnist"], default="mnist")
    d.add_argument("--root", required=True, help="directory to put the four files in")
    d.add_argument("--mirror", default=None, help="base URL (default: the dataset's usual mirror)")
    args = p.parse_args(argv)

    if args.cmd == "train":
        validate(args, t.error)
        from .cli_train import run
        return run(args, t.error)
    if args.cmd == "bench":
        from .bench import run as run_bench  # written with notebook 08
        return run_bench(args, b.error)
    if args.cmd == "info":
        import course
        course.info()
        return 0
    if args.cmd in ("export", "exercises"):
        from . import nbtools
        run = nbtools.export if args.cmd == "export" else nbtools.make_exercises
        stale = run(check=args.check)
        for path in stale:
            print(("out of date: " if args.check else "wrote ") + str(path))
        if args.check and stale:
            print(f"run `python -m course {args.cmd}` and commit the result", file=sys.stderr)
            return 1
        return 0
    if args.cmd == "execute":
        from . import nbtools
        paths = args.notebooks or nbtools.solution_notebooks()
        return 0 if all(nbtools.execute(p, args.timeout) for p in paths) else 1
    if args.cmd == "download":
        from .download import DownloadError, download
        try:
            for path in download(args.root, args.dataset, args.mirror):
                print(f"ok {path}")
        except DownloadError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return 0


if __name__ == "__main__":
    sys.exit(main())
