"""Specs and operand sets of the grouped NVFP4 (mixture-of-experts) plans (:mod:`mircuda.matmul._moe`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..dtypes import is_integer_value
from ..errors import ContractError
from ._fp4_layout import check_fp4_k
from ._spec import _DIM_LIMIT, _dim

if TYPE_CHECKING:
    from ..memory import DeviceBuffer

__all__ = ["VariableGroupedFp4Spec", "IndexedGroupedFp4Spec", "GroupedFp4Operands"]


@dataclass(frozen=True)
class VariableGroupedFp4Spec:
    """The shape of a variable grouped NVFP4 product: ``groups`` groups of device-chosen row counts (0
    allowed) packed into ``capacity`` activation/output rows, each multiplied by one of ``bank_size``
    weight matrices ``[N, K]``.

    Raises:
        ContractError: a dimension is not a positive int below 2**31 - 2**16 (``_spec._DIM_LIMIT``); K is
            not a multiple of 16.
    """

    n: int
    k: int
    capacity: int
    groups: int
    bank_size: int

    def __post_init__(self) -> None:
        for name in ("n", "k", "capacity", "groups", "bank_size"):
            # stored as a Python int: numpy integers would wrap in the size products the checks rely on
            object.__setattr__(self, name, _dim(name, getattr(self, name)))
        check_fp4_k(self.k, "k")

    def flops(self, rows: int) -> int:
        """Floating-point operations when ``rows`` rows are routed in all (2 rows N K), a Python int.

        Raises:
            ContractError: ``rows`` is not a non-negative int (numpy integers count, taken as the int: the
                product would wrap in a narrow numpy type; bool does not).
        """
        if not is_integer_value(rows) or rows < 0:
            raise ContractError("rows", "a non-negative int (rows routed in all)", repr(rows))
        return 2 * int(rows) * self.n * self.k


@dataclass(frozen=True)
class IndexedGroupedFp4Spec:
    """The shape of an indexed grouped NVFP4 product: ``products`` products of ``rows`` (R) activation
    rows each, product p on rows ``[p R, p R + R)`` times bank matrix ``indices[p]`` (indices may repeat;
    ``products`` may exceed ``bank_size``).

    Raises:
        ContractError: a dimension is not a positive int below 2**31 - 2**16 (``_spec._DIM_LIMIT``); K is
            not a multiple of 16; P R is 2**31 - 2**16 or more.
    """

    n: int
    k: int
    rows: int
    products: int
    bank_size: int

    def __post_init__(self) -> None:
        for name in ("n", "k", "rows", "products", "bank_size"):
            # stored as a Python int: numpy integers would wrap in the size products the checks rely on
            object.__setattr__(self, name, _dim(name, getattr(self, name)))
        check_fp4_k(self.k, "k")
        if self.rows * self.products >= _DIM_LIMIT:
            raise ContractError("rows", f"rows * products below {_DIM_LIMIT}", f"{self.rows} * {self.products}")

    @property
    def capacity(self) -> int:
        """Activation/output rows: ``products * rows``."""
        return self.rows * self.products

    @property
    def groups(self) -> int:
        return self.products

    @property
    def flops(self) -> int:
        return 2 * self.capacity * self.n * self.k


@dataclass(frozen=True)
class GroupedFp4Operands:
    """One operand set of :class:`~mircuda.matmul.PairedVariableGroupedFp4Plan`.

    Attributes:
        a: ``DeviceBuffer[u8]`` ``[capacity, K/2]`` packed E2M1 activations. a_scales: ``DeviceBuffer[e4m3]``
            ``[capacity, K/16]`` linear UE4M3. b_bank: ``DeviceBuffer[u8]`` ``[E, N, K/2]``. b_scales:
            ``DeviceBuffer[e4m3]``, E matrices' scales back to back in the plan's layout. d:
            ``DeviceBuffer[bf16]`` ``[capacity, N]``. global_a: ``DeviceBuffer[f32]`` ``[1]`` or None.
            global_b: ``DeviceBuffer[f32]`` ``[E]`` or None. alpha: a host float.
    """

    a: DeviceBuffer[Any]
    a_scales: DeviceBuffer[Any]
    b_bank: DeviceBuffer[Any]
    b_scales: DeviceBuffer[Any]
    d: DeviceBuffer[Any]
    global_a: DeviceBuffer[Any] | None = None
    global_b: DeviceBuffer[Any] | None = None
    alpha: float = 1.0
