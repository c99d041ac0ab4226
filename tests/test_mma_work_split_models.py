"""CPU models of the work split and fragment pairing of the tensor-core decode kernels, each mirrored line by line
from its source (a test fails when the source no longer has the lines it mirrors), and a path analysis of the PTX of
fp4_mma_bf16's cluster split. No GPU:

- fp4_mma_bf16 with ``split_k`` (``MIRCUDA_FP4_SPLIT_K``): on the launch the plans make, the cluster's
  ``split_k x warps`` warps take every K step of their row block exactly once through the register ring, every lane's
  columns of every step inside K or zero (and inside K wherever ``MIRCUDA_FP4_FULL_STEPS`` drops the predicate), and
  rank 0's warp 0 alone stores each output row once;
- every path through the split kernel's PTX arrives at and waits on the cluster barrier exactly twice, in turn; the
  remote stores into rank 0's shared memory lie between the two phases, and no path returns before the second wait
  (rank 0's shared memory outlives the others' stores);
- blockwise_fp8_mma's load ring (``MIRCUDA_FP8_STAGES``): every whole 128-K block is consumed exactly once, the
  partial one once by the warp next in turn, each consumed slot holding the K-block loaded for it;
- its sm_90 cvt decode (``MIRCUDA_FP8_CVT``): the FP16 m16n8k16 fragments built from the decoded pairs multiply each
  weight column by the same column of the activations, every column of the 128-K block exactly once.
"""

from __future__ import annotations

import re
from importlib import resources

import pytest

import mircuda as mc
from mircuda.matmul._fp4 import FP4_MMA_SYMBOL, fp4_mma_options, fp4_mma_source, gemv_launch, mma_step_columns


def kernel_text(name: str) -> str:
    return resources.files("mircuda").joinpath(f"cuda_src/{name}").read_text()


# ------------------------------------------------------------------ fp4_mma_bf16: steps of a cluster split

FP4_SPLIT_LINES = (
    "const int rank = (int)cluster_rank();  // 0 without a split",
    "const long long row0 = (long long)cluster_index() * (16 * kTiles);",
    "const int steps = (k + kChunk - 1) / kChunk;",
    "const int stride = warps * kSplit;",
    "int step = rank * warps + warp;",
    "if (step + d * stride < steps) load_stage(ring[d], op, step + d * stride);",
    "while (step < steps) {",
    "const int ahead = step + (kStages - 1) * stride;",
    "if (ahead < steps) load_stage(ring[(d + kStages - 1) % kStages], op, ahead);",
    "consume(acc, ring[d]);",
    "step += stride;",
    "const bool in = kFullSteps || col < op.k;",
    "const int col = step * kChunk + kE * op.t;",
    "if (rank != 0 || warp != 0) return;",
    "long long row = row0 + 8 * r + g;  // r = 2 tile + half: 16 tile + 8 half + g",
    "const long long row = row0 + 16 * tt + g + 8 * (e >> 1);",
    "#define MIRCUDA_FP4_CLUSTER __cluster_dims__(MIRCUDA_FP4_SPLIT_K, 1, 1)",
    # the file's own account of the work split says what the model checks
    "cluster b's C blocks own those rows instead, block rank r's warp w takes",
    "steps r warps + w, + C warps, ..., the blocks' sums meet in rank 0's shared memory and rank 0's warp 0 stores.",
)


def ring(start: int, stride: int, count: int, stages: int) -> list[int]:
    """The K steps (or K-blocks) one warp consumes, in order, through the unrolled register ring of the kernels
    (slot d holds what was loaded for it; a slot is consumed only after its load)."""
    slots: list[int | None] = [None] * stages
    step = start
    for d in range(stages - 1):
        if step + d * stride < count:
            slots[d] = step + d * stride
    consumed = []
    while step < count:
        for d in range(stages):
            if step < count:
                ahead = step + (stages - 1) * stride
                if ahead < count:
                    slots[(d + stages - 1) % stages] = ahead
                assert slots[d] == step, (slots, d, step)  # the slot holds this step's loads
                consumed.append(slots[d])
                slots[d] = None
                step += stride
    return consumed


def fp4_split_model(n: int, k: int, rows: int, warps: int, split: int, stages: int) -> tuple[dict, list[int]]:
    """fp4_mma_bf16 on the plans' launch (``gemv_launch`` x ``split``): the columns each cluster's lanes load
    (``(row block, column) -> count``, columns past K excluded) and the output rows rank 0's warp 0 stores."""
    wide = k % 32 == 0
    e, chunk = (32 if wide else 16), mma_step_columns(wide)
    full_steps = k % chunk == 0  # fp4_mma_options: MIRCUDA_FP4_FULL_STEPS
    blocks, threads = gemv_launch(n, rows, warps)
    assert threads == 32 * warps
    steps = (k + chunk - 1) // chunk
    loaded: dict[tuple[int, int], int] = {}
    stored: list[int] = []
    for block in range(blocks * split):
        cluster, rank = block // split, block % split
        row0 = cluster * rows
        for warp in range(warps):
            for step in ring(rank * warps + warp, warps * split, steps, stages):
                assert 0 <= step < steps
                for t in range(4):
                    col = step * chunk + e * t
                    if full_steps:
                        assert col + e <= k, (col, k)  # no predicate: every lane's columns inside K
                    if full_steps or col < k:
                        assert col + e <= k  # K % E == 0: all of the lane's columns inside K
                        loaded[(cluster, col)] = loaded.get((cluster, col), 0) + 1
            if rank == 0 and warp == 0:
                for tt in range(rows // 16):
                    for g in range(8):
                        for half in range(2):
                            row = row0 + 16 * tt + g + 8 * half
                            if row < n:
                                stored.append(row)
    return loaded, stored


@pytest.mark.parametrize("split", [1, 2, 3, 4])
@pytest.mark.parametrize("rows", [16, 32])
@pytest.mark.parametrize("n, k", [(16, 16), (33, 96), (100, 4096), (257, 4112), (64, 1040), (31, 14336)], ids=str)
def test_a_cluster_takes_every_k_step_of_its_row_block_once_and_rank_0_stores_each_row_once(n, k, rows, split) -> None:
    """Any warps 1..8 and stages 2..4: each row block's K columns (K a multiple of 16; partial steps too) are loaded
    by exactly one lane of one warp of one block of its cluster, and each output row is stored once (rows past N
    never)."""
    wide = k % 32 == 0
    e = 32 if wide else 16
    clusters = -(-n // rows)
    for warps in range(1, 9):
        for stages in (2, 3, 4):
            loaded, stored = fp4_split_model(n, k, rows, warps, split, stages)
            want = {(c, col): 1 for c in range(clusters) for col in range(0, k, e)}
            assert loaded == want, (warps, stages)
            assert sorted(stored) == list(range(n)), (warps, stages)


# ------------------------------------------------------------------ fp4_mma_bf16: the cluster barrier on every path


def cluster_paths(body: str) -> set[tuple[str, tuple[int, int]]]:
    """Walks every path of a PTX entry: ``(instruction, (cluster arrives, cluster waits) before it)`` for the
    cluster barriers, the remote shared stores and the returns. A thread may not arrive twice without a wait between
    (PTX ISA "barrier.cluster"), and no cluster barrier or remote store may be predicated (a branch in disguise)."""
    lines = [s for s in (raw.split("//")[0].strip() for raw in body.splitlines()) if s and s not in ("{", "}")]
    labels = {line[:-1]: i for i, line in enumerate(lines) if re.fullmatch(r"[\w$]+:", line)}
    seen: dict[int, set[tuple[int, int]]] = {}
    events: set[tuple[str, tuple[int, int]]] = set()
    work = [(0, (0, 0))]
    while work:
        i, state = work.pop()
        if i >= len(lines) or state in seen.setdefault(i, set()):
            continue
        seen[i].add(state)
        op = re.sub(r"^@!?%\w+\s+", "", lines[i])
        predicated = op != lines[i]
        arrives, waits = state
        if op.startswith(("barrier.cluster", "st.shared::cluster", "ret", "exit")):
            assert not (predicated and not op.startswith(("ret", "exit"))), lines[i]
            events.add((op.split()[0].rstrip(";"), state))
        if op.startswith("barrier.cluster.arrive"):
            assert arrives == waits, (lines[i], state)
            arrives += 1
        elif op.startswith("barrier.cluster.wait"):
            assert arrives == waits + 1, (lines[i], state)
            waits += 1
        assert arrives <= 4, "a cluster barrier inside a loop"
        branch = re.match(r"bra(?:\.uni)?\s+([\w$]+);", op)
        if branch:
            work.append((labels[branch.group(1)], (arrives, waits)))
        if (branch or op.startswith(("ret", "exit"))) and not predicated:
            continue
        work.append((i + 1, (arrives, waits)))
    return events


@pytest.mark.parametrize("m, rows, split, decode, stages, k", [
    (16, 32, 4, "table", 4, 4096),   # the table decoder's __syncthreads, two tiles, the most shared memory
    (4, 32, 2, "e4m3", 3, 4112),     # partial steps (load predicate), the default split's shape of blocks
    (1, 16, 3, "bytes", 2, 4096),
    (9, 16, 2, "pairs", 2, 1040),    # 8-byte loads
])
def test_every_path_of_the_split_kernel_meets_both_cluster_barriers_before_it_returns(m, rows, split, decode, stages,
                                                                                     k) -> None:
    defines = dict(fp4_mma_options(m, "linear", k % 32 == 0, decode, rows, stages, None, k, split).defines)
    text = mc.compile_program(fp4_mma_source(), "compute_90", mc.CompileOptions(defines=defines,
                                                                                output="ptx")).image.decode()
    events = cluster_paths(text[text.index(f".entry {FP4_MMA_SYMBOL}"):])
    kinds = {name.split(".")[0] + ("" if "." not in name else "." + name.split(".")[1]) for name, _ in events}
    assert {"barrier.cluster", "st.shared::cluster", "ret"} <= kinds, events
    for name, (arrives, waits) in events:
        if name == "ret" or name == "exit":
            assert (arrives, waits) == (2, 2), events  # no return before the second wait, on any path
        elif name.startswith("st.shared::cluster"):
            assert (arrives, waits) == (1, 1), events  # after every block runs, before the release
    assert ("barrier.cluster.arrive.relaxed.aligned", (0, 0)) in events
    assert ("barrier.cluster.arrive.release.aligned", (1, 1)) in events


def test_the_path_walk_finds_a_return_before_the_barriers() -> None:
    """The walker itself: a path that skips the second phase (an early return) is reported at (1, 1)."""
    body = """
        barrier.cluster.arrive.relaxed.aligned;
        barrier.cluster.wait.acquire.aligned;
        @%p1 bra $L__BB0_2;
        st.shared::cluster.f32 [%r1], %f1;
        barrier.cluster.arrive.release.aligned;
        barrier.cluster.wait.acquire.aligned;
    $L__BB0_2:
        ret;
    """
    assert cluster_paths(body) >= {("ret", (1, 1)), ("ret", (2, 2))}
    with pytest.raises(AssertionError):
        cluster_paths("barrier.cluster.arrive.aligned;\nbarrier.cluster.arrive.aligned;\nret;")


# ------------------------------------------------------------------ blockwise_fp8_mma: the load ring

FP8_RING_LINES = (
    "int kb = warp;",
    "const int full = k / kBlockK;  // K-blocks whose 128 columns are all inside K",
    "if (kb + d * warps < full) load_stage(ring[d], op, kb + d * warps, 0x7fffffff);",
    "while (kb < full) {",
    "const int ahead = kb + (kRing - 1) * warps;",
    "if (ahead < full) load_stage(ring[(d + kRing - 1) % kRing], op, ahead, 0x7fffffff);",
    "consume(acc, ring[d]);",
    "kb += warps;",
    "if (full * kBlockK < k && warp == full % warps) {",
    "load_stage(st, op, full, k);",
    "const int col = kb * kBlockK + s * kStep + 16 * op.t;",
    "const bool in = col < bound;",
)


@pytest.mark.parametrize("k", [16, 112, 128, 144, 256, 1040, 4096, 4112, 14336], ids=str)
def test_the_fp8_ring_consumes_every_k_block_once(k) -> None:
    """Warps 1..8, stages 2..4: the whole K-blocks each once through the ring, the partial one (K % 128 != 0) once
    by warp ``full % warps``; the lanes' 16-column loads cover [0, K) exactly once (past K: zeros, not loaded)."""
    full = k // 128
    for warps in range(1, 9):
        for stages in (2, 3, 4):
            blocks: list[int] = []
            columns: list[int] = []
            for warp in range(warps):
                mine = ring(warp, warps, full, stages)
                if full * 128 < k and warp == full % warps:
                    mine.append(full)
                blocks += mine
                for kb in mine:
                    bound = k if kb == full else 0x7FFFFFFF
                    columns += [c for s in range(2) for t in range(4) if (c := kb * 128 + s * 64 + 16 * t) < bound]
            assert sorted(blocks) == list(range(-(-k // 128))), (warps, stages)
            assert sorted(columns) == list(range(0, k, 16)), (warps, stages)


# ------------------------------------------------------------------ blockwise_fp8_mma: the sm_90 cvt decode pairing

FP8_CVT_LINES = (
    "cvt.rn.f16x2.e4m3x2 %0, l;\\n\\tcvt.rn.f16x2.e4m3x2 %1, h;",
    "mov.b32 {l, h}, %2;",
    "e4m3_halves(v.x, h[0], h[4]);",
    "e4m3_halves(v.y, h[1], h[5]);",
    "e4m3_halves(v.z, h[2], h[6]);",
    "e4m3_halves(v.w, h[3], h[7]);",
    "for (int j = 0; j < kN8; ++j) decode16(st.x[s][j], xh[s][j]);",
    "decode16(st.w[i][s][0], lo);",
    "decode16(st.w[i][s][1], hi);",
    "for (int q = 0; q < 8; q += 2)",
    "mma_f16(part[j], lo[q], hi[q], lo[q + 1], hi[q + 1], xh[s][j][q], xh[s][j][q + 1]);",
    "const int col = kb * kBlockK + s * kStep + 16 * op.t;",
    "st.w[i][s][0] = in ? load_weights(op.wlo[i] + col) : zero;",
    "st.w[i][s][1] = in ? load_weights(op.whi[i] + col) : zero;",
)


@pytest.mark.parametrize("source, model, lines", [
    ("fp4_mma_gemv.cu", "fp4_split_model", FP4_SPLIT_LINES),
    ("fp8_mma_gemv.cu", "the ring model", FP8_RING_LINES),
    ("fp8_mma_gemv.cu", "the cvt pairing model", FP8_CVT_LINES),
], ids=["fp4-split", "fp8-ring", "fp8-cvt"])
def test_each_model_mirrors_its_kernel_source(source, model, lines) -> None:
    text = kernel_text(source)
    missing = [line for line in lines if line not in text]
    assert not missing, f"{source} changed: update {model} ({missing})"


@pytest.mark.parametrize("swapped", [False, True])
def test_the_fp8_cvt_decode_multiplies_each_weight_column_by_the_same_activation_column(swapped) -> None:
    """The m16n8k16 FP16 fragments (PTX ISA: A reg r = rows g + 8 (r & 1), k 2t + 8 (r >> 1) + half; B reg r =
    k 2t + 8 r + half, column g) built from decode16's pairs (register bytes 0, 1 -> h[i], bytes 2, 3 -> h[4 + i];
    ``swapped``: whichever byte of a pair cvt puts in the low half, as long as both operands are decoded alike) give
    each (weight row, activation row) output the products of weight column c and activation column c, for every c of
    the 128-K block exactly once."""

    def decode16(operand: str, row: int, s: int, t: int) -> list[tuple[str, int, int] | None]:
        # the lane's 16 bytes [16 t, 16 t + 16) of step s: word i (.x .. .w) byte b is column 64 s + 16 t + 4 i + b
        def element(i: int, b: int) -> tuple[str, int, int]:
            return (operand, row, 64 * s + 16 * t + 4 * i + b)

        halves: list = [None] * 16  # h[slot] as (low half, high half)
        for i in range(4):
            for slot, (b0, b1) in ((i, (0, 1)), (4 + i, (2, 3))):
                pair = (element(i, b0), element(i, b1))
                halves[2 * slot: 2 * slot + 2] = pair[::-1] if swapped else pair
        return halves

    products: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for s in range(2):
        lanes = {(g, t): (decode16("w", g, s, t), decode16("w", g + 8, s, t), decode16("x", g, s, t))
                 for g in range(8) for t in range(4)}
        for q in range(0, 8, 2):
            a = [[None] * 16 for _ in range(16)]  # a[row][k]
            b = [[None] * 8 for _ in range(16)]  # b[k][col]
            for (g, t), (lo, hi, xh) in lanes.items():
                regs_a = (lo[2 * q: 2 * q + 2], hi[2 * q: 2 * q + 2], lo[2 * q + 2: 2 * q + 4],
                          hi[2 * q + 2: 2 * q + 4])
                for r, reg in enumerate(regs_a):
                    for half in range(2):
                        a[g + 8 * (r & 1)][2 * t + 8 * (r >> 1) + half] = reg[half]
                for r, reg in enumerate((xh[2 * q: 2 * q + 2], xh[2 * q + 2: 2 * q + 4])):
                    for half in range(2):
                        b[2 * t + 8 * r + half][g] = reg[half]
            for row in range(16):
                for col in range(8):
                    for kk in range(16):
                        wt, xt = a[row][kk], b[kk][col]
                        assert wt is not None and xt is not None
                        assert wt[1] == row and xt[1] == col  # the fragment's row and column
                        products.setdefault((row, col), []).append((wt[2], xt[2]))
    for key, pairs in products.items():
        assert sorted(pairs) == [(c, c) for c in range(128)], key


def test_the_engine_names_every_split_k_refusal_it_raises() -> None:
    """Fp4Gemv raises check_split_k's refusals (the plans' docstrings list them); its own Raises section did not."""
    from mircuda.matmul._fp4 import Fp4Gemv, check_split_k

    raises = " ".join((Fp4Gemv.__doc__ or "").split("Raises:")[1].split())
    assert "``split_k``" in raises and ":func:`check_split_k`" in raises
    with pytest.raises(mc.ContractError) as info:
        check_split_k(2, "fp4_matvec_bf16", "sm_90")
    assert info.value.argument == "split_k"


def test_the_vector_plans_launch_config_is_what_its_docstring_says_with_a_split(monkeypatch) -> None:
    """EngineViews.launch_config said ``ceil(N / rows)`` blocks (or fewer with row warps); a BlockScaledFp4VectorPlan
    running fp4_mma_bf16 with split_k C (given, or the default split) launches C times as many."""
    from types import SimpleNamespace

    from mircuda.matmul import _fp4
    from mircuda.matmul._spec import EngineViews

    info = SimpleNamespace(multiprocessor_count=132, supports_programmatic_launch=True, compute_capability=(9, 0),
                           max_threads_per_block=1024, max_block_dims=(1024, 1024, 64), arch="sm_90", name="fake",
                           max_grid_dims=(2 ** 31 - 1, 65535, 65535), max_shared_memory_per_block_optin_bytes=232448)
    kernel = SimpleNamespace(attributes=SimpleNamespace(max_threads_per_block=256), launch=None, handle=100)
    compiler = SimpleNamespace(arch="sm_90", compile=lambda source, options: SimpleNamespace(kernel=lambda c: kernel))
    for name, value in [("plan_stream", lambda stream, context: None), ("_device_checks", lambda context, name: None),
                        ("fp4_compiler", lambda given, context: compiler),
                        ("blocks_per_sm", lambda context, k, warps: 28 // warps)]:
        monkeypatch.setattr(_fp4, name, value)
    context = SimpleNamespace(device_info=lambda: info)
    doc = " ".join((EngineViews.launch_config.__doc__ or "").split())
    assert "``C ceil(N / rows)`` blocks" in doc and "``split_k``" in doc
    assert "a cluster split's factor (``split_k`` C: C times the blocks)" in " ".join((gemv_launch.__doc__ or "").split())
    for n, split, want_split in ((6144, None, 2), (1000, 3, 3), (1000, None, 1)):
        plan = mc.BlockScaledFp4VectorPlan(context, SimpleNamespace(handle=7), mc.DenseVectorSpec(n, 4096),
                                           kernel=FP4_MMA_SYMBOL, split_k=split)
        assert plan.launch_config.grid[0] == want_split * -(-n // plan.rows), (n, split)
