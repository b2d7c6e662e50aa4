"""course.tools.download against a local HTTP server on 127.0.0.1 (no internet here): verified, atomic, idempotent."""
import gzip
import http.server
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from functools import partial

import pytest

from course.data import DEFAULT_ROOT, FILES, load_mnist
from course.tools.download import DownloadError, download


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


# --- issue "Reliability": deadlines, broken servers, bad roots and mirrors, existing files -------------------------

class QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # a handler still trickling must not hold up the test's end


@pytest.fixture
def broken():
    """A server whose GET handler is `broken.handle = fn(handler)`; yields (holder, base_url)."""
    holder = type("Holder", (), {})()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            try:
                holder.handle(self)
            except OSError:  # the client gave up: fine
                pass

        def log_message(self, fmt, *args):
            pass

    server = QuietServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield holder, f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def trickle(h):
    """1 byte every 0.1 s: each read gets something well within its timeout, the file never ends."""
    h.send_response(200)
    h.send_header("Content-Length", "100000")
    h.end_headers()
    for _ in range(200):
        h.wfile.write(b"\x1f")
        h.wfile.flush()
        time.sleep(0.1)


def bad_status(h):
    h.wfile.write(b"HELLO THERE\r\n\r\n")


def truncated_chunked(h):
    h.send_response(200)
    h.send_header("Transfer-Encoding", "chunked")
    h.end_headers()
    h.wfile.write(b"100\r\n" + b"x" * 50)  # a 256-byte chunk announced, 50 bytes sent, then the connection closes
    h.close_connection = True


def truncated_length(h):
    h.send_response(200)
    h.send_header("Content-Length", "5000")
    h.end_headers()
    h.wfile.write(b"x" * 100)
    h.close_connection = True


def redirect_loop(h):
    h.send_response(302)
    h.send_header("Location", h.path)
    h.send_header("Content-Length", "0")
    h.end_headers()


def bomb(h):
    body = gzip.compress(bytes(3 * 2**20))
    h.send_response(200)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


@pytest.mark.parametrize("handle, says", [
    (trickle, "not finished after 1 s"),
    (bad_status, "could not fetch"),
    (truncated_chunked, "could not fetch"),
    (truncated_length, "closed after 100 of 5,000 bytes"),
    (redirect_loop, "could not fetch.*redirect"),
    (bomb, "decompresses to more than"),
], ids=["trickle", "bad-status-line", "truncated-chunked", "truncated-length", "redirect-loop", "gzip-bomb"])
def test_a_broken_server_gives_one_line_quickly(broken, tmp_path, monkeypatch, handle, says):
    import course.tools.download
    monkeypatch.setattr(course.tools.download, "MAX_RAW", 2**20)
    holder, url = broken
    holder.handle = handle
    t0 = time.monotonic()
    with pytest.raises(DownloadError, match=says) as e:
        download(tmp_path / "x", "mnist", mirror=url, timeout=2, deadline=1)
    assert time.monotonic() - t0 < 4 and "\n" not in str(e.value)
    assert not list((tmp_path / "x").iterdir())


@pytest.mark.parametrize("mirror, says", [
    ("notaurl", "not an http:// or https:// URL"),
    ("ftp://example.org/", "not an http:// or https:// URL"),
    ("http://127.0.0.1:abc/", "[Pp]ort"),
    ("", "empty"),
    ("  ", "empty"),
])
def test_a_bad_mirror_is_refused_before_anything(tmp_path, mirror, says):
    with pytest.raises(DownloadError, match=says):
        download(tmp_path / "x", "mnist", mirror=mirror)
    assert not (tmp_path / "x").exists()


def test_a_root_that_is_a_file_or_under_one(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(DownloadError, match="is a file, not a directory"):
        download(tmp_path / "f", "mnist", mirror="http://127.0.0.1:9/")
    with pytest.raises(DownloadError, match="cannot create --root"):
        download(tmp_path / "f" / "sub", "mnist", mirror="http://127.0.0.1:9/")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes whatever the permissions say")
def test_a_read_only_root(tmp_path):
    tmp_path.chmod(0o555)
    try:
        with pytest.raises(DownloadError, match="not writable"):
            download(tmp_path, "mnist", mirror="http://127.0.0.1:9/")
    finally:
        tmp_path.chmod(0o755)


def test_an_existing_corrupt_file_is_refused_and_kept(mirror, tmp_path):
    _, url, log = mirror
    root = tmp_path / "r"
    root.mkdir()
    bad = root / "t10k-labels-idx1-ubyte.gz"
    bad.write_bytes(gzip.compress(b"\x00\x00\x08\x01" + (3).to_bytes(4, "big") + b"\x01\x02\x03"))
    with pytest.raises(DownloadError, match="already there but is not mnist's t10k-labels-idx1-ubyte.*move it away"):
        download(root, "mnist", mirror=url)
    assert bad.exists() and log == []  # checked before anything is fetched


def test_files_get_the_usual_mode(mirror, tmp_path):
    _, url, _ = mirror
    old = os.umask(0o022)
    try:
        written = download(tmp_path / "m", "mnist", mirror=url)
    finally:
        os.umask(old)
    assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in written} == {"0o644"}


def test_cli_deadline_and_mirror_in_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "course", "download", "--root", str(tmp_path), "--mirror", ""],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "empty" in r.stderr
    r = subprocess.run([sys.executable, "-m", "course", "download", "--root", str(tmp_path), "--deadline", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--deadline" in r.stderr
