"""What CUTLASS 4.2's SM90 stream-K tile scheduler does with one GEMM, computed on the host, and a
simple time model of the result (no GPU needed).

The decomposition is a port of ``PersistentTileSchedulerSm90StreamKParams`` (``cutlass/gemm/kernel/
tile_scheduler_params.h``: swizzle rounding, raster order, ``get_num_sk_tiles``, ``get_num_sk_units``,
``calculate_groups``, the Heuristic / StreamK / SplitK / DataParallel choice, the workspace size) and of
the device-side unit assignment of ``PersistentTileSchedulerSm90StreamK`` (``sm90_tile_scheduler_
stream_k.hpp``: units per group, big units, the minimum of 8 K tiles per split, units walking their
tiles backwards, the fix-up order). Cluster 1x1 only (the mircuda stream-K kernels' cluster); the
data-parallel persistent scheduler (``PersistentTileSchedulerSm90``) also with an Mx1 cluster (the 128x256
kernel's 2x1: M tiles rounded up to whole clusters before the swizzle, the CTAs of a cluster on
neighbouring M tiles).

Time model (µs): ``t0 + c_k * (K tiles of the CTA, phantom ones included) + c_fix * (fix-ups)``, with
the fix-up waits of the reduction mode simulated: in the deterministic mode a split waits until every
split before it in K has added its partial sums; in the nondeterministic mode a middle split waits only
for the first. The constants are fitted to the H200 sweep of 2026-12-01 (``benchmarks/results/
matmul_sweep_bf16.json``, ``matmul_sweep_m96_1536_bf16.json``): the cooperative 128x128x64 kernel in
data-parallel mode took 27.7 µs for one 64-K-tile tile per SM (4096x4096, M = 512) and 50.0 µs for two
(M = 1024), 83.1 µs for one 224-K-tile tile (4096x14336, M = 512): c_k = 0.348 µs per 128x128x64 K tile,
t0 = 5.2 µs; the cooperative 128x192x64 at M = 512 on 6144x4096 (37.4 µs, one tile per SM): 0.503 µs
per 128x192x64 K tile; the cooperative 128x256x64 (2x1 cluster) at M = 2048: 0.68 µs per 128x256x64 K tile.
The 128x144 and 128x160 tiles are not measured yet: their c_k is their area times the cost per output
element of the 128x128 and 128x192 tiles (21.2 and 20.5 ns per 1024 elements per K tile) interpolated
linearly in N: 0.388 µs per 128x144x64 K tile, 0.426 per 128x160x64 (``area_scaled_c_k``).
c_fix = 0.5 µs per 64 KiB of FP32 partial sums written or read (an estimate: 64 KiB through L2 at
~64 B/clock/SM), 3 µs per 64 KiB added with atomics by a middle split (fitted to the stream-K kernel at
M = 96 on 4096x4096 and 6144x4096), 1 µs for the lock reset CUTLASS enqueues before every split-K or
stream-K launch, and a floor of 3 µs + the operands' bytes at 4.0 TB/s. L2 reuse (which operand the
stream-K groups share, reported, not priced), DRAM traffic beyond one read and clocks are not modelled:
the existing stream-K kernel (swizzle 4) measured 7-17 µs above the model at M = 512, where its groups
share A, not the weights.

    python benchmarks/streamk_model.py [--m 96,192,...] [--detail] [--measured PROFILE.json] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass, field
from typing import cast

MIN_ITERS_PER_SK_UNIT = 8
MAX_SK_GROUPS = 8
MMA_WARP_GROUPS = 2  # the cooperative kernel: two consumer warp groups, one lock each per tile
T0_US = 5.2
C_K_MEASURED_US = {(128, 128): 0.348, (128, 256): 0.68, (128, 192): 0.503}
"""µs per K tile of 64, measured (module docstring)."""


def area_scaled_c_k(tile_m: int, tile_n: int) -> float:
    """µs per K tile of 64 of a 128 x ``tile_n`` tile (128 < tile_n < 192) that has not been measured: its
    area times the cost per output element of the 128x128 and 128x192 tiles, interpolated linearly in N."""
    if tile_m != 128 or not 128 < tile_n < 192:
        raise ValueError(f"area scaling covers 128 x (129..191) tiles, not {tile_m}x{tile_n}")
    lo, hi = C_K_MEASURED_US[(128, 128)] / (128 * 128), C_K_MEASURED_US[(128, 192)] / (128 * 192)
    return (lo + (hi - lo) * (tile_n - 128) / 64) * tile_m * tile_n


C_K_US = {**C_K_MEASURED_US, (128, 144): area_scaled_c_k(128, 144), (128, 160): area_scaled_c_k(128, 160)}
C_FIX_US_PER_64K = 0.5
C_REDUCE_US_PER_64K = 3.0
HBM_TBPS = 4.0  # weights streamed once: the floor of a memory-bound shape (1 GiB reads measured 4.43 TB/s)
T_MEM0_US = 3.0
T_MEMSET_US = 1.0
"""Split-K and stream-K only: CUTLASS 4.2 zeroes the reduction locks before every launch (initialize_workspace:
a cudaMemsetAsync ahead of the kernel on the stream; its fix-up counters only count up). An estimate."""

SHAPES = ((4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096))
MIDDLE_M = (96, 192, 384, 512, 768, 1024, 1536)


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def log_swizzle(blocks_m: int, blocks_n: int, max_swizzle: int) -> int:
    """``PersistentTileSchedulerSm90Params::get_log_swizzle_size``."""
    d = min(blocks_m, blocks_n)
    if max_swizzle >= 8 and d >= 6:
        return 3
    if max_swizzle >= 4 and d >= 3:
        return 2
    if max_swizzle >= 2 and d >= 2:
        return 1
    return 0


@dataclass
class Segment:
    """One work piece of a CTA: ``count`` K tiles from ``k_idx`` of output tile ``tile``."""

    tile: int
    k_idx: int
    count: int
    phantom: bool


@dataclass
class Decomposition:
    """The scheduler's choice for one problem (names as in CUTLASS's params)."""

    m: int
    n: int
    k: int
    tile: tuple[int, int, int]
    sms: int
    max_swizzle: int
    requested: str
    splits_arg: int
    tiles_m: int
    tiles_n: int
    padded_m: int
    padded_n: int
    swizzle: int
    raster: str
    k_tiles: int
    mode: str
    output_tiles: int
    sk_tiles: int = 0
    sk_units: int = 0
    dp_tiles: int = 0
    groups: int = 1
    k_tiles_per_sk_unit: int = 0
    splits: int = 1
    workspace_bytes: int = 0
    cluster_m: int = 1
    units: list[list[Segment]] = field(default_factory=list, repr=False)

    @property
    def phantom_tiles(self) -> int:
        return self.output_tiles - self.tiles_m * self.tiles_n


def decompose(m: int, n: int, k: int, tile: tuple[int, int, int] = (128, 128, 64), sms: int = 132,
              max_swizzle: int = 1, mode: str = "heuristic", splits: int = 1, cluster_m: int = 1) -> Decomposition:
    """The decomposition CUTLASS 4.2 picks for C[M,N] with ``tile`` on ``sms`` SMs, cluster ``cluster_m`` x 1
    (above 1 only with ``mode="dp"``, the data-parallel persistent scheduler).

    Raises:
        ValueError: ``cluster_m`` is not a power of 2, or above 1 with another mode.
    """
    if cluster_m < 1 or cluster_m & (cluster_m - 1) or (cluster_m > 1 and mode != "dp"):
        raise ValueError(f"cluster_m={cluster_m} with mode={mode!r}: the model covers Mx1 clusters (a power of 2) "
                         f"with the data-parallel scheduler only")
    tm, tn, tk = tile
    bm, bn = -(-m // tm), -(-n // tn)
    # get_tiled_cta_shape_mnl rounds the M tiles up to whole clusters; the swizzle is chosen from those
    cm_blocks = _round_up(bm, cluster_m)
    log = log_swizzle(cm_blocks, bn, max_swizzle)
    pm, pn = _round_up(cm_blocks, (1 << log) * cluster_m), _round_up(bn, 1 << log)
    raster = "M" if pn > pm else "N"  # RasterOrderOptions::Heuristic
    k_tiles = -(-k // tk)
    output_tiles = pm * pn
    d = Decomposition(m, n, k, tile, sms, max_swizzle, mode, splits, bm, bn, pm, pn, 1 << log, raster, k_tiles,
                      "data-parallel", output_tiles, cluster_m=cluster_m)
    acc_bytes = tm * tn * 4
    if mode == "splitk" or (mode == "heuristic" and splits > 1):
        d.mode, d.splits = "split-K", min(splits, sms, k_tiles)
        d.workspace_bytes = _ws(output_tiles * MMA_WARP_GROUPS * 4) + _ws(output_tiles * acc_bytes)
    else:
        ctas = sms
        full, total = output_tiles // ctas, -(-output_tiles // ctas)
        sk_tiles = 0
        if mode in ("heuristic", "streamk") and full != total and k_tiles > MIN_ITERS_PER_SK_UNIT:
            dp_waves = full - 1 if full > 1 else 0
            sk_tiles = output_tiles - dp_waves * ctas
            tail = output_tiles - full * ctas
            if mode == "heuristic" and 2 * tail >= ctas:
                sk_tiles = 0
        sk_units = min(ctas, k_tiles * sk_tiles // MIN_ITERS_PER_SK_UNIT)
        if mode == "dp" or sk_tiles == 0 or sk_units == 0:
            d.mode = "data-parallel"
        else:
            d.sk_tiles, d.sk_units, d.dp_tiles = sk_tiles, sk_units, output_tiles - sk_tiles
            d.groups = _groups(pm if raster == "M" else pn, sk_tiles, sk_units, k_tiles)
            per_group = k_tiles * (sk_tiles // d.groups)
            d.k_tiles_per_sk_unit = per_group // (sk_units // d.groups)
            if mode == "heuristic" and sk_tiles < sk_units and sk_units % sk_tiles == 0:
                d.mode, d.splits = "split-K", sk_units // sk_tiles
                d.sk_tiles = d.sk_units = d.dp_tiles = 0
                d.workspace_bytes = _ws(output_tiles * MMA_WARP_GROUPS * 4) + _ws(output_tiles * acc_bytes)
            else:
                d.mode = "stream-K"
                d.workspace_bytes = _ws(sk_tiles * MMA_WARP_GROUPS * 4) + _ws(sk_tiles * acc_bytes)
    d.units = _assign(d)
    return d


def _ws(nbytes: int) -> int:
    return _round_up(nbytes, 128)


def _groups(blocks_raster: int, sk_tiles: int, sk_units: int, k_tiles: int) -> int:
    """``calculate_groups`` (cluster 1x1, no separate reduction: CUTLASS 4.2 disables it)."""
    def too_small(g: int) -> bool:
        return (sk_tiles // g) * k_tiles // (sk_units // g) < MIN_ITERS_PER_SK_UNIT

    groups, fallback = min(blocks_raster, MAX_SK_GROUPS), 0
    while groups > 1 and not (sk_units % groups == 0 and sk_tiles % groups == 0 and not too_small(groups)):
        if fallback == 0 and sk_units % groups == 0 and not too_small(groups):
            fallback = groups
        groups -= 1
    return fallback if groups == 1 and fallback > 0 else groups


def _tile_mn(d: Decomposition, tile_id: int) -> tuple[int, int]:
    """``get_work_idx_m_and_n`` (cluster ``d.cluster_m`` x 1) of a linear output tile: the CTA of linear
    index L is the (L mod cluster_m)-th of its cluster, along M, in either raster order."""
    log, cm = d.swizzle.bit_length() - 1, d.cluster_m
    blk = tile_id % (d.padded_m * d.padded_n)
    cluster, in_cluster = divmod(blk, cm)
    offset, extra = cluster & (d.swizzle - 1), cluster >> log
    if d.raster == "N":  # major N (cluster extent 1), minor M in clusters
        minor_div, major = divmod(extra, d.padded_n)
        return (minor_div * d.swizzle + offset) * cm + in_cluster, major
    minor_div, major = divmod(extra, d.padded_m // cm)  # major M in clusters, minor N
    return major * cm + in_cluster, minor_div * d.swizzle + offset


def _phantom(d: Decomposition, tile_id: int) -> bool:
    mi, ni = _tile_mn(d, tile_id)
    return mi >= d.tiles_m or ni >= d.tiles_n


def _assign(d: Decomposition) -> list[list[Segment]]:
    """The segments each persistent CTA (grid = SM count) computes, in its order."""
    kt = d.k_tiles
    # the grid: every SM that a whole cluster can use (132 SMs in clusters of 2: 132)
    ctas: list[list[Segment]] = [[] for _ in range(d.sms - d.sms % d.cluster_m)]
    if d.mode == "split-K":
        tiles = d.output_tiles
        per, big = kt // d.splits, kt % d.splits
        for idx in range(tiles * d.splits):
            split, t = divmod(idx, tiles)
            start = per * split + min(split, big)
            ctas[idx % len(ctas)].append(Segment(t, start, per + (split < big), _phantom(d, t)))
        return ctas
    stopped: set[int] = set()
    for idx in range(d.sk_units + (d.output_tiles - d.sk_tiles)):
        cta = idx % len(ctas)
        if cta in stopped:
            continue
        if idx >= d.sk_units:
            t = idx - d.sk_units + d.sk_tiles
            ctas[cta].append(Segment(t, 0, kt, _phantom(d, t)))
        else:
            segs = _sk_unit(d, idx)
            if not segs:  # an emptied unit is an invalid work tile: the CTA's loop ends there
                stopped.add(cta)
            ctas[cta].extend(segs)
    return ctas


def _sk_unit(d: Decomposition, idx: int) -> list[Segment]:
    kt, g = d.k_tiles, d.groups
    unit, group = divmod(idx, g)
    units_per_group = d.sk_units // g
    tiles_in_group = d.sk_tiles // g + (group < d.sk_tiles % g)
    k_in_group = tiles_in_group * kt
    per = k_in_group // units_per_group
    big = k_in_group - per * units_per_group
    start, count = per * unit, per
    if unit < big:
        start, count = start + unit, count + 1
    else:
        start += big
    s = start % kt
    if s < MIN_ITERS_PER_SK_UNIT:
        start, count = start - s, count + s
    elif s > kt - MIN_ITERS_PER_SK_UNIT:
        start, count = start + (kt - s), count - (kt - s)
    e = (start + count) % kt
    if e < MIN_ITERS_PER_SK_UNIT:
        count -= e
    elif e > kt - MIN_ITERS_PER_SK_UNIT:
        count += kt - e
    assert count >= 0, (idx, start, count)
    out: list[Segment] = []  # empty when the adjustments shed every K tile (K tiles per unit < 16)
    remaining = count
    while remaining > 0:
        end = start + remaining - 1
        tile_in_group = end // kt
        t0 = tile_in_group * kt
        lo, hi = max(t0, start), min(t0 + kt, end + 1)
        t = tile_in_group * g + group
        out.append(Segment(t, lo - t0, hi - lo, _phantom(d, t)))
        remaining -= hi - lo
    return out


@dataclass
class Prediction:
    """The time model's answer for one decomposition."""

    us: float
    max_k_tiles: int
    mean_k_tiles: float
    ideal_k_tiles: float
    phantom_k_tiles: int
    split_tiles: int
    max_peers: int
    fixups_max: int
    wait_us_max: float
    memory_us: float
    groups_share: str
    deadlock: bool = False


def predict(d: Decomposition, nondeterministic: bool = False, t0: float = T0_US, c_k: float | None = None,
            c_fix: float | None = None, c_reduce: float | None = None) -> Prediction:
    """Simulate every CTA's segments with the fix-up waits of the reduction mode (module docstring)."""
    tm, tn, kt = d.tile[0], d.tile[1], d.k_tiles
    ck = C_K_US[(tm, tn)] if c_k is None else c_k
    cf = (C_FIX_US_PER_64K * tm * tn * 4 / 65536) if c_fix is None else c_fix
    cr = (C_REDUCE_US_PER_64K * tm * tn * 4 / 65536) if c_reduce is None else c_reduce
    peers: dict[int, list[Segment]] = {}
    for segs in d.units:
        for s in segs:
            if s.count != kt:
                peers.setdefault(s.tile, []).append(s)
    done: dict[tuple[int, int], float] = {}  # (tile, k_idx) -> time its partial sums are in the workspace
    cursor = [0.0] * len(d.units)
    pos = [0] * len(d.units)
    fixups = [0] * len(d.units)
    waited = [0.0] * len(d.units)
    progress = True
    while progress:
        progress = False
        for c, segs in enumerate(d.units):
            while pos[c] < len(segs):
                s = segs[pos[c]]
                t = cursor[c] + ck * s.count
                if s.count != kt:
                    before = sorted(p.k_idx for p in peers[s.tile] if p.k_idx < s.k_idx)
                    final = s.k_idx + s.count == kt
                    need = before if (final or not nondeterministic) else before[:1]
                    if any((s.tile, b) not in done for b in need):
                        break  # waits for a peer not yet simulated
                    ready = max([done[(s.tile, b)] for b in need], default=0.0)
                    waited[c] = max(waited[c], ready - t)
                    # the first split stores, the final one loads and adds: vector accesses; a middle split
                    # adds into the workspace with atomics (BlockStripedReduce::reduce)
                    t = max(t, ready) + (cf if s.k_idx == 0 or final else cr)
                    fixups[c] += 1
                    if not final:
                        done[(s.tile, s.k_idx)] = t
                cursor[c] = t
                pos[c] += 1
                progress = True
    deadlock = any(pos[c] < len(segs) for c, segs in enumerate(d.units))
    per_cta = [sum(s.count for s in segs) for segs in d.units]
    real = d.tiles_m * d.tiles_n * kt
    nbytes = 2 * (d.n * d.k + d.m * d.k + d.m * d.n) + 2 * len(peers) * tm * tn * 4  # bf16 operands, FP32 partials
    memory = T_MEM0_US + nbytes / (HBM_TBPS * 1e6)
    locks = T_MEMSET_US if d.mode != "data-parallel" else 0.0
    return Prediction(us=locks + max(t0 + max(cursor), memory), max_k_tiles=max(per_cta),
                      mean_k_tiles=sum(per_cta) / len(per_cta), ideal_k_tiles=real / d.sms,
                      phantom_k_tiles=sum(s.count for segs in d.units for s in segs if s.phantom),
                      split_tiles=len(peers), max_peers=max((len(v) for v in peers.values()), default=1),
                      fixups_max=max(fixups), wait_us_max=max(waited), memory_us=memory,
                      groups_share=groups_share(d), deadlock=deadlock)


def groups_share(d: Decomposition) -> str:
    """Which operand the stream-K units of equal index in different groups share, as they start in
    step: "B" (the weights: one DRAM read serves all groups), "A", "-" (neither) or "" (no groups)."""
    if d.mode != "stream-K" or d.groups < 2:
        return ""
    votes = {"B": 0, "A": 0, "-": 0}
    for u in range(d.sk_units // d.groups):
        units = [_sk_unit(d, u * d.groups + g) for g in range(d.groups)]
        if not all(units):
            continue
        mn = [_tile_mn(d, segs[0].tile) for segs in units]
        if len({n for _, n in mn}) == 1:
            votes["B"] += 1
        elif len({m for m, _ in mn}) == 1:
            votes["A"] += 1
        else:
            votes["-"] += 1
    return max(votes, key=lambda x: votes[x])


def data_parallel_waves(m: int, n: int, k: int, tile: tuple[int, int], sms: int = 132) -> tuple[int, float]:
    """(output tiles, waves) of a data-parallel persistent kernel without swizzle padding."""
    tiles = -(-m // tile[0]) * -(-n // tile[1])
    return tiles, tiles / sms


@dataclass(frozen=True)
class Variant:
    """A kernel entry (or a model-only setting) as the model sees it."""

    name: str
    tile: tuple[int, int, int]
    max_swizzle: int
    mode: str
    splits: int = 1
    nondeterministic: bool = False
    built: bool = True
    cluster_m: int = 1

    def decompose(self, m: int, n: int, k: int, sms: int = 132) -> Decomposition:
        return decompose(m, n, k, self.tile, sms, self.max_swizzle, self.mode, self.splits, self.cluster_m)

    def predict(self, m: int, n: int, k: int, sms: int = 132) -> Prediction:
        return predict(self.decompose(m, n, k, sms), nondeterministic=self.nondeterministic)


VARIANTS = (
    Variant("sm90_coop_128x128x64_streamk", (128, 128, 64), 4, "heuristic"),
    Variant("sm90_coop_128x128x64_streamk_swz1", (128, 128, 64), 1, "heuristic"),
    Variant("sm90_coop_128x128x64_streamk_forced_swz1", (128, 128, 64), 1, "streamk"),
    Variant("sm90_coop_128x128x64_streamk_nd_swz1", (128, 128, 64), 1, "heuristic", nondeterministic=True),
    Variant("sm90_coop_128x192x64", (128, 192, 64), 4, "dp"),
    Variant("sm90_coop_128x192x64_swz1", (128, 192, 64), 1, "dp"),
    Variant("sm90_coop_128x192x64_streamk_swz1", (128, 192, 64), 1, "heuristic"),
    Variant("sm90_coop_128x192x64_streamk_forced_swz1", (128, 192, 64), 1, "streamk"),
    Variant("sm90_coop_128x144x64_swz1", (128, 144, 64), 1, "dp"),
    Variant("sm90_coop_128x144x64_streamk_swz1", (128, 144, 64), 1, "heuristic"),
    Variant("sm90_coop_128x256x64_c2x1", (128, 256, 64), 4, "dp", cluster_m=2),
    Variant("sm90_coop_128x256x64_c2x1_swz1", (128, 256, 64), 1, "dp", cluster_m=2),
    Variant("(model) split-K 2, 128x128 swz1", (128, 128, 64), 1, "splitk", 2, built=False),
    Variant("(model) stream-K forced 128x256 swz1", (128, 256, 64), 1, "streamk", built=False),
    Variant("(model) 128x160 swz1", (128, 160, 64), 1, "dp", built=False),
)
"""The entries built on branches streamk and tile144 (and settings only modelled), in the probe's order."""


def table(ms: tuple[int, ...] = MIDDLE_M, shapes: tuple[tuple[int, int], ...] = SHAPES,
          sms: int = 132) -> list[dict[str, object]]:
    """One row per (shape, M, variant): the decomposition's numbers and the predicted µs."""
    rows: list[dict[str, object]] = []
    for n, k in shapes:
        for m in ms:
            for v in VARIANTS:
                d = v.decompose(m, n, k, sms)
                p = predict(d, nondeterministic=v.nondeterministic)
                rows.append({"n": n, "k": k, "m": m, "variant": v.name, "mode": d.mode,
                             "tiles": f"{d.tiles_m}x{d.tiles_n}", "padded": f"{d.padded_m}x{d.padded_n}",
                             "swizzle": d.swizzle, "raster": d.raster, "k_tiles": d.k_tiles,
                             "sk_tiles": d.sk_tiles, "sk_units": d.sk_units, "dp_tiles": d.dp_tiles,
                             "groups": d.groups, "k_per_sk_unit": d.k_tiles_per_sk_unit, "splits": d.splits,
                             "workspace_mb": round(d.workspace_bytes / 1e6, 2), **asdict(p)})
    return rows


SHORT = {"sm90_coop_128x128x64_streamk": "sk128", "sm90_coop_128x128x64_streamk_swz1": "sk128/1",
         "sm90_coop_128x128x64_streamk_forced_swz1": "skF128/1", "sm90_coop_128x128x64_streamk_nd_swz1": "skN128/1",
         "sm90_coop_128x192x64": "dp192", "sm90_coop_128x192x64_swz1": "dp192/1",
         "sm90_coop_128x192x64_streamk_swz1": "sk192/1", "sm90_coop_128x192x64_streamk_forced_swz1": "skF192/1",
         "sm90_coop_128x144x64_swz1": "dp144/1", "sm90_coop_128x144x64_streamk_swz1": "sk144/1",
         "sm90_coop_128x256x64_c2x1": "dp256c2", "sm90_coop_128x256x64_c2x1_swz1": "dp256c2/1",
         "(model) split-K 2, 128x128 swz1": "spl2", "(model) stream-K forced 128x256 swz1": "skF256/1",
         "(model) 128x160 swz1": "dp160/1"}


def measured(path: str, types: str = "bf16->bf16") -> dict[tuple[int, int, int], dict[str, float]]:
    """(N, K, M) -> {"cuBLAS", "best" (every mircuda row), kernel prefix: µs} of a matmul-profile or
    streamk_probe JSON."""
    with open(path) as f:
        data = json.load(f)
    out: dict[tuple[int, int, int], dict[str, float]] = {}
    suffix = "_" + types.replace("->", "_")
    for r in data["rows"]:
        if r["dtype"] != types:
            continue
        cell = out.setdefault((r["n"], r["k"], r["m"]), {})
        path_ = r["path"]
        if path_.startswith("cuBLAS"):
            cell["cuBLAS"] = r["us"]
            continue
        cell["best"] = min(r["us"], cell.get("best", float("inf")))
        name = path_.split()[-1].removesuffix(suffix)
        cell[name] = min(r["us"], cell.get(name, float("inf")))
    return out


def summary(rows: list[dict[str, object]], seen: dict[tuple[int, int, int], dict[str, float]] | None) -> None:
    """Predicted µs per variant for each (N, K, M); with measurements, cuBLAS, our best and, in
    parentheses, what each variant measured."""
    names = [v.name for v in VARIANTS]
    cells: dict[tuple[int, int, int], dict[str, float]] = {}
    for r in rows:
        key = (cast(int, r["n"]), cast(int, r["k"]), cast(int, r["m"]))
        cells.setdefault(key, {})[str(r["variant"])] = cast(float, r["us"])
    print(f"{'N x K':>11} {'M':>5} " + ("cuBLAS   best " if seen else "") + " ".join(f"{SHORT[x]:>14}" for x in names))
    for key, pred in cells.items():
        n, k, m = key
        got = (seen or {}).get(key, {})
        head = f"{n:>5}x{k:<5} {m:>5} "
        if seen:
            head += f"{got.get('cuBLAS', float('nan')):>6.1f} {got.get('best', float('nan')):>6.1f} "
        body = []
        for x in names:
            text = f"{pred[x]:.1f}"
            if x in got:
                text += f" ({got[x]:.1f})"
            body.append(f"{text:>14}")
        print(head + " ".join(body))


def detail(rows: list[dict[str, object]]) -> None:
    """Every decomposition number of every row."""
    head = (f"{'N x K':>11} {'M':>5} {'variant':<10} {'mode':<13} {'tiles':>6} {'padded':>6} {'sk_t':>4} "
            f"{'sk_u':>4} {'dp_t':>4} {'grp':>3} {'k/u':>4} {'spl':>3} {'maxK':>5} {'ideal':>6} {'phant':>6} "
            f"{'split':>5} {'peer':>4} {'shr':>3} {'ws MB':>6} {'pred µs':>8}")
    print(head)
    for r in rows:
        print(f"{r['n']:>5}x{r['k']:<5} {r['m']:>5} {SHORT[str(r['variant'])]:<10} {r['mode']:<13} {r['tiles']:>6} "
              f"{r['padded']:>6} {r['sk_tiles']:>4} {r['sk_units']:>4} {r['dp_tiles']:>4} {r['groups']:>3} "
              f"{r['k_per_sk_unit']:>4} {r['splits']:>3} {r['max_k_tiles']:>5} {r['ideal_k_tiles']:>6.1f} "
              f"{r['phantom_k_tiles']:>6} {r['split_tiles']:>5} {r['max_peers']:>4} {r['groups_share']:>3} "
              f"{r['workspace_mb']:>6} {r['us']:>8.1f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--m", default=",".join(map(str, MIDDLE_M)), help="comma-separated M values")
    p.add_argument("--sms", type=int, default=132, help="SM count (H200: 132)")
    p.add_argument("--detail", action="store_true", help="every decomposition number, one row per variant")
    p.add_argument("--measured", default=None,
                   help="a matmul-profile --sweep or streamk_probe.py JSON: cuBLAS, our best and each variant's µs")
    p.add_argument("--json", default=None, help="write the rows to this JSON file")
    args = p.parse_args(argv)
    ms = tuple(int(x) for x in args.m.split(",") if x)
    rows = table(ms, SHAPES, args.sms)
    if args.detail:
        detail(rows)
    else:
        summary(rows, measured(args.measured) if args.measured else None)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": "CUTLASS 4.2 SM90 stream-K scheduler, host port", "t0_us": T0_US,
                       "c_k_us": {f"{a}x{b}": v for (a, b), v in C_K_US.items()},
                       "c_fix_us_per_64KiB": C_FIX_US_PER_64K, "c_reduce_us_per_64KiB": C_REDUCE_US_PER_64K,
                       "hbm_tbps": HBM_TBPS, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
