"""Shared pytest configuration.

Tests under tests/gpu/ are marked ``gpu`` and skip without a device; tests marked ``cutlass`` skip
without the CUTLASS library. Neither may go green by skipping on a host that should run them:

* ``MIRCUDA_REQUIRE_GPU=1``: a missing driver or device fails every ``gpu`` test instead of skipping it.
* ``MIRCUDA_REQUIRE_CUTLASS=1``: a missing ``libmircuda_cutlass.so`` (found as the plans find it,
  ``mircuda.matmul._build.find_library()`` or ``MIRCUDA_CUTLASS_LIBRARY``) fails every ``cutlass`` test.
* ``MIRCUDA_TEST_SEED=N``: the seed of the ``rng`` fixture (a fresh one otherwise); the report header
  prints the seed in use, so a failing run can be repeated exactly.

Each test process gets its own, empty CUDA driver compute cache (``CUDA_CACHE_PATH``, removed at
exit) unless the caller sets one: NVRTC 13 and the driver's PTX JIT keep compiled code there, shared
by every process of the user and kept across runs, so without this a verdict could depend on what an
earlier run or another xdist worker compiled (the ptxas report of issue 18 did).
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings

# Before anything loads libcuda or NVRTC (they read it once). A path another test process made (the
# xdist controller, whose environment its workers inherit) is replaced; one the caller set is kept.
_OWNER = "MIRCUDA_TEST_CUDA_CACHE_OWNER"
if "CUDA_CACHE_PATH" not in os.environ or os.environ.get(_OWNER, str(os.getpid())) != str(os.getpid()):
    os.environ["CUDA_CACHE_PATH"] = tempfile.mkdtemp(prefix="mircuda-test-cuda-cache-")
    os.environ[_OWNER] = str(os.getpid())
    atexit.register(shutil.rmtree, os.environ["CUDA_CACHE_PATH"], True)

# The tests' expectations are the packaged measured table's: a table of the caller's own sweep would change which
# kernel a plan runs (the tests that need the variable set it themselves).
os.environ.pop("MIRCUDA_DENSE_TABLE", None)

from gpu_probe import cutlass_unavailable_reason, gpu_unavailable_reason  # noqa: E402

GPU_DIR = Path(__file__).parent / "gpu"


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def _seed() -> int:
    text = os.environ.get("MIRCUDA_TEST_SEED", "").strip()
    if not text:
        return secrets.randbits(32)
    try:
        return int(text, 0)
    except ValueError:
        raise pytest.UsageError(f"MIRCUDA_TEST_SEED must be an integer, received {text!r}") from None


SEED = _seed()
"""The seed of this session's ``rng`` fixtures (``MIRCUDA_TEST_SEED`` or a fresh random one)."""


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [f"mircuda: rng seed {SEED} (repeat with MIRCUDA_TEST_SEED={SEED}); "
            f"MIRCUDA_REQUIRE_GPU={int(_flag('MIRCUDA_REQUIRE_GPU'))} "
            f"MIRCUDA_REQUIRE_CUTLASS={int(_flag('MIRCUDA_REQUIRE_CUTLASS'))} "
            f"CUDA_CACHE_PATH={os.environ.get('CUDA_CACHE_PATH')}"]


@pytest.fixture()
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A generator seeded from the session seed and the test's node id: each test draws the same
    values on every run with the same ``MIRCUDA_TEST_SEED``, whatever else ran before it."""
    key = np.frombuffer(request.node.nodeid.encode(), dtype=np.uint8)
    return np.random.default_rng([SEED, *key.tolist()])


def _unavailable(item: pytest.Item, reason: str, required: str) -> None:
    if _flag(required):
        item.stash[_REQUIRED_FAILURE] = f"{required}=1 but {reason}"
    else:
        item.add_marker(pytest.mark.skip(reason=reason))


_REQUIRED_FAILURE = pytest.StashKey[str]()


def pytest_runtest_setup(item: pytest.Item) -> None:
    message = item.stash.get(_REQUIRED_FAILURE, None)
    if message is not None:
        pytest.fail(message, pytrace=False)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if GPU_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.gpu)
    for item in items:
        if "gpu" in item.keywords:
            reason = gpu_unavailable_reason()
            if reason:
                _unavailable(item, reason, "MIRCUDA_REQUIRE_GPU")
                continue
        if "cutlass" in item.keywords:
            reason = cutlass_unavailable_reason()
            if reason:
                _unavailable(item, reason, "MIRCUDA_REQUIRE_CUTLASS")


# Hypothesis: derandomized examples (a failure repeats on every run, like the seeded rng) and no
# deadline (a verdict must not depend on process speed).
settings.register_profile("mircuda", derandomize=True, deadline=None, max_examples=200)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "mircuda"))


@pytest.fixture
def no_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver as on a machine without one: a command stops there with exit status 2, after its checks."""
    import mircuda as mc

    def initialize() -> None:
        raise mc.MircudaError("no driver (test stand-in)")

    monkeypatch.setattr(mc.Driver, "initialize", staticmethod(initialize))
