"""argparse ``type=`` checks shared by the commands: a bad value is refused while the command line is
parsed (one line naming the flag, exit status 2), before any driver or GPU work."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Container, Sequence
from typing import Any, TypeVar

__all__ = ["add_device_argument", "comma_items", "device_ordinal", "distinct", "distinct_ints", "is_decimal", "positive_int", "positive_seconds",
           "shape_values"]

T = TypeVar("T")


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
        raise argparse.ArgumentTypeError(f"expected comma-separated {what}s without an empty item, received {text!r}")
    return items


def is_decimal(text: str) -> bool:
    """``text`` (stripped) is ASCII decimal digits only: ``str.isdigit`` also takes ``'²'``, which ``int`` then
    refuses (argparse would say only "invalid ... value"), and ``int`` alone also takes ``'1_6'``."""
    return re.fullmatch(r"[0-9]+", text.strip()) is not None


def positive_int(text: str) -> int:
    """A count such as ``--calls`` or ``--repeats``: an int >= 1."""
    if not is_decimal(text) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, received {text!r}")
    return int(text)


def device_ordinal(text: str) -> int:
    """``--device``: a CUDA device ordinal, an int >= 0 (whether that device exists is the driver's to say)."""
    if not is_decimal(text):
        raise argparse.ArgumentTypeError(f"expected a device ordinal (an integer >= 0), received {text!r}")
    return int(text)


def add_device_argument(p: Any) -> None:
    """``--device`` as every GPU command takes it: the ordinal of the CUDA device to run on (default 0)."""
    p.add_argument("--device", type=device_ordinal, default=0, help="CUDA device ordinal to run on (default 0)")


def positive_seconds(text: str) -> float:
    """A timeout in seconds: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, received {text!r}")
    return value


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
