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
