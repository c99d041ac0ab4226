"""N-dimensional strided views of a device buffer (array parameters of Numba kernels, foreign strided arrays)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import ContractError, UseAfterFree
from ._buffer import DeviceBuffer

__all__ = ["ArrayView"]


@dataclass(frozen=True)
class ArrayView:
    """A view of a :class:`DeviceBuffer` as an N-d array: what a Numba kernel's ``float32[:, :]``
    parameter receives when the kernel is launched through mircuda.

    Attributes:
        buffer: the buffer viewed (the view keeps it alive; freeing it invalidates the view).
        shape: elements per dimension, e.g. ``(rows, cols)``.
        strides: elements between neighbours along each dimension; ``None`` means C order (row-major,
            the last dimension contiguous). Numba receives them in bytes.
        offset: the element of ``buffer`` at index ``(0, ..., 0)``.
        ndim, size, byte_strides, c_contiguous, f_contiguous: derived.

    Every element the view can address lies inside the buffer; strides are non-negative.

    Raises:
        ContractError: ``buffer`` is not a DeviceBuffer; a shape, stride or offset is not a
            non-negative int; the lengths differ; or the view reaches past the buffer's end.
        UseAfterFree: ``buffer`` was freed.
    """

    buffer: DeviceBuffer[Any]
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None = None
    offset: int = 0
    ndim: int = field(init=False)
    size: int = field(init=False)
    byte_strides: tuple[int, ...] = field(init=False)
    c_contiguous: bool = field(init=False)
    f_contiguous: bool = field(init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.buffer, DeviceBuffer):
            raise ContractError("buffer", "a DeviceBuffer", type(self.buffer).__name__)
        if self.buffer.freed:
            raise UseAfterFree(f"argument 'buffer': {self.buffer!r} was freed")
        shape = _ints("shape", self.shape)
        if not shape:
            raise ContractError("shape", "at least one dimension", repr(self.shape))
        c_strides = _c_strides(shape)
        strides = c_strides if self.strides is None else _ints("strides", self.strides)
        if len(strides) != len(shape):
            raise ContractError("strides", f"{len(shape)} strides (one per dimension of shape {shape})",
                                repr(self.strides))
        if type(self.offset) is not int or self.offset < 0:
            raise ContractError("offset", "a non-negative int (elements)", repr(self.offset))
        size = 1
        for n in shape:
            size *= n
        if size:
            last = self.offset + sum((n - 1) * s for n, s in zip(shape, strides))
            if last >= len(self.buffer):
                raise ContractError("shape", f"a view inside the buffer's {len(self.buffer)} elements",
                                    f"shape {shape}, strides {strides}, offset {self.offset} reaching element {last}")
        item = self.buffer.dtype.itemsize
        set_ = object.__setattr__
        set_(self, "shape", shape)
        set_(self, "strides", strides)
        set_(self, "ndim", len(shape))
        set_(self, "size", size)
        set_(self, "byte_strides", tuple(s * item for s in strides))
        set_(self, "c_contiguous", _contiguous(shape, strides, c_strides))
        set_(self, "f_contiguous", _contiguous(shape, strides, _c_strides(shape[::-1])[::-1]))

    @property
    def data(self) -> int:
        """The device address of element ``(0, ..., 0)``."""
        return self.buffer.handle + self.offset * self.buffer.dtype.itemsize

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """CUDA Array Interface v3 (byte strides), with the buffer's allocating stream."""
        cai = dict(self.buffer.__cuda_array_interface__)
        cai.update(shape=self.shape, strides=None if self.c_contiguous else self.byte_strides,
                   data=(self.data if self.size else 0, False))
        return cai

    def __dlpack__(self, *, stream: int | None = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """Export the view as an N-d DLPack tensor with its shape and element strides (no copy); the
        rules are :meth:`DeviceBuffer.__dlpack__`'s."""
        from ._foreign import export_dlpack

        return export_dlpack(self.buffer, self.shape, self.strides, self.data if self.size else 0, stream=stream,
                             max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(2, ordinal)``: DLPack's ``kDLCUDA`` and the buffer's device."""
        return self.buffer.__dlpack_device__()

    def __repr__(self) -> str:
        return f"ArrayView({self.buffer!r}, shape={self.shape}, strides={self.strides}, offset={self.offset})"


def _ints(name: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or any(type(v) is not int or v < 0 for v in value):
        raise ContractError(name, "a tuple of non-negative ints", repr(value))
    return tuple(value)


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


def _contiguous(shape: tuple[int, ...], strides: tuple[int, ...], want: tuple[int, ...]) -> bool:
    # Dimensions of extent 1 may have any stride (numpy's rule).
    return all(n == 1 or s == w for n, s, w in zip(shape, strides, want))
