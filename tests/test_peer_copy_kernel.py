"""The SM copy kernel of Stream.copy_peer(engine="sm") compiles with NVRTC (no device needed) within its
launch bounds: 4 resident blocks of 512 threads need at most 32 registers a thread, and no spills."""

from __future__ import annotations

import pytest

import mircuda as mc
from mircuda.compile._peer_copy import PEER_COPY_THREADS, PeerCopy, peer_copy_source


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_peer_copy_kernel_fits_four_blocks_of_512_threads_without_spills(arch: str) -> None:
    prog = mc.compile_program(peer_copy_source(), arch, mc.CompileOptions(ptxas_verbose=True))
    usage = prog.resource_usage()["mircuda_peer_copy"]
    assert usage.registers * PEER_COPY_THREADS * 4 <= 65536
    assert usage.spill_store_bytes == 0 and usage.spill_load_bytes == 0
    assert PeerCopy.symbol == "mircuda_peer_copy"
    assert [p.name for p in PeerCopy.params] == ["dst", "src", "nbytes"]
