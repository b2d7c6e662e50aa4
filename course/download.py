"""Fetch missing MNIST / Fashion-MNIST files from a public mirror, verified by SHA-256, written atomically."""
import gzip
import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from course.data import FILES, KNOWN_SHA256

MIRRORS = {
    "mnist": "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "fashion-mnist": "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
}
MAX_BYTES = 64 * 2**20  # the largest file (train images, gzipped) is ~26 MB for Fashion-MNIST


class DownloadError(RuntimeError):
    """A file could not be fetched, or what came was not the expected file."""


def _fetch(url, timeout):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            data = r.read(MAX_BYTES + 1)
    except (urllib.error.URLError, OSError) as e:
        raise DownloadError(f"could not fetch {url}: {e}") from None
    if len(data) > MAX_BYTES:
        raise DownloadError(f"{url} is larger than {MAX_BYTES} bytes: not an MNIST file")
    return data


def download(root, dataset="mnist", mirror=None, timeout=60):
    """Download each of the four files missing from `root`; return the paths written."""
    if dataset not in MIRRORS:
        raise DownloadError(f"unknown dataset {dataset!r}: choose from {sorted(MIRRORS)}")
    base = (mirror or MIRRORS[dataset]).rstrip("/") + "/"
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    written = []
    for name in FILES.values():
        if (root / name).exists() or (root / f"{name}.gz").exists():
            continue
        url = base + name + ".gz"
        data = _fetch(url, timeout)
        try:
            raw = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise DownloadError(f"{url} is not a valid gzip file ({e})") from None
        digest = hashlib.sha256(raw).hexdigest()
        want = KNOWN_SHA256[dataset][name]
        if digest != want:
            raise DownloadError(f"{url}: checksum mismatch: its content has SHA-256 {digest}, expected {want}")
        fd, tmp = tempfile.mkstemp(dir=root, prefix=f".{name}.", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, root / f"{name}.gz")  # atomic: a reader never sees half a file
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        written.append(root / f"{name}.gz")
    return written
