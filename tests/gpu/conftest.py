from __future__ import annotations

from collections.abc import Iterator

import pytest

import mircuda as mc


@pytest.fixture(scope="session")
def driver() -> mc.Driver:
    return mc.Driver.initialize()


@pytest.fixture(scope="session")
def context(driver: mc.Driver) -> Iterator[mc.Context]:
    ctx = driver.create_context(driver.devices()[0])
    yield ctx
    ctx.close()


@pytest.fixture()
def stream(context: mc.Context) -> Iterator[mc.Stream]:
    s = context.create_stream()
    yield s
    s.synchronize()
    s.close()


@pytest.fixture(scope="session")
def pool(context: mc.Context) -> mc.MemoryPool:
    return context.default_memory_pool()


@pytest.fixture(scope="session")
def compiler(context: mc.Context) -> mc.Compiler:
    return mc.Compiler(context)


@pytest.fixture(scope="session")
def library() -> mc.matmul.CutlassLibrary:
    """The CUTLASS library, found as the plans find it. Only tests marked ``cutlass`` may ask for it:
    conftest.py skips them without the library (fails them under ``MIRCUDA_REQUIRE_CUTLASS=1``)."""
    return mc.matmul.load_library()
