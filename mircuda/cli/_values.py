"""argparse ``type=`` checks shared by the commands: a bad value is refused while the command line is
parsed (one line naming the flag, exit status 2), before any driver or GPU work."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Container, Sequence
from typing import Any, TypeVar

__all__ = ["COUNT_LIMIT", "MAX_SECONDS", "add_device_argument", "below_dim_limit", "comma_items", "count_up_to", "dense_shape_values",
           "device_ordinal", "distinct", "distinct_ints", "is_decimal", "k_multiple", "positive_int", "positive_seconds", "shape_values"]

T = TypeVar("T")

COUNT_LIMIT = 2**31 - 1
"""The largest count a flag takes (``--calls``, ``--repeats``, ``--batches``...): what a C ``int`` holds. A count
that drives memory has a smaller limit of its own (:func:`count_up_to`)."""


def comma_items(text: str, what: str) -> list[str]:
    """The stripped comma-separated items of ``text``; an empty item (``1,,2``, ``1,``, ``,1``) is refused
    rather than skipped: it is most likely a value the user meant to type.

    Raises:
        argparse.ArgumentTypeError: ``text`` is empty or holds an empty item (``what`` names the items).
    """
    items = [v.strip() for v in text.split(",")]
    if not any(items):
        raise argparse.ArgumentTypeError(f"expected at least one {what}, received {text!r}")
    if not all(items):
        plural = what + ("es" if what.endswith(("s", "x", "ch", "sh")) else "s")  # kernel name prefixes
        raise argparse.ArgumentTypeError(f"expected comma-separated {plural} without an empty item, received {text!r}")
    return items


def is_decimal(text: str) -> bool:
    """``text`` is ASCII decimal digits only: ``str.isdigit`` also takes ``'²'``, which ``int`` then refuses
    (argparse would say only "invalid ... value"), and ``int`` alone also takes ``'1_6'`` and ``' 5'``. Items of a
    comma-separated list are stripped first (:func:`comma_items`), so ``--m '1, 16'`` reads as 1 and 16."""
    return re.fullmatch(r"[0-9]+", text) is not None


def _count(text: str, limit: int, why: str) -> int:
    if not is_decimal(text) or not 1 <= int(text) <= limit:
        raise argparse.ArgumentTypeError(f"expected a positive integer up to {limit} ({why}), received {text[:40]!r}")
    return int(text)


def positive_int(text: str) -> int:
    """A count such as ``--calls`` or ``--repeats``: ASCII digits (:func:`is_decimal`), an int in
    [1, :data:`COUNT_LIMIT`].

    Raises:
        argparse.ArgumentTypeError: naming the bound: another character, 0, or a value above it.
    """
    return _count(text, COUNT_LIMIT, "a C int")


def count_up_to(limit: int, why: str) -> Callable[[str], int]:
    """The ``type=`` of a count whose bound is lower than :data:`COUNT_LIMIT` (it drives memory, or a program
    it is handed to refuses more): :func:`positive_int` up to ``limit``; ``why`` says where the bound comes from
    (the message names both)."""
    return lambda text: _count(text, limit, why)


def device_ordinal(text: str) -> int:
    """``--device``: a CUDA device ordinal, an int >= 0 (whether that device exists is the driver's to say)."""
    if not is_decimal(text):
        raise argparse.ArgumentTypeError(f"expected a device ordinal (an integer >= 0), received {text!r}")
    return int(text)


def add_device_argument(p: Any) -> None:
    """``--device`` as every GPU command takes it: the ordinal of the CUDA device to run on (default 0)."""
    p.add_argument("--device", type=device_ordinal, default=0, help="CUDA device ordinal to run on (default 0)")


MAX_SECONDS = 86400.0
"""The longest timeout a flag takes (a day): ``queue.Queue.get`` raises OverflowError for 9.2e9 s, which the
caller would report as the peer giving no result in time."""


def positive_seconds(text: str) -> float:
    """A timeout in seconds: a decimal number written with ASCII digits and at most one point (``240``, ``0.5``),
    in (0, :data:`MAX_SECONDS`]; ``float`` alone also takes ``' 5'``, ``1_0``, ``1e3`` and ``inf``.

    Raises:
        argparse.ArgumentTypeError: naming the range, for another form or a value outside it.
    """
    if re.fullmatch(r"[0-9]+(\.[0-9]*)?|\.[0-9]+", text) is None or not 0 < float(text) <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0 and up to {MAX_SECONDS:g} (a day), "
                                         f"such as 240 or 0.5, received {text[:40]!r}")
    return float(text)


def distinct(values: Sequence[T], text: str) -> list[T]:
    """``values`` (parsed from ``text``) if none repeats: a repeated value would be measured and recorded twice.

    Raises:
        argparse.ArgumentTypeError: a value repeats.
    """
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"expected each value once, received {text!r}")
    return list(values)


def known_items(text: str, known: Sequence[str], what: str) -> list[str]:
    """Comma-separated items of ``known`` (``what`` names one item), each once: an unknown name is refused rather
    than run as something else.

    Raises:
        argparse.ArgumentTypeError: an empty or unknown item, or a repeated one.
    """
    items = comma_items(text, what)
    unknown = [x for x in items if x not in known]
    if unknown:
        raise argparse.ArgumentTypeError(f"expected comma-separated items of {', '.join(known)}, received "
                                         f"{', '.join(map(repr, unknown))} in {text!r}")
    return distinct(items, text)


def distinct_ints(text: str, allowed: Container[int], expected: str) -> list[int]:
    """Comma-separated decimal integers (ASCII digits, an optional minus: ``int`` alone would also take ``1_6``
    and `` 4``), each in ``allowed`` and given once.

    Raises:
        argparse.ArgumentTypeError: a malformed item, a value outside ``allowed`` (``expected`` says what is
            allowed) or a repeated value.
    """
    if not all(re.fullmatch(r"-?[0-9]+", x) for x in text.split(",")):
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, received {text!r}")
    out = [int(x) for x in text.split(",")]
    if not all(x in allowed for x in out):
        raise argparse.ArgumentTypeError(f"expected {expected}, received {text!r}")
    return distinct(out, text)


def shape_values(text: str) -> tuple[tuple[int, int], ...]:
    """``--shapes`` (dense-vector-profile, fp8-profile, fp4-profile): comma-separated ``NxK`` pairs of positive
    ints (ASCII digits, see :func:`is_decimal`), each pair once, e.g. ``4096x4096,14336x4096``.

    Raises:
        argparse.ArgumentTypeError: naming the pair that is not ``NxK``, an empty item, or a repeated pair (it
            would be measured and recorded twice).
    """
    out = []
    for item in comma_items(text, "NxK pair"):
        parts = item.lower().split("x")
        if len(parts) != 2 or not all(is_decimal(p) and int(p) > 0 for p in parts):
            raise argparse.ArgumentTypeError(f"expected comma-separated NxK pairs of positive ints, received {item!r} "
                                             f"in {text!r}")
        out.append((int(parts[0]), int(parts[1])))
    return tuple(distinct(out, text))


def k_multiple(shapes: tuple[tuple[int, int], ...], text: str, multiple: int, why: str) -> tuple[tuple[int, int], ...]:
    """``shapes`` (parsed from ``text``) if every K is a multiple of ``multiple``; ``why`` names the format's rule
    (the FP8 plans' 16-byte rows of E4M3 codes, NVFP4's one scale per 16 K-elements).

    Raises:
        argparse.ArgumentTypeError: naming the first pair whose K breaks the rule.
    """
    for n, k in shapes:
        if k % multiple:
            raise argparse.ArgumentTypeError(f"expected NxK pairs with K a multiple of {multiple} ({why}), received "
                                             f"{n}x{k} in {text[:80]!r}")
    return shapes


def below_dim_limit(shapes: tuple[tuple[int, int], ...], text: str) -> tuple[tuple[int, int], ...]:
    """``shapes`` (parsed from ``text``) if every N and K is below the plans' dimension limit, 2**31 - 2**16 =
    2147418112 (``mircuda.matmul._spec._DIM_LIMIT``, the bound of matmul-profile's ``--m``): checked while parsing,
    before an operand that large is allocated.

    Raises:
        argparse.ArgumentTypeError: naming the first pair with a dimension at or above the limit.
    """
    from ..matmul._spec import _DIM_LIMIT

    for n, k in shapes:
        if max(n, k) >= _DIM_LIMIT:
            raise argparse.ArgumentTypeError(f"expected NxK pairs of dimensions below {_DIM_LIMIT} (the kernels index "
                                             f"with 32-bit ints), received {n}x{k} in {text[:80]!r}")
    return shapes


def dense_shape_values(text: str) -> tuple[tuple[int, int], ...]:
    """``--shapes`` of dense-vector-profile: :func:`shape_values`, each N and K below the plans' dimension limit
    (:func:`below_dim_limit`).

    Raises:
        argparse.ArgumentTypeError: as :func:`shape_values` and :func:`below_dim_limit`.
    """
    return below_dim_limit(shape_values(text), text)
