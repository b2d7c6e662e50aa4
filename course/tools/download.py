"""Fetch missing MNIST / Fashion-MNIST files from a public mirror, verified by SHA-256, written atomically.

Every failure is a DownloadError with a one-line message. Each file must arrive within `deadline` seconds in all
(a slow server cannot hang it), and each read within `timeout`. Files already in `root` are verified, not trusted."""
import gzip
import hashlib
import http.client
import io
import os
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from pathlib import Path

from course.data import FILES, KNOWN_SHA256, IDXError, _checked_pass, find_file

MIRRORS = {
    "mnist": "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "fashion-mnist": "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
}
MAX_BYTES = 64 * 2**20   # the largest file (train images, gzipped) is ~26 MB for Fashion-MNIST
MAX_RAW = 256 * 2**20    # decompressed: 47 MB for the train images; more is a gzip bomb, not an MNIST file
CHUNK = 1 << 16
TIMEOUT, DEADLINE = 60, 600  # seconds: for one read (or the connection), and for a whole file


class DownloadError(RuntimeError):
    """A file could not be fetched, or what came was not the expected file."""


def _one_line(e):
    return " ".join(str(e).split()) or type(e).__name__


def check_mirror(mirror):
    """The mirror's base URL, ending in "/", once checked to be an http(s) URL; DownloadError otherwise."""
    if not mirror or not mirror.strip():
        raise DownloadError("the mirror URL is empty (leave --mirror out for the dataset's usual mirror)")
    parts = urllib.parse.urlsplit(mirror.strip())
    try:
        parts.port  # raises ValueError for a port that is not a number
    except ValueError as e:
        raise DownloadError(f"mirror {mirror!r}: {_one_line(e)}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DownloadError(f"mirror {mirror!r} is not an http:// or https:// URL")
    return mirror.strip().rstrip("/") + "/"


def _fetch(url, timeout, deadline):
    """The body of url (at most MAX_BYTES), all of it within `deadline` seconds; each read within `timeout`."""
    end = time.monotonic() + deadline
    parts, got = [], 0
    try:
        with urllib.request.urlopen(url, timeout=min(timeout, deadline)) as r:
            length = r.headers.get("Content-Length", "")
            while True:
                if time.monotonic() > end:
                    raise DownloadError(f"{url}: not finished after {deadline:g} s ({got:,} bytes came): the server "
                                        "is too slow; try again later, or another --mirror")
                part = r.read1(CHUNK)  # whatever has arrived (up to CHUNK): a trickle cannot block past the deadline
                if not part:
                    break
                parts.append(part)
                got += len(part)
                if got > MAX_BYTES:
                    raise DownloadError(f"{url} is larger than {MAX_BYTES:,} bytes: not an MNIST file")
    except DownloadError:
        raise
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as e:
        raise DownloadError(f"could not fetch {url}: {_one_line(e)}") from None
    if length.isdigit() and got < int(length):
        raise DownloadError(f"could not fetch {url}: the connection closed after {got:,} of {int(length):,} bytes")
    return b"".join(parts)


def _gunzip_sha256(data, url):
    """SHA-256 of the decompressed data, decompressed in chunks (never more than MAX_RAW bytes, never all held)."""
    h, total = hashlib.sha256(), 0
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            while part := f.read(CHUNK):
                h.update(part)
                total += len(part)
                if total > MAX_RAW:
                    raise DownloadError(f"{url} decompresses to more than {MAX_RAW:,} bytes: not an MNIST file")
    except DownloadError:
        raise
    except (OSError, EOFError, zlib.error) as e:
        raise DownloadError(f"{url} is not a valid gzip file ({_one_line(e)})") from None
    return h.hexdigest()


def _prepare(root):
    """Make root (and its parents); DownloadError if it is a file, under a file, or not writable."""
    root = Path(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise DownloadError(f"--root {root} is a file, not a directory") from None
    except OSError as e:
        raise DownloadError(f"cannot create --root {root}: {e.strerror or _one_line(e)}") from None
    if not root.is_dir():
        raise DownloadError(f"--root {root} is not a directory")
    return root


def _verify_existing(path, dataset, name):
    """Check a file already in root against the dataset's digest; DownloadError (left in place) if it differs."""
    try:
        digest = _checked_pass(path, keep=False)[3]
    except (IDXError, OSError) as e:
        digest, why = None, _one_line(e)
    else:
        why = f"its SHA-256 is {digest}, {dataset}'s is {KNOWN_SHA256[dataset][name]}"
    if digest != KNOWN_SHA256[dataset][name]:
        raise DownloadError(f"{path} is already there but is not {dataset}'s {name} ({why}): move it away "
                            "(or choose another --root) and run again")


def download(root, dataset="mnist", mirror=None, timeout=TIMEOUT, deadline=DEADLINE):
    """Download each of the four files missing from `root`, verify the ones present; return the paths written.

    `timeout`: seconds for the connection and for each read; `deadline`: seconds for a whole file."""
    if dataset not in MIRRORS:
        raise DownloadError(f"unknown dataset {dataset!r}: choose from {sorted(MIRRORS)}")
    base = check_mirror(MIRRORS[dataset] if mirror is None else mirror)
    root = _prepare(root)
    missing = []
    for name in FILES.values():
        try:
            _verify_existing(find_file(root, name), dataset, name)
        except FileNotFoundError:
            missing.append(name)
        except IDXError as e:  # a directory, a dangling link, ... where the file should be
            raise DownloadError(_one_line(e)) from None
    if missing and not os.access(root, os.W_OK | os.X_OK):
        raise DownloadError(f"--root {root} is not writable")
    mask = os.umask(0)
    os.umask(mask)
    written = []
    for name in missing:
        url = base + name + ".gz"
        data = _fetch(url, timeout, deadline)
        digest = _gunzip_sha256(data, url)
        want = KNOWN_SHA256[dataset][name]
        if digest != want:
            raise DownloadError(f"{url}: checksum mismatch: its content has SHA-256 {digest}, expected {want}")
        try:
            fd, tmp = tempfile.mkstemp(dir=root, prefix=f".{name}.", suffix=".part")
        except OSError as e:
            raise DownloadError(f"cannot write in --root {root}: {e.strerror or _one_line(e)}") from None
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o666 & ~mask)  # mkstemp makes 0600; a downloaded file gets the usual mode
            os.replace(tmp, root / f"{name}.gz")  # atomic: a reader never sees half a file
        except OSError as e:
            raise DownloadError(f"cannot write {root / (name + '.gz')}: {e.strerror or _one_line(e)}") from None
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        written.append(root / f"{name}.gz")
    return written
