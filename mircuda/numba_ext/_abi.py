"""Numba's kernel ABI as a mircuda launch ABI: the parameter block of a Numba kernel, written by the
launch function mircuda generates at bind time.

numba-cuda 0.30.4 passes each kernel argument as the flattened fields of its data model
(``numba/cuda/datamodel/cuda_models.py``, ``ArrayModel``; filled by ``dispatcher.py``,
``_Kernel._prepare_args``):

- an array of ``ndim`` dimensions is ``5 + 2 * ndim`` values of 8 bytes: ``meminfo`` (0), ``parent``
  (0), ``nitems``, ``itemsize`` (bytes), ``data`` (device address), ``shape[0..ndim)`` and
  ``strides[0..ndim)`` (bytes);
- a scalar is one value: integers and ``float32``/``float64`` as in C, ``boolean`` as one byte,
  ``float16`` and ``bfloat16`` as their 16-bit patterns.

A ``DeviceBuffer[T]`` is a 1-d array of ``T``; an :class:`ArrayView` supplies shape and strides for
N-d parameters. Numba has no FP8/FP4 array or scalar type: ``e4m3`` and ``e2m1`` buffers and scalars
bind to ``uint8`` parameters (their bit patterns; decode them with mircuda's helpers).

Two kinds of ABI are registered in :data:`mircuda.launch.LAUNCH_ABIS`: ``"numba"`` (every buffer a
1-d array, checked against the kernel's parameter sizes only) and one ``"numba:<argument types>"``
per Numba signature :func:`numba_kernel` compiles, which also checks the contract's dtypes, ranks,
layouts and access against the signature when the kernel is bound.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from functools import partial
from types import SimpleNamespace
from typing import Any

from ..errors import ContractError
from ..launch import (LAUNCH_ABIS, SCALAR_CTYPES, KernelContract, LaunchAbi, Param, buffer_argument, emit_c_writes,
                      parameter_sizes)
from ..memory import DeviceBuffer
from . import _compat
from ._view import ArrayView

__all__ = ["ArgSpec", "signature_specs", "check_contract", "register_signature", "numba_type_of"]

_t = _compat.types
NUMBA_TYPES: dict[str, Any] = {
    "bool": _t.boolean, "i8": _t.int8, "i16": _t.int16, "i32": _t.int32, "i64": _t.int64,
    "u8": _t.uint8, "u16": _t.uint16, "u32": _t.uint32, "u64": _t.uint64, "f16": _t.float16,
    "bf16": _compat.bfloat16, "f32": _t.float32, "f64": _t.float64,
    "e4m3": _t.uint8, "e2m1": _t.uint8,  # Numba has no FP8/FP4 type: their bit patterns
}
"""The Numba type each mircuda element type binds to (as an array dtype or a scalar)."""


def numba_type_of(dtype_name: str) -> Any:
    """The Numba type a mircuda dtype (``"f32"``, ``"bf16"``...) binds to."""
    return NUMBA_TYPES[dtype_name]


@dataclass(frozen=True)
class ArgSpec:
    """One Numba kernel parameter as the launch ABI sees it.

    Attributes:
        numba_type: the Numba type (``array(float32, 1d, A)``, ``float32``...).
        ndim: array rank, 0 for a scalar.
        layout: ``"C"``, ``"F"`` or ``"A"`` (any strides) for arrays; ``""`` for scalars.
        mutable: False for Numba's read-only arrays.
    """

    numba_type: Any
    ndim: int
    layout: str
    mutable: bool

    @property
    def dtype(self) -> Any:
        return self.numba_type.dtype if self.ndim else self.numba_type

    def describe(self) -> str:
        return f"Numba {self.numba_type}"


_ALLOWED = set(NUMBA_TYPES.values())


def signature_specs(args: tuple[Any, ...]) -> tuple[ArgSpec, ...]:
    """The ABI view of a Numba signature's argument types.

    Raises:
        ContractError: an argument type mircuda cannot pass (records, tuples, complex numbers, ...).
    """
    out = []
    for i, t in enumerate(args):
        if isinstance(t, _t.Array) and t.dtype in _ALLOWED and t.ndim >= 1:
            out.append(ArgSpec(t, t.ndim, t.layout, bool(t.mutable)))
        elif t in _ALLOWED:
            out.append(ArgSpec(t, 0, "", True))
        else:
            raise ContractError(f"signature[{i}]", "arrays of, or scalars of, bool, int8..uint64, float16, "
                                "bfloat16, float32 or float64", str(t))
    return tuple(out)


def _refuse_structs(contract: KernelContract) -> None:
    for p in contract.params:
        if p.kind == "struct":
            raise ContractError(p.name, "a buffer or scalar parameter (Numba kernels take no by-value "
                                "structs or vector types from a contract)", p.describe())


def _contract_specs(contract: KernelContract) -> tuple[ArgSpec, ...]:
    # The generic "numba" ABI: what a contract alone says (buffers are 1-d arrays of any layout).
    _refuse_structs(contract)
    return tuple(ArgSpec(_t.Array(NUMBA_TYPES[p.info.name], 1, "A"), 1, "A", True) if p.kind == "buffer"
                 else ArgSpec(NUMBA_TYPES[p.info.name], 0, "", True) for p in contract.params)


def _binding(numba_type: Any) -> str:
    names = [n for n, t in NUMBA_TYPES.items() if t == numba_type]
    return " or ".join(", ".join(names).rsplit(", ", 1))


def check_contract(specs: tuple[ArgSpec, ...], contract: KernelContract) -> None:
    """Check a contract against a Numba signature, parameter by parameter.

    Raises:
        ContractError: a different parameter count, a buffer for a scalar (or the reverse), another
            element type, or an ``Out``/``InOut`` buffer for a read-only Numba array. The error names
            the contract's parameter and what the kernel's Numba parameter takes.
    """
    _refuse_structs(contract)
    if len(specs) != len(contract.params):
        raise ContractError("contract", f"{len(specs)} parameters, as the Numba signature "
                            f"({', '.join(str(s.numba_type) for s in specs)}) has",
                            f"{len(contract.params)} ({', '.join(contract.names)})")
    for p, s in zip(contract.params, specs):
        kernel = f"(the Numba parameter is {s.numba_type})"
        if p.kind == "buffer" and not s.ndim:
            raise ContractError(p.name, f"a scalar type binding to {s.numba_type}: {_binding(s.numba_type)}",
                                p.describe())
        if p.kind == "scalar" and s.ndim:
            raise ContractError(p.name, f"DeviceBuffer[{_binding(s.dtype)}] {kernel}", p.describe())
        if NUMBA_TYPES[p.info.name] != s.dtype:
            what = f"DeviceBuffer[{_binding(s.dtype)}]" if s.ndim else _binding(s.dtype)
            raise ContractError(p.name, f"{what} {kernel}", p.describe())
        if p.kind == "buffer" and not s.mutable and p.access != "in":
            raise ContractError(p.name, f"In[DeviceBuffer[{p.info.name}]] {kernel}: a read-only array", p.describe())


def _slots(specs: tuple[ArgSpec, ...] | None, contract: KernelContract) -> list[tuple[str, type]]:
    specs = _contract_specs(contract) if specs is None else specs
    out: list[tuple[str, type]] = []
    for p, s in zip(contract.params, specs):
        if p.kind == "scalar":
            out.append((p.name, SCALAR_CTYPES[p.info.name]))
            continue
        u64, i64 = ctypes.c_uint64, ctypes.c_int64
        out += [(f"{p.name}.meminfo", u64), (f"{p.name}.parent", u64), (f"{p.name}.nitems", i64),
                (f"{p.name}.itemsize", i64), (f"{p.name}.data", u64)]
        out += [(f"{p.name}.shape[{k}]", i64) for k in range(s.ndim)]
        out += [(f"{p.name}.strides[{k}]", i64) for k in range(s.ndim)]
    return out


def _emit(specs: tuple[ArgSpec, ...] | None, contract: KernelContract, ns: dict[str, Any], context: Any,
          block: Any) -> list[str]:
    """Lines that check each argument and write its ABI values into ``block`` (see the module doc).

    A ``DeviceBuffer`` of the declared dtype and context, for a 1-d parameter, takes a fast path of
    four slot writes; everything else goes through a per-parameter function that checks it (an
    :class:`ArrayView`, a buffer of another context, a freed buffer, a missing argument...) and
    writes all its values or raises. Scalars are checked and written as the C ABI does.
    """
    specs = _contract_specs(contract) if specs is None else specs
    ns["_DB"] = DeviceBuffer
    ns["_ctx"] = context
    lines: list[str] = []
    scalars: list[Param] = []
    scalar_slots: list[Any] = []
    j = 0
    for i, (p, s) in enumerate(zip(contract.params, specs)):
        if p.kind == "scalar":
            scalars.append(p)
            scalar_slots.append(block.slots[j])
            j += 1
            continue
        views = [slot.view for slot in block.slots[j:j + 5 + 2 * s.ndim]]
        j += 5 + 2 * s.ndim
        meminfo, parent, nitems, itemsize, data = views[:5]
        shape, strides = views[5:5 + s.ndim], views[5 + s.ndim:]
        item = p.info.itemsize
        meminfo.value = parent.value = 0
        itemsize.value = item
        a = p.name
        ns[f"_a{i}w"] = _array_writer(p, s, context, nitems, data, shape, strides)
        if s.ndim == 1:
            ns.update({f"_a{i}t": p.info.scalar_type, f"_a{i}n": nitems, f"_a{i}d": data, f"_a{i}h": shape[0],
                       f"_a{i}s": strides[0]})
            lines += [
                f"    if {a}.__class__ is _DB and {a}._scalar is _a{i}t and {a}._context is _ctx and {a}._ptr:",
                f"        _a{i}n.value = {a}._count",
                f"        _a{i}d.value = {a}._ptr",
                f"        _a{i}h.value = {a}._count",
                f"        _a{i}s.value = {item}",
                "    else:",
                f"        _a{i}w({a})",
            ]
        else:
            lines.append(f"    _a{i}w({a})")
    # Scalars: the C ABI's own checks and conversions, writing into this block's scalar slots.
    lines += emit_c_writes(KernelContract(contract.symbol, tuple(scalars)), ns, context,
                          SimpleNamespace(slots=scalar_slots))
    return lines


def _expected(p: Param, s: ArgSpec) -> str:
    if s.ndim == 1:
        return f"a DeviceBuffer[{p.info.name}] or a 1-d ArrayView of one"
    order = {"C": "C-contiguous ", "F": "Fortran-contiguous "}.get(s.layout, "")
    return f"a {order}{s.ndim}-d ArrayView of a DeviceBuffer[{p.info.name}]"


def _array_writer(p: Param, s: ArgSpec, context: Any, nitems: Any, data: Any, shape: list[Any],
                  strides: list[Any]) -> Any:
    expected = _expected(p, s)
    item = p.info.itemsize
    check = buffer_argument(p, context)  # the C ABI's checks of one buffer: missing, type, freed, dtype, context

    def write(v: Any) -> None:
        if isinstance(v, ArrayView):
            check(v.buffer)
            if v.ndim != s.ndim:
                raise ContractError(p.name, expected, f"a {v.ndim}-d ArrayView")
            if (s.layout == "C" and not v.c_contiguous) or (s.layout == "F" and not v.f_contiguous):
                raise ContractError(p.name, expected, f"an ArrayView with strides {v.strides}",
                                    f"the Numba parameter is {s.numba_type}")
            address = v.buffer._ptr + v.offset * item if v.size else v.buffer._ptr
            dims, steps = v.shape, v.byte_strides
        elif isinstance(v, DeviceBuffer):
            address = check(v)
            if s.ndim != 1:
                raise ContractError(p.name, expected, f"a 1-d DeviceBuffer[{v._info.name}]",
                                    "wrap it in mircuda.numba_ext.ArrayView(buffer, shape)")
            dims, steps = (v._count,), (item,)
        elif hasattr(v, "__cuda_array_interface__"):
            raise ContractError(p.name, expected, type(v).__name__,
                                "wrap other libraries' device arrays with mircuda.numba_ext.as_device_buffer(...)")
        else:
            check(v)  # raises: the argument is missing, or not a buffer (with the host-array hint)
            raise AssertionError("unreachable")
        n = 1
        for d in dims:
            n *= d
        nitems.value = n
        data.value = address
        for slot, d in zip(shape, dims):
            slot.value = d
        for slot, st in zip(strides, steps):
            slot.value = st
    return write


def _verify(specs: tuple[ArgSpec, ...] | None, contract: KernelContract, cu_function: Any) -> None:
    """Bind-time check: the contract against the Numba signature (when known), then the ABI values
    against the compiled kernel's parameter sizes.

    Raises:
        ContractError: naming the first parameter that does not match.
    """
    if specs is not None:
        check_contract(specs, contract)
    slots = _slots(specs, contract)
    sizes = parameter_sizes(cu_function)
    if sizes is None:
        return
    if len(sizes) != len(slots):
        raise ContractError("contract", f"{len(sizes)} Numba ABI values, as kernel {contract.symbol!r} takes",
                            f"{len(slots)} ({', '.join(label for label, _ in slots)})")
    for (label, ctype), size in zip(slots, sizes):
        if ctypes.sizeof(ctype) != size:
            raise ContractError(label.split(".")[0], f"an ABI value of {size} bytes at {label!r}",
                                f"{ctypes.sizeof(ctype)} bytes")


_lock = threading.Lock()


def register_signature(args: tuple[Any, ...]) -> str:
    """Register (once) the launch ABI of kernels with these Numba argument types; return its name.

    Raises:
        ContractError: an argument type mircuda cannot pass.
    """
    specs = signature_specs(args)
    name = "numba:" + ", ".join(str(t) for t in args)
    with _lock:
        if name not in LAUNCH_ABIS:
            LAUNCH_ABIS[name] = LaunchAbi(name, partial(_slots, specs), partial(_emit, specs),
                                          partial(_verify, specs))
    return name


LAUNCH_ABIS.setdefault("numba", LaunchAbi("numba", partial(_slots, None), partial(_emit, None),
                                          partial(_verify, None)))
