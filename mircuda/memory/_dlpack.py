"""DLPack capsules, made and read with ctypes (no compiled dependency).

The structures and codes are those of ``dlpack.h`` 1.1 (https://dmlc.github.io/dlpack/latest/):
``DLManagedTensorVersioned`` in a capsule named ``"dltensor_versioned"`` for consumers that ask for
``max_version >= (1, 0)``, the legacy ``DLManagedTensor`` in a ``"dltensor"`` capsule otherwise. A
consumer renames the capsule to ``"used_dltensor[_versioned]"`` and from then on owns the managed
tensor: it calls the tensor's ``deleter`` exactly once. A capsule that is dropped unconsumed calls the
deleter from its own destructor. mircuda's deleter releases the exported buffer's keep-alive entry;
it is idempotent, so a misbehaving consumer calling it twice frees nothing twice.

Element types (``DLDataTypeCode``): integers ``kDLInt``/``kDLUInt``, IEEE floats ``kDLFloat``,
``bf16`` as ``kDLBfloat`` (4) with 16 bits, ``e4m3`` as ``kDLFloat8_e4m3fn`` (10) with 8 bits, ``e2m1``
as ``kDLFloat4_e2m1fn`` (17) with 4 bits stored one per byte (``DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED``,
so only in versioned capsules), ``bool`` as ``kDLBool`` (6) with 8 bits.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any

from ..dtypes import DTypeInfo, dtype_info
from ..errors import ContractError

__all__ = [
    "DLPACK_VERSION", "KDL_CUDA", "KDL_CUDA_MANAGED", "KDL_CUDA_HOST", "KDL_CPU", "FLAG_READ_ONLY", "FLAG_IS_COPIED",
    "FLAG_SUBBYTE_PADDED", "DLTensorInfo", "dl_dtype", "dtype_from_dl", "make_capsule", "read_capsule",
    "live_exports",
]

DLPACK_VERSION = (1, 1)
"""The DLPack version mircuda's versioned capsules declare."""

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13  # DLDeviceType
FLAG_READ_ONLY = 1 << 0  # DLPACK_FLAG_BITMASK_READ_ONLY
FLAG_IS_COPIED = 1 << 1  # DLPACK_FLAG_BITMASK_IS_COPIED
FLAG_SUBBYTE_PADDED = 1 << 2  # DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED

_KDL_INT, _KDL_UINT, _KDL_FLOAT, _KDL_BFLOAT, _KDL_BOOL = 0, 1, 2, 4, 6
_KDL_FLOAT8_E4M3FN, _KDL_FLOAT4_E2M1FN = 10, 17
_CODE_NAMES = {0: "kDLInt", 1: "kDLUInt", 2: "kDLFloat", 3: "kDLOpaqueHandle", 4: "kDLBfloat", 5: "kDLComplex",
               6: "kDLBool", 7: "kDLFloat8_e3m4", 8: "kDLFloat8_e4m3", 9: "kDLFloat8_e4m3b11fnuz",
               10: "kDLFloat8_e4m3fn", 11: "kDLFloat8_e4m3fnuz", 12: "kDLFloat8_e5m2", 13: "kDLFloat8_e5m2fnuz",
               14: "kDLFloat8_e8m0fnu", 15: "kDLFloat6_e2m3fn", 16: "kDLFloat6_e3m2fn", 17: "kDLFloat4_e2m1fn"}


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


# -- element types ---------------------------------------------------------------------------
_TO_DL: dict[str, tuple[int, int]] = {
    "bool": (_KDL_BOOL, 8), "i8": (_KDL_INT, 8), "i16": (_KDL_INT, 16), "i32": (_KDL_INT, 32), "i64": (_KDL_INT, 64),
    "u8": (_KDL_UINT, 8), "u16": (_KDL_UINT, 16), "u32": (_KDL_UINT, 32), "u64": (_KDL_UINT, 64),
    "f16": (_KDL_FLOAT, 16), "f32": (_KDL_FLOAT, 32), "f64": (_KDL_FLOAT, 64), "bf16": (_KDL_BFLOAT, 16),
    "e4m3": (_KDL_FLOAT8_E4M3FN, 8), "e2m1": (_KDL_FLOAT4_E2M1FN, 4),
}
_FROM_DL: dict[tuple[int, int], str] = {v: k for k, v in _TO_DL.items()}
_FROM_DL[(_KDL_BOOL, 1)] = "bool"  # some producers (older CuPy/JAX) say 1 bit for a byte-stored bool


def dl_dtype(info: DTypeInfo) -> tuple[int, int]:
    """``(DLDataTypeCode, bits)`` of a mircuda element type (lanes are always 1)."""
    return _TO_DL[info.name]


def dtype_from_dl(code: int, bits: int, lanes: int) -> DTypeInfo:
    """The mircuda element type of a DLPack ``DLDataType``.

    Raises:
        ContractError: a vector type (lanes != 1) or a code/width mircuda has no type for (complex,
            e5m2, e8m0, fp6 ...), named with DLPack's code name.
    """
    if lanes != 1:
        raise ContractError("obj", "a DLPack tensor of scalar elements (lanes 1)", f"lanes {lanes}")
    name = _FROM_DL.get((code, bits))
    if name is None:
        known = ", ".join(f"{_CODE_NAMES[c]}/{b}" for (c, b) in _TO_DL.values())
        raise ContractError("obj", f"a DLPack element type mircuda supports ({known})",
                            f"{_CODE_NAMES.get(code, f'code {code}')} with {bits} bits")
    return dtype_info(name)


# -- the C API of capsules ---------------------------------------------------------------------
_api = ctypes.pythonapi
_capsule_new = _api["PyCapsule_New"]
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
_is_valid = _api["PyCapsule_IsValid"]
_is_valid.restype = ctypes.c_int
_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_is_valid_raw = _api["PyCapsule_IsValid"]  # a separate function object: the destructor passes a raw PyObject*
_is_valid_raw.restype = ctypes.c_int
_is_valid_raw.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_get_pointer = _api["PyCapsule_GetPointer"]
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_get_pointer_raw = _api["PyCapsule_GetPointer"]
_get_pointer_raw.restype = ctypes.c_void_p
_get_pointer_raw.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_set_name = _api["PyCapsule_SetName"]
_set_name.restype = ctypes.c_int
_set_name.argtypes = [ctypes.py_object, ctypes.c_void_p]

# Capsule names must outlive every capsule: module-level buffers, never freed.
_NAME_VERSIONED = ctypes.create_string_buffer(b"dltensor_versioned")
_NAME_LEGACY = ctypes.create_string_buffer(b"dltensor")
_NAME_USED_VERSIONED = ctypes.create_string_buffer(b"used_dltensor_versioned")
_NAME_USED_LEGACY = ctypes.create_string_buffer(b"used_dltensor")


@dataclass
class _Export:
    managed: ctypes.Structure
    shape: Any
    strides: Any
    owner: object


_exports: dict[int, _Export] = {}
_exports_lock = threading.Lock()


def _release_export(address: int | None) -> None:
    # The deleter mircuda puts in its managed tensors: drop the keep-alive entry (once; a second call
    # finds nothing). Never raises: an exception cannot cross back into C.
    try:
        with _exports_lock:
            _exports.pop(int(address or 0), None)
    except Exception:
        pass


_DELETER = _Deleter(_release_export)
_DELETER_ADDRESS = ctypes.cast(_DELETER, ctypes.c_void_p).value


def _capsule_destructor(capsule: int | None) -> None:
    # A capsule dropped before any consumer renamed it still owns its managed tensor: call its deleter.
    try:
        for name, cls in ((b"dltensor_versioned", DLManagedTensorVersioned), (b"dltensor", DLManagedTensor)):
            if _is_valid_raw(capsule, name):
                address = _get_pointer_raw(capsule, name)
                if address:
                    deleter = cls.from_address(address).deleter
                    if deleter:
                        _Deleter(deleter)(address)
                return
    except Exception:
        pass


_DESTRUCTOR = _Deleter(_capsule_destructor)  # PyCapsule_Destructor: void (*)(PyObject*)
_DESTRUCTOR_ADDRESS = ctypes.cast(_DESTRUCTOR, ctypes.c_void_p).value


def live_exports() -> int:
    """How many exported managed tensors no consumer has released yet (for tests and leak checks)."""
    with _exports_lock:
        return len(_exports)


def make_capsule(owner: object, data: int, device: tuple[int, int], info: DTypeInfo, shape: tuple[int, ...],
                 strides: tuple[int, ...] | None, *, versioned: bool, readonly: bool) -> Any:
    """A DLPack capsule over ``data`` that keeps ``owner`` alive until the consumer's deleter call.

    ``strides`` are in elements (``None``: C-contiguous). ``device`` is ``(DLDeviceType, device_id)``.

    Raises:
        BufferError: a legacy capsule was asked for a read-only or sub-byte (e2m1) tensor, which only
            a versioned capsule can flag.
    """
    code, bits = dl_dtype(info)
    flags = (FLAG_READ_ONLY if readonly else 0) | (FLAG_SUBBYTE_PADDED if bits < 8 else 0)
    if not versioned and flags:
        what = "read-only" if readonly else f"{info.name} (sub-byte, padded to a byte)"
        raise BufferError(f"a {what} tensor needs a versioned DLPack capsule (max_version >= (1, 0)); "
                          "the legacy capsule cannot flag it")
    ndim = len(shape)
    if strides is None:  # written out even when compact: some consumers do not accept NULL strides
        c, step = [], 1
        for n in reversed(shape):
            c.append(step)
            step *= n
        strides = tuple(reversed(c))
    shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides_arr = (ctypes.c_int64 * max(ndim, 1))(*strides)
    tensor = DLTensor(data or None, DLDevice(*device), ndim, DLDataType(code, bits, 1),
                      ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64)),
                      ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64)), 0)
    managed: ctypes.Structure
    if versioned:
        managed = DLManagedTensorVersioned(DLPackVersion(*DLPACK_VERSION), None, _DELETER_ADDRESS, flags, tensor)
    else:
        managed = DLManagedTensor(tensor, None, _DELETER_ADDRESS)
    address = ctypes.addressof(managed)
    with _exports_lock:
        _exports[address] = _Export(managed, shape_arr, strides_arr, owner)
    try:
        name = _NAME_VERSIONED if versioned else _NAME_LEGACY
        return _capsule_new(address, ctypes.addressof(name), _DESTRUCTOR_ADDRESS)
    except BaseException:
        _release_export(address)
        raise


@dataclass(frozen=True)
class DLTensorInfo:
    """What a consumed DLPack capsule describes (read by :func:`read_capsule`).

    Attributes:
        data: the address of element ``(0, ..., 0)`` (``DLTensor.data + byte_offset``).
        device: ``(DLDeviceType, device_id)``.
        info: the element type.
        shape: elements per dimension.
        strides: elements between neighbours per dimension (C order filled in when the producer gave
            NULL strides).
        flags: the versioned capsule's flags (0 for a legacy capsule).
        version: ``(major, minor)``, ``(0, 0)`` for a legacy capsule.
    """

    data: int
    device: tuple[int, int]
    info: DTypeInfo
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    flags: int
    version: tuple[int, int]

    @property
    def readonly(self) -> bool:
        return bool(self.flags & FLAG_READ_ONLY)


class _Consumed:
    """The consumer's side of a capsule: it calls the producer's deleter exactly once (on ``release``
    or when collected)."""

    __slots__ = ("_address", "_deleter", "__weakref__")

    def __init__(self, address: int, deleter: int) -> None:
        self._address = address
        self._deleter = deleter

    def release(self) -> None:
        address, deleter = self._address, self._deleter
        self._address = self._deleter = 0
        if address and deleter:
            _Deleter(deleter)(address)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:
            pass


def read_capsule(capsule: Any) -> tuple[DLTensorInfo, _Consumed]:
    """Consume a DLPack capsule: parse its tensor and take ownership (the capsule is renamed ``used_*``).

    The returned ``_Consumed`` calls the producer's deleter once, on ``release()`` or when collected;
    keep it alive as long as the memory is used.

    Raises:
        ContractError: not a DLPack capsule (or one already consumed), an unknown major version, a
            vector or unsupported element type, a negative dimension. Nothing is consumed then.
    """
    if _is_valid(capsule, b"dltensor_versioned"):
        address = _get_pointer(capsule, b"dltensor_versioned")
        versioned = DLManagedTensorVersioned.from_address(address)
        if versioned.version.major != 1:
            raise ContractError("obj", "a DLPack capsule of major version 1",
                                f"version {versioned.version.major}.{versioned.version.minor}")
        tensor, flags = versioned.dl_tensor, int(versioned.flags)
        version = (int(versioned.version.major), int(versioned.version.minor))
        deleter, used = versioned.deleter, _NAME_USED_VERSIONED
    elif _is_valid(capsule, b"dltensor"):
        address = _get_pointer(capsule, b"dltensor")
        legacy = DLManagedTensor.from_address(address)
        tensor, flags, version = legacy.dl_tensor, 0, (0, 0)
        deleter, used = legacy.deleter, _NAME_USED_LEGACY
    else:
        raise ContractError("obj", "an unconsumed DLPack capsule ('dltensor_versioned' or 'dltensor')",
                            f"{type(capsule).__name__} {capsule!r}"[:200])
    ndim = int(tensor.ndim)
    info = dtype_from_dl(tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes)
    shape = tuple(int(tensor.shape[i]) for i in range(ndim))
    if any(n < 0 for n in shape):
        raise ContractError("obj", "a DLPack tensor with non-negative extents", f"shape {shape}")
    if ndim and tensor.strides:
        strides = tuple(int(tensor.strides[i]) for i in range(ndim))
    else:
        c, step = [], 1
        for n in reversed(shape):
            c.append(step)
            step *= n
        strides = tuple(reversed(c))
    data = int(tensor.data or 0) + int(tensor.byte_offset)
    parsed = DLTensorInfo(data, (int(tensor.device.device_type), int(tensor.device.device_id)), info, shape,
                          strides, flags, version)
    if _set_name(capsule, ctypes.addressof(used)):  # pragma: no cover - only fails on a non-capsule
        raise ContractError("obj", "a renamable DLPack capsule", "PyCapsule_SetName failed")
    return parsed, _Consumed(address, int(deleter or 0))
