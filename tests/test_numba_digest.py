"""What a Numba kernel's digest (its cache key) covers beyond its own code: attributes it reads from
modules, Enum classes, namedtuple fields, record dtypes. A change that Numba would freeze into the
compiled kernel must change the digest (else the cache returns the stale module); nothing else may.
No GPU needed: the cache is exercised through an OfflineCompiler."""

from __future__ import annotations

import collections
import enum
import os
import struct
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from numba import cuda

import mircuda as mc
import mircuda.numba_ext as mn

SIG = "void(float32[:])"
PTX = mc.CompileOptions(output="ptx")

cfg = types.ModuleType("mircuda_test_cfg")  # a config module, as `import cfg` would give
cfg.SCALE = 1.5
cfg.UNUSED = 1.0
cfg.sub = types.ModuleType("mircuda_test_cfg.sub")
cfg.sub.C = 7.0


class Mode(enum.IntEnum):
    A = 3


class Color(enum.Enum):
    RED = 1.5


Point = collections.namedtuple("Point", "x y")
ORIGIN = Point(1.0, 2.0)
RECORDS = np.array([(4.0, 5.0)], dtype=[("a", np.float32), ("b", np.float32)])


def reads_attribute(out):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < out.size:
        out[i] = cfg.SCALE


def reads_chain(out):  # type: ignore[no-untyped-def]
    out[0] = cfg.sub.C


def reads_through_a_local(out):  # type: ignore[no-untyped-def]
    m = cfg.sub  # Numba resolves the attribute of the local's module type as well
    out[0] = m.C


def _closing_over(module):  # type: ignore[no-untyped-def]
    def kernel(out):  # type: ignore[no-untyped-def]
        out[0] = module.SCALE
    return kernel


def reads_int_enum(out):  # type: ignore[no-untyped-def]
    i = cuda.grid(1)
    if i < out.size:
        out[i] = Mode.A.value


def reads_enum(out):  # type: ignore[no-untyped-def]
    out[0] = Color.RED.value


def reads_field(out):  # type: ignore[no-untyped-def]
    out[0] = ORIGIN.x


def reads_record(out):  # type: ignore[no-untyped-def]
    out[0] = RECORDS[0].a


helpers = types.ModuleType("mircuda_test_helpers")  # a helpers module of register_jitable functions
exec("def clamp(x):\n    return min(max(x, 0.0), 1.0)\n", helpers.__dict__)  # __name__ is the module's


def calls_a_helper_through_a_module(out):  # type: ignore[no-untyped-def]
    out[0] = helpers.clamp(out[0])


class Bits(enum.Flag):
    A = 1
    B = 2


NONE_SET = Bits(0)  # a Flag value without a name


def reads_an_unnamed_flag(out):  # type: ignore[no-untyped-def]
    out[0] = 1.0 if NONE_SET else 0.0


def _digest(fn) -> str:  # type: ignore[no-untyped-def]
    return mn.numba_kernel(fn, SIG).digest


def _redefined(source: str) -> type:
    """A class statement run again with another body, as a re-run notebook cell does."""
    namespace: dict = {"enum": enum, "__name__": __name__}
    exec(source, namespace)
    return namespace[source.split()[1].split("(")[0]]


def test_a_module_attribute_the_kernel_reads_is_part_of_the_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    before = _digest(reads_attribute)
    monkeypatch.setattr(cfg, "UNUSED", 2.0)
    assert _digest(reads_attribute) == before  # an attribute the kernel does not name: still a hit
    monkeypatch.setattr(cfg, "SCALE", 2.5)  # a config module edited and reloaded, or assigned
    assert _digest(reads_attribute) != before


@pytest.mark.parametrize("kernel", [reads_chain, reads_through_a_local])
def test_attributes_of_submodules_are_part_of_the_digest(kernel, monkeypatch: pytest.MonkeyPatch) -> None:
    before = _digest(kernel)
    monkeypatch.setattr(cfg.sub, "C", 9.0)
    assert _digest(kernel) != before


def test_a_module_in_the_closure_contributes_its_attributes() -> None:
    first = types.ModuleType("mircuda_test_closure_cfg")
    first.SCALE = 1.5
    second = types.ModuleType("mircuda_test_closure_cfg")
    second.SCALE = 1.5
    assert _digest(_closing_over(first)) == _digest(_closing_over(second))
    second.SCALE = 2.5
    assert _digest(_closing_over(first)) != _digest(_closing_over(second))


def test_a_redefined_enum_class_changes_the_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    before = _digest(reads_int_enum)
    monkeypatch.setitem(globals(), "Mode", _redefined("class Mode(enum.IntEnum):\n    A = 3\n"))
    assert _digest(reads_int_enum) == before  # the same members: a hit, although another class object
    monkeypatch.setitem(globals(), "Mode", _redefined("class Mode(enum.IntEnum):\n    A = 5\n"))
    assert _digest(reads_int_enum) != before
    monkeypatch.setitem(globals(), "Mode", _redefined("class Mode(enum.IntEnum):\n    A = 3\n    B = 4\n"))
    assert _digest(reads_int_enum) != before  # members are hashed, not only the one read

    plain = _digest(reads_enum)
    monkeypatch.setitem(globals(), "Color", _redefined("class Color(enum.Enum):\n    RED = 2.5\n"))
    assert _digest(reads_enum) != plain


def test_namedtuple_fields_and_record_dtypes_are_part_of_the_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    before = _digest(reads_field)
    swapped = collections.namedtuple("Point", "y x")
    monkeypatch.setitem(globals(), "ORIGIN", swapped(1.0, 2.0))  # the same items; ORIGIN.x is now 2.0
    assert _digest(reads_field) != before

    before = _digest(reads_record)
    monkeypatch.setitem(globals(), "RECORDS", RECORDS.view([("b", np.float32), ("a", np.float32)]))
    assert _digest(reads_record) != before  # the same bytes; RECORDS[0].a is now 5.0


_CHILD = """
import sys
sys.path.insert(0, {tests!r})
import test_numba_digest as t
t.cfg.SCALE = {scale!r}
if {a!r} != 3:
    t.Mode = t._redefined("class Mode(enum.IntEnum):\\n    A = {a!r}\\n")
print(t._digest(t.reads_attribute), t._digest(t.reads_int_enum))
"""


def test_the_digest_is_the_same_in_another_process_for_the_same_values_only() -> None:
    # The disk cache is keyed by the digest: equal values give equal digests in any process (no
    # id(), no addresses, no hash seed), and other values other digests.
    def child(scale: float, a: int) -> list[str]:
        env = dict(os.environ, PYTHONHASHSEED=str(17 + a))
        code = _CHILD.format(tests=str(Path(__file__).parent), scale=scale, a=a)
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        return run.stdout.split()

    assert __name__ == "test_numba_digest"  # as the child imports it: the digest names the module
    here = [_digest(reads_attribute), _digest(reads_int_enum)]
    assert child(1.5, 3) == here
    other = child(2.5, 5)
    assert other[0] != here[0] and other[1] != here[1]


def _f32(ptx: str, value: float) -> bool:
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    return f"{bits};" in ptx or f"0f{bits:08X}" in ptx


def test_the_compiler_cache_returns_a_module_compiled_for_the_current_values(monkeypatch) -> None:
    compiler = mc.OfflineCompiler("sm_90")

    def compile_ptx(fn) -> str:  # type: ignore[no-untyped-def]
        return compiler.compile(mn.numba_kernel(fn, SIG), PTX).image.decode()

    assert _f32(compile_ptx(reads_attribute), 1.5)
    assert _f32(compile_ptx(reads_attribute), 1.5) and compiler.cache_stats().memory_hits == 1  # nothing changed
    monkeypatch.setattr(cfg, "SCALE", 2.5)
    ptx = compile_ptx(reads_attribute)
    assert _f32(ptx, 2.5) and not _f32(ptx, 1.5)

    assert _f32(compile_ptx(reads_int_enum), 3.0)
    monkeypatch.setitem(globals(), "Mode", _redefined("class Mode(enum.IntEnum):\n    A = 5\n"))
    ptx = compile_ptx(reads_int_enum)
    assert _f32(ptx, 5.0) and not _f32(ptx, 3.0)
    assert compiler.cache_stats().memory_hits == 1 and compiler.cache_stats().compilations == 4


def test_a_helper_function_reached_through_a_module_is_hashed_by_its_body(monkeypatch: pytest.MonkeyPatch) -> None:
    # Numba compiles a register_jitable (or plain) helper's body into the kernel: a new body must miss.
    before = _digest(calls_a_helper_through_a_module)
    namespace: dict = {"__name__": helpers.__name__}  # the same module and name: only the body differs
    exec("def clamp(x):\n    return min(max(x, 0.0), 2.0)\n", namespace)
    monkeypatch.setattr(helpers, "clamp", namespace["clamp"])
    assert _digest(calls_a_helper_through_a_module) != before


def test_an_unnamed_flag_value_has_a_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    before = _digest(reads_an_unnamed_flag)  # Flag(0) has no name: hashed by its value, not refused
    monkeypatch.setitem(globals(), "NONE_SET", Bits.A | Bits.B)
    assert _digest(reads_an_unnamed_flag) != before
