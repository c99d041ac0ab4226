"""benchmarks/c/launch_floor.c without a GPU: built with nvcc against a stand-in libcuda
(tests/data/standin_libcuda.c) that logs every driver call and plays the tick kernel (+1 per kernel
run), so the test sees which calls each mode makes, in which order, and the count it prints.
Skipped where nvcc is not found. The timing itself is not checked (it measures the stand-in)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mircuda.cli import _graph_floor
from mircuda.errors import MircudaError

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "benchmarks" / "c" / "launch_floor.c"
STANDIN = ROOT / "tests" / "data" / "standin_libcuda.c"
SETUP = ["cuInit 0", "cuDeviceGet 0", "cuDevicePrimaryCtxRetain 0", "cuCtxSetCurrent", "cuModuleLoadData",
         "cuModuleGetFunction", "cuStreamCreate 1", "cuMemAlloc 4096"]
"""The setup calls of the 4-argument form, as before the graph mode was added (device 0,
CU_STREAM_NON_BLOCKING = 1, a 4096-byte buffer)."""


@pytest.fixture(scope="module")
def floor(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mircuda.matmul._build import _find_nvcc

    try:
        nvcc = _find_nvcc()
    except MircudaError as exc:
        pytest.skip(f"no nvcc: {exc}")
    d = tmp_path_factory.mktemp("launch_floor")
    subprocess.run([str(nvcc), "-shared", "-Xcompiler", "-fPIC", "-o", str(d / "libcuda.so"), str(STANDIN)],
                   check=True, capture_output=True)
    subprocess.run([str(nvcc), "-O2", "-o", str(d / "launch_floor"), str(SOURCE), f"-L{d}", "-lcuda",
                    # DT_RPATH, searched before LD_LIBRARY_PATH (a GPU host's may hold the real libcuda)
                    "-Xlinker", "--disable-new-dtags", "-Xlinker", f"-rpath,{d}"], check=True, capture_output=True)
    (d / "tick.cubin").write_bytes(b"stand-in image")  # the stand-in never reads it
    return d


def run(floor: Path, tmp_path: Path, *args: str, symbol: str = "tick") -> tuple[subprocess.CompletedProcess[str],
                                                                                 list[str]]:
    log = tmp_path / "calls.log"
    log.unlink(missing_ok=True)
    done = subprocess.run([str(floor / "launch_floor"), str(floor / "tick.cubin"), symbol, *args],
                          capture_output=True, text=True, env={"STANDIN_CUDA_LOG": str(log)})
    return done, log.read_text().splitlines() if log.exists() else []


def test_four_arguments_launch_loop_unchanged(floor: Path, tmp_path: Path) -> None:
    done, calls = run(floor, tmp_path, "2", "1")
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()  # one line, as launch_overhead.py reads it
    assert float(line) >= 0
    batch = ["cuStreamSynchronize"] + ["cuLaunchKernel 1 32"] * 2
    assert calls == SETUP + batch * 4 + ["cuStreamSynchronize"]  # 3 warm-up batches + 1


def test_graph_mode_captures_instantiates_uploads_then_replays(floor: Path, tmp_path: Path) -> None:
    done, calls = run(floor, tmp_path, "2", "1", "3")
    assert done.returncode == 0, done.stderr
    us, counter = done.stdout.splitlines()
    assert float(us) >= 0
    assert counter == f"counter {_graph_floor.expected_count(3, 2, 1)}" == "counter 24"
    capture = (["cuMemsetD32 0 1024", "cuStreamBeginCapture 1"] + ["cuLaunchKernel 1 32"] * 3
               + ["cuStreamEndCapture", "cuGraphInstantiate 0", "cuGraphUpload"])
    batch = ["cuStreamSynchronize"] + ["cuGraphLaunch"] * 2
    assert calls == SETUP + capture + batch * 4 + ["cuStreamSynchronize", "cuMemcpyDtoH 4", "cuGraphExecDestroy",
                                                   "cuGraphDestroy"]
    assert _graph_floor.parse_output(done.stdout).counter == 24


def test_nodes_zero_is_the_launch_loop_on_the_given_device_with_a_count(floor: Path, tmp_path: Path) -> None:
    done, calls = run(floor, tmp_path, "5", "2", "0", "1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1] == "counter 25"  # 5 launches x (2 + 3 warm-up) batches
    assert calls[1] == "cuDeviceGet 1" and "cuStreamBeginCapture 1" not in calls
    assert calls.count("cuLaunchKernel 1 32") == 25


@pytest.mark.parametrize("args, name", [
    (["0", "1"], "CALLS"), (["2", "0"], "BATCHES"), (["2x", "1"], "CALLS"), (["2", ""], "BATCHES"),
    (["2", "1", "-1"], "NODES"), (["2", "1", "1", "1024"], "DEVICE"), (["2", "1", "99999999999"], "NODES")])
def test_bad_counts_are_refused_before_any_driver_call(floor: Path, tmp_path: Path, args: list[str],
                                                       name: str) -> None:
    done, calls = run(floor, tmp_path, *args)
    assert done.returncode == 2 and calls == []
    assert f"{name}: expected an integer in" in done.stderr and done.stdout == ""


@pytest.mark.parametrize("args", [["2"], ["2", "1", "1", "0", "extra"]])
def test_wrong_argument_count_prints_usage(floor: Path, tmp_path: Path, args: list[str]) -> None:
    done, calls = run(floor, tmp_path, *args)
    assert done.returncode == 2 and calls == [] and "usage:" in done.stderr


def test_a_failing_driver_call_is_named_and_exits_1(floor: Path, tmp_path: Path) -> None:
    done, _ = run(floor, tmp_path, "2", "1", "1", symbol="missing")
    assert done.returncode == 1 and done.stdout == ""
    assert "cuModuleGetFunction(&fn, mod, argv[2]) failed: CUDA_ERROR_NOT_FOUND" in done.stderr
    done, _ = run(floor, tmp_path, "2", "1", "1", "7")  # the stand-in has devices 0 and 1
    assert done.returncode == 1 and "failed: CUDA_ERROR_INVALID_DEVICE" in done.stderr


def test_cfloor_runs_the_program_and_reads_its_output(floor: Path, tmp_path: Path) -> None:
    c = _graph_floor.CFloor(floor / "launch_floor", floor / "tick.cubin", "tick", 1)
    assert c.command(100, 200, 20)[2:] == ["tick", "200", "20", "100", "1"]
    got = c.run(10, 3, 2)
    assert got.counter == _graph_floor.expected_count(10, 3, 2) == 150 and got.host_us >= 0
    bad = _graph_floor.CFloor(floor / "launch_floor", floor / "tick.cubin", "missing", 0)
    with pytest.raises(_graph_floor.FloorUnavailable, match=r"status 1: .*CUDA_ERROR_NOT_FOUND"):
        bad.run(1, 1, 1)


BATCH_SOURCE = ROOT / "benchmarks" / "c" / "launch_batch.c"
CALL_BATCH = """
import ctypes, sys
fn = ctypes.CDLL(sys.argv[1]).mircuda_launch_batch_us
fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int]
fn.restype = ctypes.c_double
counter = ctypes.c_uint32(0)  # the stand-in's kernel adds 1 to the word its pointer argument names
print(fn(0x1234, 0x5678, ctypes.addressof(counter), int(sys.argv[2])), counter.value)
"""


def test_the_batch_function_of_launch_paired_synchronizes_then_launches_calls_times(floor: Path,
                                                                                      tmp_path: Path) -> None:
    # benchmarks/launch_paired.py's C side, against the stand-in libcuda in a process of its own (a GPU host's
    # real libcuda, loaded by this process, would take the calls otherwise)
    import sys

    from mircuda.matmul._build import _find_nvcc

    lib = tmp_path / "liblaunch_batch.so"
    subprocess.run([str(_find_nvcc()), "-O2", "-shared", "-Xcompiler", "-fPIC", "-o", str(lib), str(BATCH_SOURCE),
                    f"-L{floor}", "-lcuda", "-Xlinker", "--disable-new-dtags", "-Xlinker", f"-rpath,{floor}"],
                   check=True, capture_output=True)
    log = tmp_path / "calls.log"
    done = subprocess.run([sys.executable, "-c", CALL_BATCH, str(lib), "3"], capture_output=True, text=True,
                          env={"STANDIN_CUDA_LOG": str(log)})
    assert done.returncode == 0, done.stderr
    us, count = done.stdout.split()
    assert float(us) >= 0 and count == "3"  # µs per launch (not a negated CUresult); every launch got the argument
    assert log.read_text().splitlines() == ["cuStreamSynchronize"] + ["cuLaunchKernel 1 32"] * 3
