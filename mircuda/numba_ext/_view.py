"""``ArrayView`` lives in :mod:`mircuda.memory` (the core needs it for foreign strided arrays); re-exported here."""

from ..memory._view import ArrayView

__all__ = ["ArrayView"]
