"""course.download against a local HTTP server on 127.0.0.1 (no internet here): verified, atomic, idempotent."""
import gzip
import http.server
import shutil
import subprocess
import sys
import threading
from functools import partial

import pytest

from course.data import DEFAULT_ROOT, FILES, load_mnist
from course.download import DownloadError, download


@pytest.fixture
def mirror(tmp_path):
    """Serve a directory over HTTP on 127.0.0.1; yields (dir, base_url, request log)."""
    served = tmp_path / "served"
    served.mkdir()
    for name in FILES.values():
        shutil.copy(DEFAULT_ROOT / f"{name}.gz", served)
    log = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, fmt, *args):
            log.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(served)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served, f"http://127.0.0.1:{server.server_address[1]}/", log
    finally:
        server.shutdown()
        server.server_close()


def test_download_fetches_verifies_and_loads(mirror, tmp_path):
    _, url, _ = mirror
    root = tmp_path / "fresh"
    written = download(root, "mnist", mirror=url)
    assert sorted(p.name for p in written) == sorted(f"{n}.gz" for n in FILES.values())
    assert load_mnist(root)[0].shape == (60000, 784)


def test_existing_files_are_not_fetched_again(mirror, tmp_path):
    _, url, log = mirror
    root = tmp_path / "partial"
    root.mkdir()
    shutil.copy(DEFAULT_ROOT / "train-images-idx3-ubyte.gz", root)
    download(root, "mnist", mirror=url)
    assert not any("train-images" in p for p in log) and len(log) == 3


def test_corrupt_file_is_rejected_and_nothing_is_left_behind(mirror, tmp_path):
    served, url, _ = mirror
    raw = bytearray(gzip.decompress((served / "t10k-labels-idx1-ubyte.gz").read_bytes()))
    raw[100] ^= 1
    (served / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(bytes(raw)))
    root = tmp_path / "fresh"
    with pytest.raises(DownloadError, match="checksum mismatch"):
        download(root, "mnist", mirror=url)
    assert not (root / "t10k-labels-idx1-ubyte.gz").exists()
    assert not list(root.glob(".*part"))


def test_not_gzip_is_rejected(mirror, tmp_path):
    served, url, _ = mirror
    (served / "train-labels-idx1-ubyte.gz").write_bytes(b"<html>not found</html>")
    with pytest.raises(DownloadError, match="not a valid gzip"):
        download(tmp_path / "x", "mnist", mirror=url)


def test_missing_on_mirror(mirror, tmp_path):
    served, url, _ = mirror
    (served / "t10k-images-idx3-ubyte.gz").unlink()
    with pytest.raises(DownloadError, match="could not fetch"):
        download(tmp_path / "x", "mnist", mirror=url)


def test_cli_reports_failure_in_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "course", "download", "--root", str(tmp_path),
                        "--mirror", "http://127.0.0.1:9/"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "error: could not fetch" in r.stderr and "Traceback" not in r.stderr
