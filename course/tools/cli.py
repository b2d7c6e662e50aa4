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


def device_ready():
    """Say which device the kernels run on (the simulator's banner), or CommandError when none can be used."""
    import course
    if getattr(course, "DEVICE_ERROR", None):
        raise CommandError(course.DEVICE_ERROR)
    if not _said:
        course.banner()
        _said.append(True)


_said = []  # the banner is printed once per command (train --mine asks twice)


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


def directory(text):
    """argparse type: an existing directory."""
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is not a directory")
    return path


def output_file(text):
    """argparse type: a file that can be written, checked now, before any work."""
    path = Path(text)
    if not text:
        raise argparse.ArgumentTypeError("the file name is empty")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: the directory {path.parent} does not exist")
    writable = os.access(path, os.W_OK) if path.exists() else os.access(path.parent, os.W_OK | os.X_OK)
    if not writable:
        raise argparse.ArgumentTypeError(f"{text} cannot be written (permission denied)")
    return path


def write_json(path, result):
    """Write result as JSON to path atomically. If that fails, the results go to a file in the temp directory
    (or, failing that, to stdout): a finished run is never lost. Returns 0 if path was written, else 1."""
    text = json.dumps(result, indent=1) + "\n"
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            mask = os.umask(0)
            os.umask(mask)
            os.chmod(tmp, 0o666 & ~mask)
            os.replace(tmp, path)
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
