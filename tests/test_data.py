"""course.data: shapes and class counts of the bundled MNIST, and a clear error for every kind of bad file."""
import gzip
import os
import shutil
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from course.data import DEFAULT_ROOT, FILES, IDXError, load_mnist, parse_idx_header, read_idx

TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
FASHION = Path("/usr/share/datasets/fashion-mnist")


@pytest.fixture(scope="module")
def mnist():
    return load_mnist()


def test_shapes_dtypes_and_range(mnist):
    X_train, y_train, X_test, y_test = mnist
    assert X_train.shape == (60000, 784) and X_train.dtype == np.float32
    assert X_test.shape == (10000, 784) and X_test.dtype == np.float32
    assert y_train.shape == (60000,) and y_test.shape == (10000,)
    assert np.issubdtype(y_train.dtype, np.integer) and np.issubdtype(y_test.dtype, np.integer)
    assert X_train.min() == 0.0 and X_train.max() == 1.0


def test_class_counts_and_first_labels(mnist):
    _, y_train, _, y_test = mnist
    assert np.bincount(y_train).tolist() == TRAIN_COUNTS
    assert np.bincount(y_test).tolist() == TEST_COUNTS
    assert y_train[:10].tolist() == [5, 0, 4, 1, 9, 2, 1, 3, 1, 4]


def test_pixels_match_the_raw_bytes(mnist):
    raw = gzip.decompress((DEFAULT_ROOT / "t10k-images-idx3-ubyte.gz").read_bytes())
    first = np.frombuffer(raw[16:16 + 784], np.uint8).astype(np.float32) / 255
    np.testing.assert_array_equal(mnist[2][0], first)


@pytest.fixture
def copy_root(tmp_path):
    """A writable copy of the bundled files, uncompressed (so they can be cut and patched)."""
    for name in FILES.values():
        (tmp_path / name).write_bytes(gzip.decompress((DEFAULT_ROOT / f"{name}.gz").read_bytes()))
    return tmp_path


def test_reads_uncompressed_files(copy_root, mnist):
    got = load_mnist(copy_root)
    for a, b in zip(got, mnist):
        np.testing.assert_array_equal(a, b)


def test_missing_file_says_where_it_looked_and_how_to_get_it(copy_root):
    (copy_root / FILES["test_labels"]).unlink()
    with pytest.raises(FileNotFoundError) as e:
        load_mnist(copy_root)
    msg = str(e.value)
    assert "t10k-labels-idx1-ubyte" in msg and str(copy_root) in msg and "python -m course download" in msg


def test_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_mnist(tmp_path / "nowhere")


@pytest.mark.parametrize("name", ["train_images", "test_labels"])
def test_truncated_file_is_named(copy_root, name):
    path = copy_root / FILES[name]
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(IDXError) as e:
        load_mnist(copy_root)
    assert str(path) in str(e.value) and "truncated" in str(e.value)


def test_truncated_gzip_is_named(tmp_path):
    path = tmp_path / "t10k-labels-idx1-ubyte.gz"
    path.write_bytes((DEFAULT_ROOT / path.name).read_bytes()[:2000])
    with pytest.raises(IDXError) as e:
        read_idx(path)
    assert str(path) in str(e.value) and "truncated" in str(e.value)


def test_oversized_payload(copy_root):
    path = copy_root / FILES["test_labels"]
    path.write_bytes(path.read_bytes() + b"\x00\x01")
    with pytest.raises(IDXError) as e:
        load_mnist(copy_root, verify=False)
    assert str(path) in str(e.value) and "extra" in str(e.value)


def test_oversized_gzip_payload(tmp_path):
    path = tmp_path / "labels.gz"
    path.write_bytes(gzip.compress(b"\x00\x00\x08\x01" + (5).to_bytes(4, "big") + bytes(9)))
    with pytest.raises(IDXError, match="more data than"):
        read_idx(path)


def test_wrong_magic(copy_root):
    path = copy_root / FILES["train_labels"]
    data = bytearray(path.read_bytes())
    data[0] = 0x1F
    path.write_bytes(bytes(data))
    with pytest.raises(IDXError) as e:
        load_mnist(copy_root)
    assert str(path) in str(e.value) and "magic" in str(e.value)


def test_checksum_mismatch(copy_root):
    path = copy_root / FILES["test_images"]
    data = bytearray(path.read_bytes())
    data[5000] ^= 0xFF  # one pixel changed: the sizes are all still right
    path.write_bytes(bytes(data))
    with pytest.raises(IDXError) as e:
        load_mnist(copy_root)
    assert str(path) in str(e.value) and "checksum" in str(e.value) and "verify=False" in str(e.value)
    load_mnist(copy_root, verify=False)  # other data in this format loads when asked


def test_sha256sums_file_in_root_is_used(copy_root):
    (copy_root / "SHA256SUMS").write_text(f"{'0' * 64}  {FILES['test_labels']}\n")
    with pytest.raises(IDXError, match="expected 0000"):
        load_mnist(copy_root)


def test_images_and_labels_disagree(copy_root):
    path = copy_root / FILES["test_labels"]
    data = path.read_bytes()
    path.write_bytes(data[:4] + (9999).to_bytes(4, "big") + data[8:-1])
    with pytest.raises(IDXError) as e:
        load_mnist(copy_root, verify=False)
    assert "10,000 images" in str(e.value) and "9,999 labels" in str(e.value)


def test_label_out_of_range(copy_root):
    path = copy_root / FILES["test_labels"]
    data = bytearray(path.read_bytes())
    data[8] = 12
    path.write_bytes(bytes(data))
    with pytest.raises(IDXError, match="label 12"):
        load_mnist(copy_root, verify=False)


def test_header_is_not_trusted_before_allocating(tmp_path):
    """A gzip header that claims 1.5 GB but holds a few bytes fails without allocating anything like it."""
    path = tmp_path / "liar.gz"
    path.write_bytes(gzip.compress(b"\x00\x00\x08\x03" + (1_500_000).to_bytes(4, "big") + (1000).to_bytes(4, "big")
                                   + (1).to_bytes(4, "big") + bytes(100)))
    tracemalloc.start()
    with pytest.raises(IDXError, match="truncated"):
        read_idx(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 20 * 2**20


def test_absurd_header_is_rejected(tmp_path):
    path = tmp_path / "absurd"
    path.write_bytes(b"\x00\x00\x0e\x03" + b"\xff\xff\xff\xff" * 3)
    with pytest.raises(IDXError, match="limit|accepts"):
        read_idx(path)


def test_parse_idx_header_reads_big_endian():
    assert parse_idx_header(b"\x00\x00\x0b\x02\x00\x00\x01\x00\x00\x00\x00\x03") == (np.dtype(">i2"), (256, 3), 12)


def test_multibyte_payload_is_big_endian(tmp_path):
    path = tmp_path / "floats"
    values = np.array([[1.5, -2.0], [3.25, 1e-3]], ">f4")
    path.write_bytes(b"\x00\x00\x0d\x02" + (2).to_bytes(4, "big") * 2 + values.tobytes())
    got = read_idx(path)
    np.testing.assert_array_equal(got, values.astype(np.float32))
    assert got.dtype.isnative


@pytest.mark.skipif(not FASHION.is_dir() and not os.environ.get("CI"),
                    reason="Fashion-MNIST not installed (apt install dataset-fashion-mnist)")
def test_same_call_reads_fashion_mnist():
    X_train, y_train, X_test, y_test = load_mnist(FASHION)
    assert X_train.shape == (60000, 784) and X_test.shape == (10000, 784)
    assert np.bincount(y_train).tolist() == [6000] * 10 and np.bincount(y_test).tolist() == [1000] * 10


def test_fashion_copy_without_sums_is_verified_by_known_digests(tmp_path):
    """A copy of MNIST elsewhere, without SHA256SUMS, is still checked against the known digests."""
    for name in FILES.values():
        shutil.copy(DEFAULT_ROOT / f"{name}.gz", tmp_path)
    assert load_mnist(tmp_path)[0].shape == (60000, 784)


# --- issue "Reliability": gzip bombs, one dataset per directory, what is found instead of a file -------------------

def zeros_gz(path, header, n_bytes):
    """A gzip file: header + n_bytes zeros, compressed as it is written (never held in memory)."""
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(header)
        for k in range(0, n_bytes, 2**20):
            f.write(bytes(min(2**20, n_bytes - k)))


def test_a_gzip_bomb_is_rejected_by_its_checksum_before_it_is_held(copy_root):
    """96 MiB of zeros behind a consistent header (gzipped: 0.1 MB): the checksum pass keeps nothing."""
    path = copy_root / FILES["train_images"]
    path.unlink()
    n = 96 * 2**20
    zeros_gz(copy_root / f"{FILES['train_images']}.gz", b"\x00\x00\x08\x03" + (n // 784).to_bytes(4, "big")
             + (28).to_bytes(4, "big") * 2, n // 784 * 784)
    tracemalloc.start()
    with pytest.raises(IDXError, match="checksum mismatch"):
        load_mnist(copy_root)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 20 * 2**20, peak


def test_an_unverified_read_holds_the_payload_once(tmp_path):
    path = tmp_path / "zeros.gz"
    n = 64 * 2**20
    zeros_gz(path, b"\x00\x00\x08\x01" + n.to_bytes(4, "big"), n)
    tracemalloc.start()
    a = read_idx(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert a.shape == (n,) and not a.any()
    assert peak < 1.3 * n, peak / n  # chunks joined, then converted, held it three times


@pytest.fixture
def fake_fashion(tmp_path, monkeypatch):
    """A small dataset in MNIST's format posing as Fashion-MNIST (its digests patched in as Fashion's)."""
    root = tmp_path / "fashion"
    root.mkdir()
    r = np.random.default_rng(0)
    digests = {}
    for name, n in (("train", 30), ("t10k", 20)):
        images = b"\x00\x00\x08\x03" + n.to_bytes(4, "big") + (28).to_bytes(4, "big") * 2 + r.integers(
            0, 256, n * 784, dtype=np.uint8).tobytes()
        labels = b"\x00\x00\x08\x01" + n.to_bytes(4, "big") + r.integers(0, 10, n, dtype=np.uint8).tobytes()
        for kind, data in (("images-idx3", images), ("labels-idx1", labels)):
            (root / f"{name}-{kind}-ubyte.gz").write_bytes(gzip.compress(data))
            digests[f"{name}-{kind}-ubyte"] = __import__("hashlib").sha256(data).hexdigest()
    import course.data
    monkeypatch.setitem(course.data.KNOWN_SHA256, "fashion-mnist", digests)
    return root


def test_the_dataset_is_identified(fake_fashion):
    from course.data import identify
    assert identify(fake_fashion) == "fashion-mnist" and identify(DEFAULT_ROOT) == "mnist"
    assert load_mnist(fake_fashion, dataset="fashion-mnist")[0].shape == (30, 784)


def test_files_of_two_datasets_are_refused(fake_fashion):
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"):
        (fake_fashion / f"{name}.gz").unlink()
        shutil.copy(DEFAULT_ROOT / f"{name}.gz", fake_fashion)
    with pytest.raises(IDXError, match="Fashion-MNIST's, as t10k-labels-idx1-ubyte is: the four files must come "
                                       "from one dataset"):
        load_mnist(fake_fashion)


def test_insisting_on_the_other_dataset_is_refused(fake_fashion):
    with pytest.raises(IDXError, match="holds Fashion-MNIST, not MNIST"):
        load_mnist(fake_fashion, dataset="mnist")


def test_sha256sums_that_is_not_text(copy_root):
    (copy_root / "SHA256SUMS").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(IDXError, match="SHA256SUMS: not a SHA256SUMS file"):
        load_mnist(copy_root)


@pytest.mark.parametrize("make, says", [
    (lambda p: p.mkdir(), "is a directory"),
    (lambda p: p.symlink_to(p.parent / "nowhere"), "is a dangling symbolic link"),
    (lambda p: p.symlink_to(p), "is a symbolic link loop"),
], ids=["directory", "dangling-link", "link-loop"])
def test_what_is_found_instead_of_a_file_is_named(copy_root, make, says):
    path = copy_root / FILES["test_labels"]
    path.unlink()
    make(path)
    with pytest.raises(IDXError, match=says) as e:
        load_mnist(copy_root)
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_sha256sums_that_is_a_directory(copy_root):
    (copy_root / "SHA256SUMS").mkdir()
    with pytest.raises(IDXError, match="SHA256SUMS is a directory"):
        load_mnist(copy_root)


def test_a_file_given_as_the_data_directory(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(IDXError, match="is a file, not a directory"):
        load_mnist(tmp_path / "f")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads whatever the permissions say")
@pytest.mark.parametrize("target", ["SHA256SUMS", "dir"])
def test_unreadable_files_are_one_line(copy_root, target):
    path = copy_root if target == "dir" else copy_root / "SHA256SUMS"
    if target != "dir":
        path.write_text("")
    path.chmod(0)
    try:
        with pytest.raises(IDXError, match="[Pp]ermission denied"):
            load_mnist(copy_root)
    finally:
        path.chmod(0o755)
