"""What every `python -m course` command shares: a parser whose errors are one line, argument types, safe output."""
import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path


class CommandError(Exception):
    """A command cannot go on; `python -m course` prints the message as one line and exits with code 2."""


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and exit code 2 (no usage dump, no traceback)."""

    def error(self, message):
        print(f"{self.prog}: error: {' '.join(message.split())}", file=sys.stderr)
        sys.exit(2)


_ANNOUNCED = []  # the banner is printed once per process (train --mine asks for the device twice)


def device_ready():
    """Say which device the kernels run on (the simulator's banner, once), or CommandError when none can be used."""
    import course
    if getattr(course, "DEVICE_ERROR", None):
        raise CommandError(course.DEVICE_ERROR)
    if not _ANNOUNCED:
        _ANNOUNCED.append(True)
        course.banner()


def _int(text):
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def positive_int(text):
    """argparse type: an int >= 1."""
    n = _int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def natural_int(text):
    """argparse type: an int >= 0 (a seed)."""
    n = _int(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {n}")
    return n


def bounded_int(high):
    """argparse type: an int from 1 to high."""
    def parse(text):
        n = positive_int(text)
        if n > high:
            raise argparse.ArgumentTypeError(f"must be at most {high:,}, got {n:,}")
        return n
    parse.__name__ = "int"
    return parse


def positive_float(text):
    """argparse type: a finite float > 0."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(x) and x > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return x


def fraction(text):
    """argparse type: a finite number from 0 to 1 (a test accuracy)."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= x <= 1:  # NaN fails too
        raise argparse.ArgumentTypeError(f"must be a test accuracy from 0 to 1, got {text}")
    return x


def directory(text):
    """argparse type: an existing directory."""
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is not a directory")
    return path


def not_a_file(path):
    """Why `path` (followed through links) cannot be replaced by a results file, or None: a device such as
    /dev/null, a fifo, a socket."""
    target = Path(os.path.realpath(path))
    if target.exists() and not target.is_file():
        kind = "a directory" if target.is_dir() else "not a regular file (a device, a pipe or a socket)"
        return f"{path} is {kind}" + (f" (it links to {target})" if target != Path(path).absolute() else "")
    return None


def output_file(text):
    """argparse type: a file that can be written, checked now, before any work."""
    path = Path(text)
    if not text:
        raise argparse.ArgumentTypeError("the file name is empty")
    if not_a_file(path):
        raise argparse.ArgumentTypeError(not_a_file(path))
    target = Path(os.path.realpath(path)) if path.is_symlink() else path  # a link: what it points at is checked
    if not target.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: the directory {target.parent} does not exist")
    writable = os.access(target, os.W_OK) if target.exists() else os.access(target.parent, os.W_OK | os.X_OK)
    if not writable:
        raise argparse.ArgumentTypeError(f"{text} cannot be written (permission denied)")
    return path


def write_json(path, result):
    """Write result as JSON to path atomically (through a link, to the file it names; never in place of a device).
    If that fails, the results go to a file in the temp directory (or, failing that, to stdout): a finished run is
    never lost. Returns 0 if path was written, else 1."""
    text = json.dumps(result, indent=1) + "\n"
    path = Path(path)
    target = Path(os.path.realpath(path))  # a symlink stays a link; the file it names gets the results
    try:
        if not_a_file(path):
            raise OSError(not_a_file(path))
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            mask = os.umask(0)
            os.umask(mask)
            os.chmod(tmp, 0o666 & ~mask)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError as e:
        why = e.strerror or str(e)
        try:
            fd, rescue = tempfile.mkstemp(prefix="course-results-", suffix=".json")
            with os.fdopen(fd, "w") as f:
                f.write(text)
        except OSError:
            print(text, end="")
            print(f"error: could not write {path} ({why}): the results are printed above", file=sys.stderr)
        else:
            print(f"error: could not write {path} ({why}): the results are in {rescue}", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    return 0
