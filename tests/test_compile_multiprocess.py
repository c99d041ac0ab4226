"""Many processes compiling the same keys into one empty cache directory at once.

8 processes run 8 rounds each. A file barrier starts every round together; in round r each process
compiles 3 new sources (so all 8 miss, compile and write the same 3 keys at once) with a fresh
compiler, then reads round r-1's keys back; process 0 also deletes one of round r-1's entries.
No process may fail or see a partial or mixed entry (that would count as a persistent failure), and
afterwards every entry must validate and hold the program of its own key.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import mircuda as mc
from mircuda.compile import _persistent

PROCESSES, ROUNDS, KEYS = 8, 8, 3
ARCH = "compute_90"
TEMPLATE = 'extern "C" __global__ void k(int* o) { o[0] = %d; }\n'

WORKER = r'''
import json, os, sys, time
import mircuda as mc
directory, barrier, arch, template = sys.argv[1:5]
index, processes, rounds, keys = map(int, sys.argv[5:9])
ptx = mc.CompileOptions(output="ptx")
totals = dict(memory_hits=0, persistent_hits=0, compilations=0, persistent_failures=0)
for r in range(rounds):
    open(os.path.join(barrier, f"{r}-{index}"), "w").close()
    deadline = time.monotonic() + 120
    while sum(name.startswith(f"{r}-") for name in os.listdir(barrier)) < processes:
        assert time.monotonic() < deadline, "barrier timeout"
        time.sleep(0.001)
    compiler = mc.OfflineCompiler(arch, mc.CompilerConfig(cache_directory=directory))
    for k in range(keys):
        value = 1000 * r + k
        program = compiler.compile(mc.cuda_kernel(template % value, "k.cu"), ptx)
        assert f", {value};".encode() in program.image, program.image
    if r:
        if index == 0:
            previous = compiler.cache_key(mc.cuda_kernel(template % (1000 * (r - 1)), "k.cu"), ptx)
            try:
                os.unlink(os.path.join(directory, previous + ".mcm"))
            except FileNotFoundError:
                pass
        for k in range(keys):
            value = 1000 * (r - 1) + k
            program = compiler.compile(mc.cuda_kernel(template % value, "k.cu"), ptx)
            assert f", {value};".encode() in program.image, program.image
    s = compiler.cache_stats()
    for name in totals:
        totals[name] += getattr(s, name)
print(json.dumps(totals))
'''


def test_concurrent_processes_share_one_directory_safely(tmp_path: Path) -> None:
    directory, barrier = tmp_path / "cache", tmp_path / "barrier"
    barrier.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(directory), str(barrier), ARCH, TEMPLATE, str(i),
                               str(PROCESSES), str(ROUNDS), str(KEYS)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(PROCESSES)]
    results = [p.communicate(timeout=300) for p in procs]
    for p, (_out, err) in zip(procs, results):
        assert p.returncode == 0, err
    totals = [json.loads(out) for out, _ in results]
    assert sum(t["persistent_failures"] for t in totals) == 0
    assert sum(t["persistent_hits"] for t in totals) > 0
    # Every key was compiled at least once and looked up by all 8 processes in two rounds.
    assert all(t["compilations"] + t["persistent_hits"] == KEYS * (2 * ROUNDS - 1) for t in totals)

    compiler = mc.OfflineCompiler(ARCH)
    ptx = mc.CompileOptions(output="ptx")
    expected = {compiler.cache_key(mc.cuda_kernel(TEMPLATE % (1000 * r + k), "k.cu"), ptx): 1000 * r + k
                for r in range(ROUNDS) for k in range(KEYS)}
    files = sorted(directory.iterdir())
    assert not [f for f in files if not f.name.endswith(".mcm") or f.name.startswith(".")], "temporary files left"
    assert len(files) >= len(expected) - (ROUNDS - 1)  # process 0 deleted at most one entry per round
    for f in files:
        key = f.name[:-len(".mcm")]
        program = _persistent.decode_entry(f.read_bytes(), key, ARCH, mc.nvrtc_version())
        values = re.findall(rb"mov\.[bu]32\s+%r\d+, (\d+);", program.image)
        assert [int(v) for v in values] == [expected[key]]
