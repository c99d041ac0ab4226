from __future__ import annotations

from collections.abc import Iterator

import numpy as np
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


@pytest.fixture()
def rng() -> np.random.Generator:
    return np.random.default_rng()
