"""The matrix-plan commands of ``python -m mircuda``; ``cli.py`` registers them with ``register``."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register"]


def _dense_vector_profile(args: argparse.Namespace) -> int:
    from ._profile import dense_vector_profile

    return dense_vector_profile(args)


def register(sub: Any) -> None:
    """Add ``dense-vector-profile`` (and the CUTLASS commands) to the CLI's subparsers."""
    from ._profile import add_vector_arguments

    p = sub.add_parser("dense-vector-profile",
                       help="DenseVectorPlan (M = 1) vs DenseMatmulPlan vs cuBLAS on cold weights (GPU)")
    add_vector_arguments(p)
    p.set_defaults(func=_dense_vector_profile)
