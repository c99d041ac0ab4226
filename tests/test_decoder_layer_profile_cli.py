"""``python -m mircuda decoder-layer-profile`` without a GPU: its flags (checked before the driver), the
layer's bytes, its rows' arithmetic (TB/s, the goal, ratios to cuBLAS) and the goal lines."""

from __future__ import annotations

import subprocess
import sys

import pytest
from gpu_probe import gpu_unavailable_reason

from mircuda.cli import _decoder_layer_profile as dl
from mircuda.cli import _parser, main


def test_the_command_is_listed_with_the_issue_defaults(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    text = capsys.readouterr().out
    assert info.value.code == 0 and ("    decoder-layer-profile " in text or "    decoder-layer-profile\n" in text)
    args = _parser().parse_args(["decoder-layer-profile"])
    assert args.m == (1, 8, 16) and args.dtype == "bf16" and args.sets is None
    assert args.json == "benchmarks/results/decoder_layer_profile.json" and args.func is dl.decoder_layer_profile
    sub = _parser().parse_args(["decoder-layer-profile", "--m", "16", "--sets", "3", "--dtype", "f16"])
    assert sub.m == (16,) and sub.sets == 3 and sub.dtype == "f16"


def test_the_help_says_what_the_rows_are(capsys) -> None:
    """``decoder-layer-profile --help`` printed only the flags: nothing on the rows, the static_weights row
    among them, or the defaults of --device, --calls and --repeats."""
    with pytest.raises(SystemExit) as info:
        main(["decoder-layer-profile", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert info.value.code == 0
    assert "plans made with static_weights=True" in text and "not the goal's row" in text
    assert "CUDA device ordinal to run on (default 0)" in text and "(default 20)" in text and "default 15)" in text


def test_the_layer_is_llama_3_8b() -> None:
    assert [(n, k) for _, n, k in dl.LAYER] == [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)]
    assert dl.layer_bytes() == 436_207_616  # the issue's 436 MB of BF16 weights
    assert dl.layer_bytes(1) == 218_103_808


def test_rows_rates_goals_and_ratios() -> None:
    nbytes = dl.layer_bytes()
    ours = dl.layer_row(dl.GRAPH_PATH, "bf16", 1, 100.0, nbytes)
    assert ours.tbps == pytest.approx(4.36207616)
    assert ours.goal_us == pytest.approx(109.051904) and ours.goal == "met"
    slow = dl.layer_row(dl.GRAPH_PATH, "bf16", 16, 120.0, nbytes)
    assert slow.goal == "NOT met"
    rows = [ours, dl.layer_row(dl.GRAPH_PATH + ", single", "bf16", 1, 110.0, nbytes),
            dl.layer_row("  qkv 6144x4096 alone", "bf16", 1, 20.0, 6144 * 4096 * 2),
            dl.layer_row(dl.CUBLAS_GRAPH_PATH, "bf16", 1, 117.4, nbytes),
            dl.layer_row(dl.CUBLAS_GRAPH_PATH + ", single", "bf16", 1, 121.0, nbytes), slow]
    dl.ratios(rows)
    assert rows[0].ratio_to_cublas == pytest.approx(1.174)
    assert rows[1].ratio_to_cublas == pytest.approx(1.1)  # single against cuBLAS's single
    assert rows[2].ratio_to_cublas is None  # one projection is not compared with a whole layer
    assert rows[3].ratio_to_cublas is None and rows[5].ratio_to_cublas is None  # no cuBLAS row at M = 16
    assert dl.goal_lines(rows) == [
        "M = 1 bf16: 100.0 µs = 4.36 TB/s (goal >= 4.0 TB/s = <= 109.1 µs: met), cuBLAS/x 1.17",
        "M = 16 bf16: 120.0 µs = 3.64 TB/s (goal >= 4.0 TB/s = <= 109.1 µs: NOT met)"]
    text = str(dl.table("t", rows))
    assert "<=109.1" in text and "NOT met" in text


@pytest.mark.parametrize("argv, flag", [(["--dtype", "e4m3"], "--dtype"),
                                        (["--json", "/nonexistent-dir/x.json"], "--json")])
def test_bad_flags_are_named_before_the_driver(argv, flag, capsys) -> None:
    assert main(["decoder-layer-profile", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: ContractError: {flag}: expected ") and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("argv", [["--m", "0"], ["--m", "1,x"], ["--sets", "two"], ["--sets", "1"]])
def test_bad_values_exit_2_with_one_line(argv, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["decoder-layer-profile", *argv])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.startswith("error: python -m mircuda decoder-layer-profile: argument --")
    assert len(err.splitlines()) == 1


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="this machine has a usable driver")
def test_without_a_gpu_it_fails_cleanly(tmp_path) -> None:
    out = subprocess.run([sys.executable, "-m", "mircuda", "decoder-layer-profile", "--json",
                          str(tmp_path / "r.json")], capture_output=True, text=True)
    assert out.returncode == 2 and "error:" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "r.json").exists()


# -- the command's flow on a stand-in device (numpy buffers, eager graphs) ------------------------------------
# The H200 run is the real test (tests/gpu/test_decoder_layer_profile_gpu.py); this one checks, without a GPU,
# that the command wires plans, graphs, sets, checks, timing and the JSON together as documented.

class _Buffer:
    def __init__(self, array) -> None:
        self.a = array.copy()

    def __len__(self) -> int:
        return len(self.a)

    def free(self, stream) -> None:
        self.a = None


class _Stream:
    handle = 1

    def __init__(self, context) -> None:
        self.context = context
        self.captures = 0

    def upload(self, pool, array):
        buf = _Buffer(array.reshape(-1))
        buf.uploaded = True  # the first weight set (the others are device copies) and the inputs
        return buf

    def download(self, buffer):
        return buffer.a.copy()

    def copy_device_range(self, src, s, dst, d, n) -> None:
        dst.a[d:d + n] = src.a[s:s + n]

    def copy_to_device(self, host, dst) -> None:
        dst.a[:] = host.a[:len(dst)]

    def synchronize(self) -> None:
        pass

    def capture(self, resources, fn):
        self.captures += 1
        return _Graph(resources, fn)


class _Graph:
    def __init__(self, resources, fn) -> None:
        self.resources, self.fn, self.closed = resources, fn, False

    def launch(self, stream) -> None:
        assert not self.closed
        self.fn(self.resources)

    def close(self) -> None:
        self.closed = True


class _Pinned(_Buffer):
    def write_prefix(self, values) -> None:
        self.a[:len(values)] = values

    def close(self) -> None:
        pass


class _Info:
    name, arch, multiprocessor_count, l2_cache_bytes = "stand-in", "sm_90", 132, 1 << 10


class _Context:
    def __init__(self) -> None:
        self.stream = _Stream(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def device_info(self):
        return _Info()

    def create_stream(self):
        return self.stream

    def default_memory_pool(self):
        return _Pool()

    def allocate_pinned(self, dtype, n):
        import numpy as np

        return _Pinned(np.zeros(n, dtype=dtype))


class _Driver:
    def __init__(self) -> None:
        self.context = _Context()

    def device(self, ordinal):
        return ordinal

    def create_context(self, device):
        return self.context


class _Pool:
    def allocate(self, dtype, stream, n):
        import numpy as np

        return _Buffer(np.full(n, np.nan, dtype=np.float32).astype(dtype))


def _fake_device(monkeypatch, factor: float = 1.0, first_set_factor: float | None = None):
    import numpy as np

    import mircuda as mc
    import mircuda.matmul._vector as vector
    import mircuda.timing as timing

    made: list[bool] = []  # each plan's static_weights, in order
    closed: list[bool] = []  # the same, for each plan closed

    class Plan:
        def __init__(self, context, stream, spec, input, library=None, static_weights=False) -> None:
            self.spec, self.kernel_name, self.splits = spec, f"stand_in_{spec.m}", 1
            self.static_weights = static_weights
            made.append(static_weights)

        def describe(self) -> str:
            return "stand-in; programmatic dependent launch"

        def execute(self, stream, a, b, c) -> None:
            s = self.spec
            w = b.a.astype(np.float64).reshape(s.n, s.k)
            f = first_set_factor if first_set_factor is not None and getattr(b, "uploaded", False) else factor
            c.a[:] = (f * (a.a.astype(np.float64).reshape(s.m, s.k) @ w.T)).reshape(-1).astype(c.a.dtype)

        def close(self) -> None:
            closed.append(self.static_weights)

    class Timer:
        def __init__(self, *args) -> None:
            pass

        def median(self, enqueue, calls, repeats) -> float:
            for i in range(calls):
                enqueue(i)
            return 100.0

        def close(self) -> None:
            pass

    driver = _Driver()
    monkeypatch.setattr(dl, "LAYER", (("qkv", 48, 32), ("o", 32, 32), ("gate_up", 96, 32), ("down", 32, 64)))
    monkeypatch.setattr(mc.Driver, "initialize", staticmethod(lambda: driver))
    monkeypatch.setattr(mc, "DenseMatmulPlan", Plan)
    monkeypatch.setattr(vector, "shared_compiler", lambda context: None)
    monkeypatch.setattr(timing, "StreamTimer", Timer)
    monkeypatch.setattr(dl, "_torch_or_reason", lambda handle: (None, "cuBLAS not measured: stand-in"))
    driver.made, driver.closed = made, closed
    return driver


def test_the_flow_on_a_stand_in_device(monkeypatch, tmp_path, capsys) -> None:
    import json

    driver = _fake_device(monkeypatch)
    path = tmp_path / "layer.json"
    assert main(["decoder-layer-profile", "--m", "1,3", "--sets", "3", "--calls", "2", "--json", str(path)]) == 0
    result = json.loads(path.read_text())
    assert result["failures"] == [] and result["weight_sets"] == 3
    assert result["weight_bytes"] == 2 * (48 * 32 + 32 * 32 + 96 * 32 + 32 * 64)
    alone = ["  qkv 48x32 alone", "  o 32x32 alone", "  gate_up 96x32 alone", "  down 32x64 alone", dl.ALONE_SUM_PATH]
    assert [(r["path"], r["m"]) for r in result["rows"]] == [
        (path, m) for m in (1, 3)
        for path in (dl.GRAPH_PATH, dl.GRAPH_PATH + ", single", dl.STATIC_PATH, dl.CHAINED_PATH, dl.DIRECT_PATH,
                     *alone)]
    static = result["rows"][2]  # the same layer from plans made with static_weights=True: shown, not the goal's row
    assert static["note"].startswith("opt-in") and driver.made.count(True) == 2 * 4
    assert driver.made.count(False) == 2 * 4
    assert "static_weights=True: the back-to-back graph of plans made with that promise" in result["method"]
    assert not any(line.startswith("M") and "static" in line for line in result["goals"])
    assert static["goal"] == "-" and result["rows"][0]["goal"] == "NOT met"  # like the chained row: not the goal's
    assert sorted(driver.closed) == sorted(driver.made)  # the promised plans are closed too (they were left open)
    qkv = result["rows"][5]
    assert qkv["tbps"] == pytest.approx(48 * 32 * 2 / 100e-6 / 1e12) and qkv["note"] == "stand_in_1, 3 weight banks"
    assert result["rows"][9]["us"] == 400.0  # the four alone (100 µs each on the stand-in timer), summed
    assert result["rows"][0]["note"].startswith("PDL on 4/4 launches; qkv: stand_in_1")
    chained = result["rows"][3]  # one replay runs the 3 sets' layers: the stand-in's 100 µs per replay / 3
    assert chained["us"] == pytest.approx(100.0 / 3) and chained["note"].startswith("3 layers (one per weight set)")
    assert chained["ratio_to_cublas"] is None and chained["goal"] == "-"  # not the goal's measure
    assert "layers chained: every set's layer in one graph" in result["method"]
    assert driver.context.stream.captures == 14  # per M: one graph per weight set, twice, and the chained one
    assert result["notes"] == ["cuBLAS not measured: stand-in"]
    assert "goal: M = 1 bf16: 100.0 µs" in capsys.readouterr().out


def test_a_wrong_product_fails_on_a_stand_in_device(monkeypatch, tmp_path, capsys) -> None:
    import json

    _fake_device(monkeypatch, factor=1.1)
    path = tmp_path / "wrong.json"
    assert main(["decoder-layer-profile", "--m", "2", "--sets", "2", "--calls", "1", "--json", str(path)]) == 1
    failures = json.loads(path.read_text())["failures"]
    # 2 graphs x 4 projections, as many with static_weights=True, then the chained graph's 2 layers x 4
    assert len(failures) == 24 and failures[0].startswith("graph of set 0, M=2 qkv 48x32: relative error")
    assert failures[8].startswith("static_weights graph of set 0, M=2 qkv 48x32: relative error")
    assert failures[16].startswith("chained graph, layer 0 (weight set 0), M=2 qkv 48x32: relative error")
    assert failures[20].startswith("chained graph, layer 1 (weight set 1), M=2 qkv 48x32: relative error")
    assert "FAILED: graph of set 1" in capsys.readouterr().err


def test_the_chained_graph_checks_every_layer_not_only_the_last(monkeypatch, tmp_path) -> None:
    """Only the first weight set's layer is wrong: its own graph fails, and so must its layer in the chained
    graph (each layer writes its own outputs; with one output set for all, the last layer's correct values
    overwrote the first's and the chained graph passed)."""
    import json

    _fake_device(monkeypatch, first_set_factor=1.1)
    path = tmp_path / "first.json"
    assert main(["decoder-layer-profile", "--m", "2", "--sets", "3", "--calls", "1", "--json", str(path)]) == 1
    failures = json.loads(path.read_text())["failures"]
    assert [f.split(": ")[0] for f in failures] == [
        f"{where}, M=2 {name} {n}x{k}"
        for where in ("graph of set 0", "static_weights graph of set 0", "chained graph, layer 0 (weight set 0)")
        for name, n, k in dl.LAYER]


class _FakeTorch:
    note = "torch stand-in"

    def __init__(self, fail: bool) -> None:
        self.fail, self.replays, self.released = fail, 0, 0

    def weights(self, dtype, sets):  # type: ignore[no-untyped-def]
        return [["w"] * 4 for _ in range(sets)]

    def graphs(self, m, tw):  # type: ignore[no-untyped-def]
        if self.fail:
            raise RuntimeError("capture refused")
        return ["g"] * len(tw)

    def replay(self, graphs, i) -> None:
        self.replays += 1

    def release_graphs(self) -> None:
        self.released += 1

    def release(self) -> None:
        pass


@pytest.mark.parametrize("fail", [False, True])
def test_cublas_rows_or_the_reason_they_are_missing(monkeypatch, tmp_path, fail) -> None:
    import json

    _fake_device(monkeypatch)
    fake = _FakeTorch(fail)
    monkeypatch.setattr(dl, "_torch_or_reason", lambda handle: (fake, ""))
    path = tmp_path / "t.json"
    assert main(["decoder-layer-profile", "--m", "1", "--sets", "2", "--calls", "2", "--json", str(path)]) == 0
    result = json.loads(path.read_text())
    cublas = [r for r in result["rows"] if r["path"].startswith("cuBLAS")]
    assert fake.released == 1
    if fail:
        assert cublas == [] and result["notes"] == ["cuBLAS graph at M = 1 not measured (RuntimeError: capture refused)"]
    else:
        assert [r["path"] for r in cublas] == [dl.CUBLAS_GRAPH_PATH, dl.CUBLAS_GRAPH_PATH + ", single"]
        assert fake.replays == 3 and result["notes"] == []
        graph = next(r for r in result["rows"] if r["path"] == dl.GRAPH_PATH)
        assert graph["ratio_to_cublas"] == 1.0  # the stand-in timer says 100 µs for every path
        chained = next(r for r in result["rows"] if r["path"] == dl.CHAINED_PATH)
        assert chained["ratio_to_cublas"] is None  # several layers per graph: no cuBLAS row measures that
