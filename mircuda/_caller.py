"""Warnings attributed to the user's code: the first frame outside the mircuda package."""

from __future__ import annotations

import os
import sys
import warnings

__all__ = ["PACKAGE_DIR", "warn_at_caller"]

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
"""The mircuda package directory, with a trailing separator (a prefix of every file in it)."""


def warn_at_caller(warning: Warning) -> None:
    """Issue ``warning`` at the innermost frame that is not mircuda's own code, so the reported
    file and line are the user's call (``Compiler.compile(...)``, a plan's constructor), however deep
    inside mircuda the warning arose. Frames of code run by ``python -m mircuda`` are all mircuda's:
    the outermost one is used then."""
    if sys.version_info >= (3, 12):
        warnings.warn(warning, skip_file_prefixes=(PACKAGE_DIR,))
        return
    # Python 3.10/3.11: count the frames to skip (stacklevel 1 is this function's frame).
    frame = sys._getframe(0)
    level = 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    warnings.warn(warning, stacklevel=level)
