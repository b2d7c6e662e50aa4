"""requirements.txt gives each platform one numba-cuda that course/runtime/device.py was written for, and numpy < 2.5.

Markers evaluated here for each platform (offline); CI resolves the same file for each with uv (.ci/platforms.py)."""
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from course.runtime import device, versions

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "requirements.txt"
PLATFORMS = {  # PEP 508 marker values of the platforms the README names
    "Linux x86_64": dict(sys_platform="linux", platform_system="Linux", platform_machine="x86_64", os_name="posix"),
    "Linux aarch64": dict(sys_platform="linux", platform_system="Linux", platform_machine="aarch64", os_name="posix"),
    "Windows": dict(sys_platform="win32", platform_system="Windows", platform_machine="AMD64", os_name="nt"),
    "macOS arm64": dict(sys_platform="darwin", platform_system="Darwin", platform_machine="arm64", os_name="posix"),
    "macOS x86_64": dict(sys_platform="darwin", platform_system="Darwin", platform_machine="x86_64", os_name="posix"),
}


def requirements(platform, python="3.12"):
    """{name: [Requirement]} of requirements.txt's lines whose markers hold on `platform`."""
    env = {**PLATFORMS[platform], "python_version": python, "python_full_version": python + ".0"}
    got = {}
    for line in REQUIREMENTS.read_text().splitlines():
        line = line.split(" #")[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        r = Requirement(line)
        if r.marker is None or r.marker.evaluate(env):
            got.setdefault(r.name, []).append(r)
    return got


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("python", ["3.10", "3.12", "3.13", "3.14"])
def test_each_platform_gets_one_numba_cuda_the_course_was_written_for(platform, python):
    reqs = requirements(platform, python)
    assert len(reqs.get("numba-cuda", [])) == 1 and len(reqs.get("numba", [])) == 1, reqs
    nc = reqs["numba-cuda"][0]
    (spec,) = nc.specifier
    assert spec.operator == "==" and spec.version in device.WRITTEN_FOR["numba-cuda"]
    mac = platform.startswith("macOS")
    assert (spec.version in device.SIMULATOR_ONLY) == mac  # the simulator-only build on macOS, and only there
    assert nc.extras == (set() if mac else {"cu12"})  # CUDA wheels everywhere but macOS, where none exist


@pytest.mark.parametrize("platform", PLATFORMS)
def test_numpy_stays_below_2_5(platform):
    (numpy,) = requirements(platform)["numpy"]
    assert not numpy.specifier.contains(Version("2.5.0")) and numpy.specifier.contains(Version("2.4.0"))


def bounds(specifier):
    """(lowest allowed, first excluded) of a ">=a.b,<c.d" specifier, as (major, minor) tuples."""
    by_op = {s.operator: versions.version_tuple(s.version) for s in specifier}
    return by_op.get(">="), by_op.get("<")


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("name", sorted(versions.RANGES))
def test_numba_and_numpy_ranges_are_the_ones_import_course_checks(platform, name):
    (req,) = requirements(platform)[name]
    assert bounds(req.specifier) == versions.RANGES[name][0], f"{req} vs course/runtime/versions.py RANGES[{name!r}]"


def test_numba_is_bounded_below_0_69_everywhere():
    for platform in PLATFORMS:
        (numba,) = requirements(platform)["numba"]
        assert not numba.specifier.contains(Version("0.69.0")) and numba.specifier.contains(Version("0.68.1"))


def test_requires_python_is_the_range_import_course_checks():
    import re  # tomllib is Python 3.11+: the one line read by hand
    (line,) = re.findall(r'^requires-python = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    spec = SpecifierSet(line)
    (low, high) = versions.PYTHON
    assert spec.contains(f"{low[0]}.{low[1]}.0") and spec.contains(f"{high[0]}.{high[1]}.9")
    assert not spec.contains(f"{low[0]}.{low[1] - 1}.9") and not spec.contains(f"{high[0]}.{high[1] + 1}.0")


def test_readme_names_the_supported_pythons():
    text = " ".join((ROOT / "README.md").read_text().split())
    (low, high), mac = versions.PYTHON, versions.PYTHON_INTEL_MAC
    assert f"Python {low[0]}.{low[1]} to {high[0]}.{high[1]}" in text
    assert f"Intel Mac with {low[0]}.{low[1]} to {mac[0]}.{mac[1]}" in text
    assert "or newer" not in text.split("## Train")[0], "the README's setup must not say 'Python 3.10 or newer'"
