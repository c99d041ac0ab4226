"""argparse ``type=`` checks shared by the commands: a bad value is refused while the command line is
parsed (one line naming the flag, exit status 2), before any driver or GPU work."""

from __future__ import annotations

import argparse
import math

__all__ = ["comma_items", "device_ordinal", "positive_int", "positive_seconds"]


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


def positive_int(text: str) -> int:
    """A count such as ``--calls`` or ``--repeats``: an int >= 1."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, received {text!r}")
    return int(text)


def device_ordinal(text: str) -> int:
    """``--device``: a CUDA device ordinal, an int >= 0 (whether that device exists is the driver's to say)."""
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected a device ordinal (an integer >= 0), received {text!r}")
    return int(text)


def positive_seconds(text: str) -> float:
    """A timeout in seconds: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, received {text!r}")
    return value
