"""requirements.txt gives each platform one numba-cuda that course/device.py was written for, and numpy < 2.5.

Markers evaluated here for each platform (offline); CI resolves the same file for each with uv (.ci/platforms.py)."""
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from course import device

REQUIREMENTS = Path(__file__).resolve().parent.parent / "requirements.txt"
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
@pytest.mark.parametrize("python", ["3.10", "3.12", "3.13"])
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
