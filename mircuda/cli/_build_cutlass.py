"""The matrix-plan commands of ``python -m mircuda``; ``cli.py`` registers them with ``register``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["register"]


def _dense_vector_profile(args: argparse.Namespace) -> int:
    from ._profile import dense_vector_profile

    return dense_vector_profile(args)


def _matmul_profile(args: argparse.Namespace) -> int:
    from ._profile import matmul_profile

    return matmul_profile(args)


def _build_cutlass(args: argparse.Namespace) -> int:
    from ._build import build, default_archs, parse_archs

    import mircuda as mc

    if args.jobs is not None and args.jobs < 1:
        raise mc.ContractError("--jobs", "a positive number of parallel compile jobs", str(args.jobs))
    if args.arch is not None and not args.arch.strip():
        raise mc.ContractError("--arch", "comma-separated SASS targets among 90a, 120f", repr(args.arch))
    archs = parse_archs(args.arch) if args.arch else default_archs()
    families = tuple(f for f in (args.families or "").split(",") if f)
    path = build(archs, args.jobs, Path(args.cache_dir) if args.cache_dir else None, families)
    print(path)
    return 0


def _cutlass_check(args: argparse.Namespace) -> int:
    from ._check import cutlass_check

    return cutlass_check(args)


def register(sub: Any) -> None:
    """Add ``dense-vector-profile``, ``matmul-profile``, ``build-cutlass`` and ``cutlass-check``."""
    from ._profile import add_matmul_arguments, add_vector_arguments

    p = sub.add_parser("dense-vector-profile",
                       help="DenseVectorPlan (M = 1) vs DenseMatmulPlan vs cuBLAS on cold weights (GPU)")
    add_vector_arguments(p)
    p.set_defaults(func=_dense_vector_profile)

    p = sub.add_parser("matmul-profile", help="DenseMatmulPlan vs cuBLAS over M and Llama-like (N, K) (GPU)")
    add_matmul_arguments(p)
    p.set_defaults(func=_matmul_profile)

    p = sub.add_parser("build-cutlass", help="build libmircuda_cutlass.so (CMake + Ninja, nvcc, CUTLASS headers)")
    p.add_argument("--arch", help="comma-separated SASS targets among 90a, 120f (default: MIRCUDA_CUDA_ARCH or both)")
    p.add_argument("--jobs", type=int, help="parallel compile jobs (default: ninja's)")
    p.add_argument("--cache-dir", help="build cache root (default: $MIRCUDA_CACHE_DIR/cutlass or ~/.cache/mircuda/cutlass)")
    p.add_argument("--families", help=argparse.SUPPRESS)  # comma-separated subset, for smoke builds
    p.set_defaults(func=_build_cutlass)

    p = sub.add_parser("cutlass-check", help="every CUTLASS plan vs float64 numpy on the GPU; SASS of the sm_120f kernels")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--json", default="benchmarks/results/cutlass_check.json")
    p.set_defaults(func=_cutlass_check)
