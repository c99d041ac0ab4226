"""The counts and comparisons that README.md and the rules' measurement constants quote, against the recorded
results they name (``benchmarks/results/*.json``): a sweep re-run that changes them, or a summary that miscounts
(the SM90 FP8 rule once said 21 of 25 where its sweep has 22 of 26), fails here. No GPU."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from statistics import geometric_mean, mean, median
from typing import Any

from mircuda.matmul._fp4 import DP4A_M2_MEASURED
from mircuda.matmul._gemv import choose_gemv, unroll_candidates
from mircuda.matmul._select import FP8_SM90_RULE_MEASURED, fp8_m1_choice, sm90_fp8_family

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
WORDS = {1: "one", 2: "two", 4: "four", 8: "eight"}
PINGPONG, COOP = "sm90_blockwise_pingpong_64x128x128_e4m3_bf16", "sm90_blockwise_coop_128x128x128_c1x2_e4m3_bf16"


def recorded(name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((ROOT / "benchmarks" / "results" / name).read_text())
    return result


TABLE = ROOT / "mircuda" / "matmul" / "tuned" / "sm90_dense.json"
RESWEEPS = ("matmul_sweep_zeroing.json", "matmul_sweep_zeroing_rest.json", "matmul_sweep_epilogue.json",
            "matmul_sweep_final_tile.json", "matmul_sweep_new_families.json", "matmul_sweep_pingpong_144_176.json",
            "matmul_sweep_nopdl.json")
"""The re-sweep records of the measured table, in the order they were merged into it; each keeps the entries it
replaced."""


def table_after(record: str | None) -> list[list[Any]]:
    """The measured table's entries as they were right after ``record`` was merged (None: before the first of
    :data:`RESWEEPS`): today's entries, with those each later re-sweep replaced put back, newest first."""
    entries: list[list[Any]] = json.loads(TABLE.read_text())["entries"]
    later = RESWEEPS if record is None else RESWEEPS[RESWEEPS.index(record) + 1:]
    for name in reversed(later):
        replaced = {tuple(e[:5]): e for e in recorded(name)["replaced"]}
        entries = [replaced.get(tuple(e[:5]), e) for e in entries]
    return entries


LABELS = {"bf16->bf16": ["bf16", "bf16"], "f16->f16": ["f16", "f16"], "bf16->f32": ["bf16", "f32"],
          "f16->f32": ["f16", "f32"]}


def resweep_entries(record: str) -> tuple[list[list[Any]], dict[tuple[Any, ...], list[Any]]]:
    """The entries a re-sweep record made (the table as it left them) and those they replaced; each made entry is its
    run's fastest deterministic row (the _nd kernels never enter the table), with that run's cuBLAS time, but for
    those the record says it ``kept`` as they were."""
    sweep = recorded(record)
    swept = {(*LABELS[s["dtype"]], s["m"]) for s in sweep["sweeps"]}
    now = [e for e in table_after(record) if (e[0], e[1], e[4]) in swept]
    before = {tuple(e[:5]): e for e in sweep["replaced"]}
    assert {tuple(e[:5]) for e in now} == set(before) and len(now) == len(before)
    kept = [e for e in sweep.get("kept", [])]
    assert all(e in now and before[tuple(e[:5])] == e for e in kept)  # as they were
    for e in (e for e in now if e not in kept):
        cell = [r for r in sweep["rows"] if [*LABELS[r["dtype"]], r["n"], r["k"], r["m"]] == e[:5]]
        fastest = min((r for r in cell if r["path"].startswith("sweep ") and "_nd_" not in r["path"]),
                      key=lambda r: r["us"])
        cublas = next(r["us"] for r in cell if r["path"].startswith("cuBLAS"))
        splits = int(fastest["note"].split("splits=")[1].split()[0])
        assert (fastest["path"].removeprefix("sweep "), splits, round(fastest["us"], 3), round(cublas, 3)) == \
            (e[5], e[6], e[7], e[8]), e
    return now, before


def resweep_counts(now: list[list[Any]], before: dict[tuple[Any, ...], list[Any]]) -> dict[str, Any]:
    """The figures the README quotes for a re-sweep's entries against those they replaced (ratio = cuBLAS µs / ours):
    how many below 0.97 and at or above 1.0, the geometric mean of the ratios, and how many changed kernel or splits."""
    ratio_now = [e[8] / e[7] for e in now]
    ratio_before = [before[tuple(e[:5])][8] / before[tuple(e[:5])][7] for e in now]
    return {"below": sum(r < 0.97 for r in ratio_now), "below_before": sum(r < 0.97 for r in ratio_before),
            "ge1": sum(r >= 1 for r in ratio_now), "ge1_before": sum(r >= 1 for r in ratio_before),
            "mean": f"{geometric_mean(ratio_now):.3f}", "mean_before": f"{geometric_mean(ratio_before):.3f}",
            "changed": sum(e[5:7] != before[tuple(e[:5])][5:7] for e in now)}


def counts_sentence(count: int, c: dict[str, Any]) -> str:
    """The README's sentence on a re-sweep's ``count`` entries against those they replaced, up to "name another
    kernel" (``c``: :func:`resweep_counts`)."""
    return (f"of those {count} entries, {c['below']} are below 0.97 of cuBLAS against {c['below_before']} of the "
            f"entries they replace, and {c['ge1']} at or above 1.0 against {c['ge1_before']}; the geometric mean of "
            f"their ratios is {c['mean']}, against {c['mean_before']}; {c['changed']} of them name another kernel")


def cell_kernels(sweep: dict[str, Any]) -> dict[tuple[Any, ...], tuple[str, set[str]]]:
    """A --kernels re-sweep record's cells (type pair, M, N, K): the plan's kernel and the kernels the run timed."""
    cells: dict[tuple[Any, ...], tuple[str, set[str]]] = {}
    for cell in {(r["dtype"], r["m"], r["n"], r["k"]) for r in sweep["rows"]}:
        rows = [r for r in sweep["rows"] if (r["dtype"], r["m"], r["n"], r["k"]) == cell]
        plan = next(r["note"].split()[0] for r in rows if r["path"] == "DenseMatmulPlan")
        cells[cell] = plan, {r["path"].removeprefix("sweep ") for r in rows if r["path"].startswith("sweep ")}
    return cells


def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_sm90_fp8_rule_counts_its_sweep() -> None:
    # the forced sweep behind FP8_SM90_RULE_MEASURED (two runs at some points: their mean)
    times: dict[tuple[int, int, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in recorded("fp8_sm90_cutlass_pingpong_vs_coop.json")["forced_sweep"]["rows"]:
        if row["kernel"] in (PINGPONG, COOP):
            times[(row["n"], row["k"], row["m"])][row["kernel"]].append(row["us"])
    fits, others, coop_wins = 0, 0, 0
    for (n, _k, m), by in times.items():
        pingpong_faster = mean(by[PINGPONG]) < mean(by[COOP])
        if sm90_fp8_family(m, n, 132)[0] == "sm90_blockwise_pingpong":
            fits += 1
            assert pingpong_faster, (n, m)  # "the ping-pong kernel was the faster at every point where [it fits]"
        else:
            others += 1
            coop_wins += not pingpong_faster
    assert (fits, others) == (18, 26)
    assert f"the cooperative one at {coop_wins} of {others} points" in FP8_SM90_RULE_MEASURED
    assert f"the cooperative kernel at {coop_wins} of the {others} other points" in flat(README)


def test_the_m4_integer_path_comparison_is_as_recorded() -> None:
    sweep = recorded("fp4_sweep_m2_4.json")["sweep"]
    m4 = {(r["n"], r["k"]): r for r in sweep if r["m"] == 4 and r["candidate"] == "vector:decode=dp4a"}
    rows8 = {(r["n"], r["k"]): r for r in sweep if r["m"] == 4 and r["candidate"] == "vector:decode=dp4a:rows=8"}
    assert len(m4) == len(rows8) == 4
    assert sum(r["us"] < r["default_us"] for r in m4.values()) == 0  # slower everywhere with its default rows
    assert sum(r["us"] < r["default_us"] for r in rows8.values()) == 2
    for shape in ((4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096)):
        assert f"{m4[shape]['us']:.2f} vs {m4[shape]['default_us']:.2f}" in DP4A_M2_MEASURED
    assert "M = 4 slower on all four" in DP4A_M2_MEASURED
    assert ("With its default rows it was slower on all four: 7.30 against 7.12 µs on 4096x4096, 21.59 against 17.05 "
            "on 14336x4096. - With `rows=8` it was faster on two and slower on two.") in flat(README)


def test_the_fp4_mma_default_comparison_is_as_recorded() -> None:
    # fp4_mma_bf16's default (32 rows x 3 stages) against the former 16 rows x 2 stages at M = 2, 8, 16
    rows = [r for r in recorded("fp4_sweep_rows_stages.json")["sweep"]
            if r["candidate"] == "mma:decode=e4m3:rows=32:stages=3" and r["m"] in (2, 8, 16)]
    faster = [r for r in rows if r["us"] < r["default_us"]]
    slower = [(r["m"], r["n"], r["k"], round(r["us"], 2), round(r["default_us"], 2)) for r in rows if r not in faster]
    assert (len(faster), len(rows)) == (11, 12) and slower == [(16, 4096, 4096, 8.5, 8.43)]
    assert "faster than 16 rows x 2 stages at 11 of the 12 points M = 2, 8, 16" in flat(README)
    assert "level at M = 16 on 4096x4096, 8.50 against 8.43" in flat(README)


def test_the_two_row_tile_gemv_comparison_is_as_recorded() -> None:
    # unroll_candidates: two row tiles with four steps fastest at M = 16 on the large shapes, one tile on the small
    rows = [r for r in recorded("batched_gemv_m8_16_row_tiles.json")["rows"] if r["m"] == 16]
    doc = flat(unroll_candidates.__doc__ or "")

    def best(n: int, k: int, **match: int) -> dict[str, Any]:
        return min((r for r in rows if (r["n"], r["k"]) == (n, k) and all(r[f] == v for f, v in match.items())),
                   key=lambda r: r["us"])

    for (n, k), said in (((28672, 4096), " µs (two warps)"), ((14336, 4096), ""), ((4096, 14336), " (eight warps)")):
        two, one = best(n, k, r=2, u=4), best(n, k, r=1)
        assert two == best(n, k), (n, k)  # the fastest configuration of all
        assert f"{n}x{k} {two['us']:.2f}{said} against {one['us']:.2f}" in doc
        assert "warps" not in said or f"({WORDS[two['w']]} warps)" in said
    for n, k in ((6144, 4096), (4096, 4096)):
        two, one = best(n, k, r=2, u=4), best(n, k, r=1)
        assert one == best(n, k) and f"{one['us']:.2f} against {two['us']:.2f}" in doc


def test_the_decoder_layers_gate_up_at_m_16_is_as_recorded() -> None:
    # choose_gemv's docstring and the README: the 28672x4096 projection with the 32-row tiling
    rows = recorded("decoder_layer_profile.json")["rows"]
    gate_up = next(r for r in rows if r["path"].strip() == "gate_up 28672x4096 alone" and r["m"] == 16)
    assert gate_up["note"].startswith("batched_gemv_rows32_bf16_bf16")
    assert f"{gate_up['us']:.2f} µs in ``decoder-layer-profile`` (2026-12-02" in flat(choose_gemv.__doc__ or "")
    knobs = [r for r in recorded("batched_gemv_m8_16_row_tiles.json")["rows"] if (r["n"], r["m"]) == (28672, 16)]
    two = min(r["us"] for r in knobs if r["r"] == 2)
    one = min(r["us"] for r in knobs if r["r"] == 1)
    assert (f"{two:.1f} against {one:.1f} µs for the best single tile in "
            "`benchmarks/results/batched_gemv_m8_16_row_tiles.json` (`python benchmarks/batched_gemv_knobs.py`: every "
            f"tiling, unroll and warp count beside cuBLAS), {gate_up['us']:.1f} µs through the plan in "
            "`decoder_layer_profile.json`") in flat(README)
    # the table's entry of the nearest shape, 14336x4096, is what names the 32-row form there (the README named
    # "the measured table" before saying which file it is)
    assert ("the measured table (`mircuda/matmul/tuned/sm90_dense.json`, below) names the 32-row form where its "
            "sweep found it fastest: on the H200 at M = 16 on 14336x4096 and 4096x14336, for every type pair. A "
            "shape the table lacks takes the entry of the nearest one, so the decoder layer's 28672x4096 runs the "
            "32-row form at M = 16 too") in flat(README)


def test_the_measured_tables_m_16_rows_are_their_sweeps_fastest() -> None:
    # the table names the 32-row tiling at M = 16 exactly where its sweep found it fastest (README: 14336x4096 and
    # 4096x14336, every type pair)
    table = json.loads((ROOT / "mircuda" / "matmul" / "tuned" / "sm90_dense.json").read_text())["entries"]
    for suffix, (a, c) in (("bf16", ("bf16", "bf16")), ("bf16_f32", ("bf16", "f32")), ("f16", ("f16", "f16")),
                           ("f16_f32", ("f16", "f32"))):
        sweep = recorded(f"matmul_sweep_m16_rows32_{suffix}.json")["rows"]
        rows32 = set()
        for n, k in ((4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096)):
            fastest = min((r for r in sweep if r["path"].startswith("sweep ") and (r["n"], r["k"], r["m"]) == (n, k, 16)),
                          key=lambda r: r["us"])
            entry = next(e for e in table if e[:5] == [a, c, n, k, 16])
            assert (entry[5], round(fastest["us"], 3)) == (fastest["path"].removeprefix("sweep "), entry[7])
            if "rows32" in entry[5]:
                rows32.add((n, k))
        assert rows32 == {(14336, 4096), (4096, 14336)}, suffix


def test_the_wgmma_probes_comparison_is_as_recorded() -> None:
    # benchmarks/fp8_wgmma_probe.py's docstring and the kernel's opening comment: the best swizzled wgmma
    # configuration against the plans' kernel (the rows sweep, the last run of fp8_wgmma_probe_swizzle.json)
    rows = recorded("fp8_wgmma_probe_swizzle.json")["runs"][-1]["rows"]
    probe = flat((ROOT / "benchmarks" / "fp8_wgmma_probe.py").read_text(encoding="utf-8"))
    kernel = flat(re.sub(r"^// ?", "", (ROOT / "mircuda" / "cuda_src" / "fp8_wgmma_gemv.cu").read_text(), flags=re.M))

    def best(n: int, k: int, m: int) -> tuple[float, float]:
        at = [r for r in rows if (r["n"], r["k"], r["m"]) == (n, k, m)]
        return (min(r["us"] for r in at if r["path"].startswith("wgmma ")), next(r["us"] for r in at
                                                                                  if r["path"] == "plan"))

    (w16, p16), (w1, p1), (l16, q16) = best(14336, 4096, 16), best(14336, 4096, 1), best(4096, 14336, 16)
    assert w16 < p16 and w1 > p1 and l16 > q16  # the one place it wins, and two where it loses
    assert (f"only at M = 16 on 14336x4096 ({w16:.2f} µs against {p16:.2f}), slower elsewhere (14336x4096 M = 1: "
            f"{w1:.2f} against {p1:.2f}; 4096x14336 M = 16: {l16:.2f} against {q16:.2f})") in probe
    assert f"only at M = 16 on 14336x4096 ({w16:.2f} against {p16:.2f} us)" in kernel
    # the README named blockwise_fp8_mma alone, but at M = 1 with K > 4096 (4096x14336) the plan runs the
    # CUDA-core kernel (fp8_m1_choice)
    h200 = (9, 0)
    assert fp8_m1_choice(4096, 14336, h200).kernel == "blockwise_fp8_gemv"
    assert fp8_m1_choice(14336, 4096, h200).kernel == "blockwise_fp8_mma"
    assert ("as fast as what the FP8 plans run today (`blockwise_fp8_mma`, or at M = 1 with K > 4096 "
            "`blockwise_fp8_gemv`) only at M = 16 on 14336x4096 and slower elsewhere") in flat(README)
    assert f"(M = 1: {w1:.2f} against {p1:.2f};" in kernel and f"{l16:.2f} against {q16:.2f} at M = 16 on 4096x14336" in kernel


def test_what_the_row_tile_run_adds_is_as_recorded() -> None:
    # batched_gemv_knobs.py's docstring said the later file "adds two row tiles at M = 8 and 16 (with four steps)",
    # which read as if two row tiles ran with four steps only: it holds every knob, and adds R = 2, U = 4 and W = 1
    old, new = (recorded(f"batched_gemv_{name}.json")["rows"] for name in ("m16_64_knobs", "m8_16_row_tiles"))
    knobs = {(r["r"], r["u"]) for r in new}
    assert knobs == {(1, 4), (1, 2), (1, 1), (2, 4), (2, 2), (2, 1)} and {r["m"] for r in new} == {8, 16}
    assert knobs - {(r["r"], r["u"]) for r in old} == {(2, 4)}
    assert 1 in {r["w"] for r in new} - {r["w"] for r in old}
    assert 28672 in {r["n"] for r in new} - {r["n"] for r in old}
    doc = flat((ROOT / "benchmarks" / "batched_gemv_knobs.py").read_text(encoding="utf-8"))
    assert ("times every knob at M = 8 and 16, adding what the earlier file lacks: two row tiles with four steps "
            "(R = 2, U = 4), one-warp blocks (W = 1) and the decoder layer's 28672x4096 projection") in doc


def test_the_static_weights_figures_are_as_recorded() -> None:
    # README's static_weights paragraph, both plans' docstrings and fp8_mma_gemv.cu's header against
    # static_weights_ab.json (run 2, the P0/P1/P2 one). The README said "the other shapes within 1 %" beside
    # M = 16 4096x14336's 2.4 %; DenseVectorPlan said "within 0.2 %" beside 6144x4096's 0.24 % (its 'dense M=1'
    # rows are DenseVectorPlan's, the method says); the FP8 header said level 1
    # moved the other shapes "by at most 1.5 %" beside M = 16 4096x4096's 1.56 %.
    import mircuda as mc

    ab = recorded("static_weights_ab.json")
    dense = {}
    for r in ab["run_2_p0_p1_p2"]:
        kind, m, shape = r["label"].split()[:3]
        if kind == "dense":
            dense[(int(m.removeprefix("M=")), *map(int, shape.split("x")))] = r

    def moved(r: dict[str, Any], level: str = "P1") -> float:
        return abs(r[level] / r["P0"] - 1)

    def change(m: int, n: int, k: int) -> str:
        return f"{n}x{k} {dense[(m, n, k)]['P0']:.2f} -> {dense[(m, n, k)]['P1']:.2f}"

    readme = flat(README)
    quoted = {(1, 4096, 4096), (1, 4096, 14336), (16, 14336, 4096), (16, 4096, 14336)}
    assert (f"M = 1 {change(1, 4096, 4096)} µs, {change(1, 4096, 14336)}; M = 16 {change(16, 14336, 4096)}, "
            f"{change(16, 4096, 14336)}; the other shapes within 1 %") in readme
    assert all(moved(r) < 0.01 for key, r in dense.items() if key not in quoted)
    assert moved(dense[(16, 4096, 14336)]) > 0.01  # what "the other shapes within 1 %" once included

    vector_doc = flat(mc.DenseVectorPlan.__doc__ or "")
    assert (f"{change(1, 4096, 4096)} µs, {change(1, 4096, 14336)}; 14336x4096, 6144x4096 and 28672x4096 within "
            "0.3 %") in vector_doc
    assert max(moved(dense[(1, n, k)]) for n, k in ((14336, 4096), (6144, 4096), (28672, 4096))) < 0.003
    # the 'dense M=1' rows are DenseVectorPlan's (not DenseMatmulPlan's, which runs the batched GEMV at M = 1 on
    # 4096x14336 on the H200): the method says which plan each row timed
    assert "the 'dense M=1' rows and the M = 1 'layer' rows: DenseVectorPlan" in ab["method"]

    matmul_doc = flat(mc.DenseMatmulPlan.__doc__ or "")
    assert f"M = 16 {change(16, 14336, 4096)} µs, {change(16, 4096, 14336)}; M = 8 within 1 %" in matmul_doc
    assert all(moved(r) < 0.01 for (m, _n, _k), r in dense.items() if m == 8)

    header = flat(re.sub(r"^// ?", "", (ROOT / "mircuda" / "cuda_src" / "fp8_mma_gemv.cu").read_text(), flags=re.M))
    fp8 = {r["label"]: r for r in ab["run_2_p0_p1_p2"] if r["label"].startswith("fp8 ")}
    others = [r for label, r in fp8.items() if label != "fp8 M=16 14336x4096"]
    worst = max(others, key=moved)
    first = next(r for r in ab["run_1_p0_p1"] if r["label"].startswith(worst["label"]))
    assert worst["label"] == "fp8 M=16 4096x4096" and round(100 * moved(worst), 1) == 1.6
    assert (f"1 moved every shape by at most 1.6 % (M = 16 4096x4096 {worst['P0']:.2f} -> {worst['P1']:.2f}; "
            f"{100 * moved(first):.1f} % in the first run)") in header
    assert f"M = 1 14336x4096 from {fp8['fp8 M=1 14336x4096']['P0']:.2f} to {fp8['fp8 M=1 14336x4096']['P2']:.2f}" \
        in header
    best = {level: {line.split(":")[0]: float(re.search(r"([0-9.]+) µs", line)[1])  # type: ignore[index]
                    for line in ab["fp8_sweeps"][level]["sweep_best"]} for level in ("P0", "P1", "P2")}
    assert (f"2 took M = 8 4096x14336 from {best['P0']['fastest M=8 4096x14336']:.2f} to "
            f"{best['P2']['fastest M=8 4096x14336']:.2f} us and 14336x4096 from {best['P0']['fastest M=8 14336x4096']:.2f} "
            f"to {best['P2']['fastest M=8 14336x4096']:.2f}") in header
    assert (f"M = 16 4096x14336 from {best['P0']['fastest M=16 4096x14336']:.2f} to "
            f"{best['P2']['fastest M=16 4096x14336']:.2f}") in header
    assert (f"except M = 8 4096x14336 ({best['P1']['fastest M=8 4096x14336']:.2f}) and M = 16 14336x4096 "
            f"({best['P1']['fastest M=16 14336x4096']:.2f}, worse") in header


def test_the_stream_gemv_finding_is_as_recorded() -> None:
    # stream_gemv_experiment.json's finding said P1 (the ring filled before the wait) against P0 moved "1-3 %";
    # its rows give 0.9 to 4.1 % (6144x4096 BF16 4.1 %)
    result = recorded("stream_gemv_experiment.json")
    times: dict[tuple[str, Any, Any], dict[str, float]] = defaultdict(dict)
    for r in result["rows"]:
        times[(r["fmt"], r.get("n"), r.get("k"))][r["path"]] = r["us"]
    gains = [100 * (1 - t["P1:S8:B16:G1"] / t["P0:S8:B16:G1"]) for t in times.values()]
    assert all(g > 0 for g in gains)
    assert f"(P1 vs P0 at S8:B16:G1: {min(gains):.1f} to {max(gains):.1f} % faster)" in result["finding"]
    fastest = {key: min((p for p in t if p != "plan"), key=t.__getitem__) for key, t in times.items()}
    slowest = {max(t, key=t.__getitem__) for t in times.values()}
    assert slowest == {"P1:S12:B8:G1"}
    assert {key: p for key, p in fastest.items() if p != "P1:S4:B16:G2"} == {("fp8", 4096, 14336): "P1:S4:B32:G1"}
    assert "S4:B16:G2 fastest but at FP8 4096x14336, where S4:B32:G1 was" in result["finding"]
    assert all(min(t[p] for p in t if p != "plan") > t["plan"] for t in times.values())  # "slower everywhere"


def test_the_static_weights_runs_name_what_reproduces_them() -> None:
    # static_weights_ab.json said "the profiles' --static-weights rows replace" its uncommitted script: no
    # command had that option; decoder-layer-profile's row (no option) is the one committed measure of the layer.
    # fp4-profile --static-weights (12207e3) came later: the method's "no profile has a --static-weights option"
    # was then untrue (and this test failed on main); it now says when, and which profile has the option since
    from mircuda.cli import _decoder_layer_profile

    method = recorded("static_weights_ab.json")["method"]
    cli = ROOT / "mircuda" / "cli"
    assert {f.name for f in cli.glob("*.py") if "--static-weights" in f.read_text(encoding="utf-8")} == {"_fp4_profile.py"}
    assert "--static-weights rows" not in method and "no profile had a --static-weights option then" in method
    assert "fp4-profile --static-weights, added later" in method
    assert f"decoder-layer-profile's {_decoder_layer_profile.STATIC_PATH.split(', ')[1]} row" in method


def test_the_static_weights_layer_figures_are_as_recorded() -> None:
    # README's static_weights paragraph said only that decoder-layer-profile times a graph of promised plans; it
    # now quotes that row beside the default graph's, from the file it names, and says where the promise does
    # nothing as describe() does (K % 8 != 0, K below one step, numba_execute were missing)
    text = flat(README)
    paragraph = text[text.index("`static_weights=True` (both plans"):text.index("Both plans expose `plan.numba_execute`")]
    name = "decoder_layer_profile_static_weights.json"
    layer = {(r["path"], r["m"]): r["us"] for r in recorded(name)["rows"]}
    assert f"`benchmarks/results/{name}`" in paragraph
    for m in (1, 8, 16):
        static, default = layer[("mircuda graph, static_weights=True", m)], layer[("mircuda graph (4 plans, PDL)", m)]
        assert re.search(rf"{static:.2f} against {default:.2f}( µs)? at M = {m}\b", paragraph), m
    assert "for K % 8 != 0 or K below one step" in paragraph and "nor through `numba_execute`" in paragraph
    assert "silently wrong outputs" in paragraph


def test_the_two_chunk_figures_are_as_recorded() -> None:
    # takes_two_chunks, README and DenseVectorPlan's static_weights paragraph against dense_vector_two_chunks.json.
    # The docstring and README quoted 6144x4096 as 14.17 -> 13.78, the form's sweep row, beside 4096x14336's 27.61,
    # the plan's row (its sweep row: 27.66): both now the plan's rows (13.79). The previous default is the row the
    # sweep of before the change marked as DenseVectorPlan's choice (the mark of after_change_sweep is the bug
    # fixed in Knobs.is_default_for).
    import mircuda as mc
    from mircuda.matmul._vector import takes_two_chunks

    runs = recorded("dense_vector_two_chunks.json")["runs"]

    def rows(run: str) -> dict[tuple[int, int, str], float]:
        return {(r["n"], r["k"], r["path"]): r["us"] for r in runs[run]["rows"] if r["dtype"] == "bf16->bf16"}

    after, static = rows("after_change_sweep"), rows("before_change_p1")
    chosen = {(r["n"], r["k"]): r["path"] for r in runs["before_change_p0"]["rows"]
              if "(DenseVectorPlan's choice)" in r["note"]}
    form = "dense_vector r8 w4 u2 early mb1"
    shapes = ((4096, 4096), (6144, 4096), (4096, 14336))
    assert all(takes_two_chunks(n, k, 132, (9, 0), True) for n, k in shapes)
    assert not takes_two_chunks(14336, 4096, 132, (9, 0), True)
    doc = flat(takes_two_chunks.__doc__ or "")
    changes = ", ".join(f"{n} x {k} {after[(n, k, chosen[(n, k)])]:.2f} -> {after[(n, k, 'DenseVectorPlan')]:.2f}"
                        for n, k in shapes)
    assert f"the previous default's sweep row -> the plan's row (this form) in one run: {changes};" in doc
    assert (f"at 14336 x 4096 (1792 blocks, outside the rule) {after[(14336, 4096, chosen[(14336, 4096)])]:.2f} -> "
            f"{after[(14336, 4096, form)]:.2f} with four warps") in doc
    assert ", ".join(f"{static[(n, k, 'DenseVectorPlan')]:.2f} -> {static[(n, k, form)]:.2f}" for n, k in shapes[:2]) \
        + f" and {static[(4096, 14336, 'DenseVectorPlan')]:.2f} -> {static[(4096, 14336, form)]:.2f}" in doc
    old = {r["path"]: r["us"] for r in recorded("dense_vector_sweep.json")["rows"] if (r["n"], r["k"]) == (4096, 4096)}
    assert f"first at 4096 x 4096 ({old['DenseVectorPlan']:.2f} -> {old[form]:.2f})" in doc
    layer = {r["label"]: r for r in runs["layer_ab"]["rows"]}
    assert (f"the graph measured {layer['layer graph']['old']:.2f} -> {layer['layer graph']['new']:.2f} µs and the four "
            f"direct executes {layer['layer direct']['old']:.2f} -> {layer['layer direct']['new']:.2f}") in doc
    assert ", ".join(f"{n}x{k} {after[(n, k, chosen[(n, k)])]:.2f} -> {after[(n, k, 'DenseVectorPlan')]:.2f}"
                     + (" µs" if n == k else "") for n, k in shapes) in flat(README)

    p0, p1 = rows("after_change_profile_p0"), rows("after_change_profile_p1")
    promised = ", ".join(f"{n}x{k} {p0[(n, k, 'DenseVectorPlan')]:.2f} -> {p1[(n, k, 'DenseVectorPlan')]:.2f}"
                         for n, k in shapes)
    assert f"{promised} (slower)" in flat(mc.DenseVectorPlan.__doc__ or "")
    assert p1[(4096, 14336, "DenseVectorPlan")] > p0[(4096, 14336, "DenseVectorPlan")]  # "(slower)"
    assert f"`dense_vector_two_chunks.json`: {promised}.)" in flat(README)


def test_the_fp4_static_trigger_figures_are_as_recorded() -> None:
    # STATIC_EARLY_MEASURED, BlockScaledFp4VectorPlan's docstring and README against fp4_static_trigger.json: the sweep
    # with the early loads compiled in (late -> early trigger) and without, and fp4-profile without -> with
    # --static-weights after the rule
    import mircuda as mc
    from mircuda.matmul._fp4 import STATIC_EARLY_MEASURED, STATIC_EARLY_MIN_WEIGHTS

    runs = recorded("fp4_static_trigger.json")["runs"]
    shapes = ((14336, 4096), (4096, 14336), (4096, 4096))

    def sweep(run: str, trigger: str) -> dict[tuple[int, int], float]:
        return {(r["n"], r["k"]): r["us"] for r in runs[run]["sweep"]
                if r["candidate"] == f"vector:decode=dp4a:trigger={trigger}"}

    def moves(run: str, named: bool) -> str:
        late, early = sweep(run, "late"), sweep(run, "early")
        parts = [(f"{n}x{k} " if named else "") + f"{late[(n, k)]:.2f} -> {early[(n, k)]:.2f}" for n, k in shapes]
        parts[0] += " µs" if named else ""
        return ", ".join(parts)

    assert f"late -> early trigger, {moves('preload_1', True)}; without the early loads the early trigger was no " \
        f"faster ({moves('preload_0', False)})" in STATIC_EARLY_MEASURED
    early = sweep("preload_1", "early")
    assert f"14336x4096 {early[(14336, 4096)]:.2f} µs, 4096x14336 {early[(4096, 14336)]:.2f}" \
        in flat(mc.BlockScaledFp4VectorPlan.__doc__ or "")
    # the threshold lies between the measured shapes: faster with it above, slower below
    for n, k in shapes:
        assert (early[(n, k)] < sweep("preload_1", "late")[(n, k)]) is (n * k >= STATIC_EARLY_MIN_WEIGHTS), (n, k)

    plain, promised = runs["profile_default"], runs["profile_static_weights"]
    assert (plain["static_weights"], promised["static_weights"]) == (False, True)
    fp4 = {run: {(r["n"], r["k"]): r["fp4_us"] for r in runs[run]["rows"] if r["m"] == 1}
           for run in ("profile_default", "profile_static_weights")}
    quoted = ", ".join(f"{n}x{k} {fp4['profile_default'][(n, k)]:.2f} -> {fp4['profile_static_weights'][(n, k)]:.2f}"
                       + (" µs" if (n, k) == shapes[0] else "") for n, k in shapes)
    assert f"`benchmarks/results/fp4_static_trigger.json`: {quoted})" in flat(README)
    assert f"{'; - '.join(quoted.split(', 4096x4096')[0].split(', '))} with `fp4-profile --static-weights`" in flat(README)


def test_the_fp4_l2_hint_figures_are_as_recorded() -> None:
    # fp4_mma_gemv.cu's note on MIRCUDA_FP4_L2_128B against fp4_l2_hint.json: the range over the tensor-core
    # kernel's points (M >= 4), the two quoted moves, and that the CUDA-core points (M = 1, 2) did not move
    source = (ROOT / "mircuda" / "cuda_src" / "fp4_mma_gemv.cu").read_text(encoding="utf-8")
    note = flat(" ".join(line.lstrip("/ ") for line in source.splitlines() if line.startswith("//")))
    rows = {(r["m"], r["n"], r["k"]): r["us"] for r in recorded("fp4_l2_hint.json")["rows"]}
    gains = [100 * (1 - us["def_l2"] / us["def"]) for (m, _n, _k), us in rows.items() if m >= 4]
    assert len(gains) == 12 and min(gains) > 0
    assert f"M = 4 / 8 / 16 {min(gains):.1f}-{max(gains):.1f} % faster on the four Llama shapes" in note
    for m, n, k in ((8, 4096, 14336), (4, 14336, 4096)):
        us = rows[(m, n, k)]
        assert f"{n}x{k} M = {m} {us['def']:.2f} -> {us['def_l2']:.2f}" in note
    assert all(abs(us["def_l2"] - us["def"]) <= 0.05 for (m, _n, _k), us in rows.items() if m <= 2)
    # the record's own finding: the same range and count, the CUDA-core bound, the kept moe-profile runs
    result = recorded("fp4_l2_hint.json")
    finding = flat(result["finding"])
    assert f"was {min(gains):.1f}-{max(gains):.1f} % faster with the hint at all {len(gains)} points" in finding
    moved = max(abs(us["def_l2"] / us["def"] - 1) for (m, _n, _k), us in rows.items() if m <= 2)
    assert f"moved by at most 0.05 µs ({100 * moved:.1f} %) either way" in finding
    fine = [next(r["grouped_us"] for r in run["rows"] if (r["layer"], r["tokens"]) == ("fine", 1))
            for run in sorted(result["moe_decode"], key=lambda run: run["hint"])]
    assert f"and {fine[0]:.2f} µs off" in finding and f"and {fine[1]:.2f} on" in finding


def test_the_fp4_mma_occupancy_reading_is_as_recorded() -> None:
    # fp4_mma_occupancy_experiment.json's reading against its rows: the best gain over the default ('reg') as a
    # speed-up, the shared-memory ring's range at M = 4 14336x4096, every point where a variant was not slower named
    # with its figures (it once gave 18.31 for the ring's low end, 17.77, and left out 32 rows x 2 stages x 2 warps'
    # 20.326 against 20.334), each such variant slower at its five other points, and the ncu figures.
    result = recorded("fp4_mma_occupancy_experiment.json")
    reading = flat(result["reading"])
    points: dict[str, list[tuple[tuple[int, int, int], float, float]]] = defaultdict(list)
    for table in ("shared_memory_ring", "register_variants"):
        assert len(result[table]["rows"]) == 6
        for row in result[table]["rows"]:
            for name, us in row["us"].items():
                if name not in ("bf16", "reg"):
                    points[name].append(((row["m"], row["n"], row["k"]), us, row["us"]["reg"]))
    best = max(100 * (reg / us - 1) for measured in points.values() for _key, us, reg in measured)
    assert f"No variant was faster than the default by more than {best:.1f} % anywhere" in reading
    rings = [name for name in points if name.startswith("ring")]
    assert all(us > reg for name in rings for _key, us, reg in points[name])  # "slower at all six points"
    low = min(points[name][0][1] for name in rings)
    high = max(points[name][0][1] for name in rings)
    assert points[rings[0]][0][0] == (4, 14336, 4096)
    assert f"M = 4 14336x4096 {low:.2f}-{high:.2f} against {points[rings[0]][0][2]:.2f}" in reading
    faster = 0
    for name, measured in points.items():
        wins = [(key, us, reg) for key, us, reg in measured if us <= reg]
        if not wins:
            continue
        assert len(wins) == 1 and len(measured) == 6, name  # "at one point each and slower at the other five"
        (m, n, k), us, reg = wins[0]
        shape = re.fullmatch(r"r(\d+)s(\d+)w(\d+)", name)
        label = f"{shape[1]} rows x {shape[2]} stages x {shape[3]} warps" if shape else name
        said = f"M = {m} {n}x{k} ({us:.2f} against {reg:.2f}"
        assert re.search(re.escape(label) + r"(?: \([^)]*\))? at " + re.escape(said), reading), (name, said)
        faster += 1
    assert faster == 4
    ncu = result["ncu"]
    assert (f"At {round(ncu['dram_throughput_pct'])} % of DRAM bandwidth and {round(ncu['issue_slots_busy_pct'])} % "
            "of issue slots (ncu)") in reading


def test_the_readmes_fp4_figures_with_the_l2_hint_are_as_recorded() -> None:
    rows = {(r["m"], r["n"], r["k"]): r for r in recorded("fp4_profile_l2_hint.json")["rows"]}
    parts = []
    for m in (8, 16):
        small, large = rows[(m, 4096, 4096)], rows[(m, 14336, 4096)]
        parts.append(f"M = {m}: {small['fp4_us']:.1f} and {large['fp4_us']:.1f} µs (BF16 {small['bf16_us']:.1f} and "
                     f"{large['bf16_us']:.1f})")
    assert f"With the L2 hint (2026-12-02, `fp4_profile_l2_hint.json`): - {'. - '.join(parts)}." in flat(README)
    gains = [100 * (1 - r["us"]["def_l2"] / r["us"]["def"]) for r in recorded("fp4_l2_hint.json")["rows"] if r["m"] >= 4]
    assert f"`.L2::128B`: - {min(gains):.1f}-{max(gains):.1f} % faster at M = 4, 8, 16 on the four shapes" in flat(README)


def test_the_fp4_mma_diet_figures_are_as_recorded() -> None:
    # fp4_mma_gemv.cu's note on MIRCUDA_FP4_SCALE_PAIRS / FULL_STEPS against fp4_mma_diet.json: the range over the
    # 12 points, the two quoted moves, the pairs' own range; the record's reading says the same
    source = (ROOT / "mircuda" / "cuda_src" / "fp4_mma_gemv.cu").read_text(encoding="utf-8")
    note = flat(" ".join(line.lstrip("/ ") for line in source.splitlines() if line.startswith("//")))
    result = recorded("fp4_mma_diet.json")
    rows = {(r["m"], r["n"], r["k"]): r["us"] for r in result["rows"]}
    gains = [100 * (1 - us["default"] / us["before"]) for us in rows.values()]
    pairs = [100 * (1 - us["default"] / us["no_pairs"]) for us in rows.values()]
    assert len(gains) == 12 and min(gains) > 0 and min(pairs) > 0
    assert f"{min(gains):.1f}-{max(gains):.1f} % less time at all 12 points" in note
    assert f"the pairs alone {min(pairs):.1f}-{max(pairs):.1f} %" in note
    for m, n, k in ((16, 14336, 4096), (4, 4096, 14336)):
        us = rows[(m, n, k)]
        assert f"{n}x{k} M = {m} {us['before']:.2f} -> {us['default']:.2f}" in note
    reading = flat(result["reading"])
    assert f"{min(gains):.1f}-{max(gains):.1f} % less time than 'before'" in reading
    assert f"{min(gains):.1f}-{max(gains):.1f} % less time at M = 4, 8, 16 on the four shapes" in flat(README)
    worst = max(us["default"] / us["bf16"] for us in rows.values())
    assert f"{worst:.3f} after" in reading
    assert all(v == 0.0 for r in result["rows"] for v in r["max_rel_diff_to_first"].values())


def test_the_moe_scale_pairs_figures_are_as_recorded() -> None:
    source = flat((ROOT / "mircuda" / "cuda_src" / "fp4_grouped.cu").read_text(encoding="utf-8"))
    runs = recorded("moe_scale_pairs_ab.json")["runs"]
    on = [f"{r['grouped_tbps']:.2f}" for r in runs if r["scale_pairs"] == 1]
    off = [f"{r['grouped_tbps']:.2f}" for r in runs if r["scale_pairs"] == 0]
    assert f"16 tokens (split_k) {on[0]} and {on[1]} TB/s with the pairs, {off[0]} and {off[1]} without" in source


def test_the_fp8_mma_diet_figures_are_as_recorded_and_say_which_way_the_ratio_goes() -> None:
    # README, fp8_mma_gemv.cu's MIRCUDA_FP8_STAGES note and FP8_MMA_STAGES_MEASURED against fp8_mma_diet.json at
    # 14336x4096; the plans' ring (fp8_mma_stages) is the variant the README's "after" figures quote. The README said
    # "16.6 µs, 1.60x torch's rowwise _scaled_mm", which reads as 1.60 times torch's time: the record's ratio is
    # torch's time over ours (torch 26.6 µs, this kernel 16.6).
    from mircuda.matmul._fp8_mma import FP8_MMA_STAGES_MEASURED, fp8_mma_stages

    result = recorded("fp8_mma_diet.json")
    assert "vs_rowwise = torch us / ours" in result["method"]
    rows = {r["m"]: r for r in result["rows"] if (r["n"], r["k"]) == (14336, 4096)}
    ms = (2, 4, 8, 16)

    def figures(variant: str | None, fmt: str, key: str = "us") -> str:
        return " / ".join(format(rows[m][key][variant or f"ring{fp8_mma_stages(m)}"], fmt) for m in ms)

    for m in ms:  # the ratio: torch's time over ours
        r = rows[m]
        adopted = f"ring{fp8_mma_stages(m)}"
        assert abs(r["vs_rowwise"][adopted] - r["torch_rowwise_us"][adopted] / r["us"][adopted]) < 0.005
        assert r["vs_rowwise"][adopted] > 1  # torch took longer
    assert (f"M = 2 / 4 / 8 / 16: {figures('base', '.1f')} -> {figures(None, '.1f')} µs, where torch's rowwise "
            f"`_scaled_mm` took {figures(None, '.2f', 'vs_rowwise')}x as long") in flat(README)
    source = (ROOT / "mircuda" / "cuda_src" / "fp8_mma_gemv.cu").read_text(encoding="utf-8")
    note = flat(" ".join(line.lstrip("/ ") for line in source.splitlines() if line.startswith("//")))
    assert (f"14336x4096 M = 2 / 4 / 8 / 16: the former kernel {figures('base', '.1f')} us, the cvt decode alone "
            f"{figures('cvt', '.1f')}, with the ring of 2 {figures('ring2', '.1f')}, of 3 {figures('ring3', '.1f')}"
            ) in note
    # (16.445 quoted as 16.44: within the last digit)
    got = re.search(r"a ring of 3 K-blocks ([\d. /]+) µs, of 2 ([\d. /]+), the former double buffer ([\d. /]+);",
                    FP8_MMA_STAGES_MEASURED)
    assert got is not None
    for quoted, variant, digits in zip(got.groups(), ("ring3", "ring2", "base"), (2, 2, 1)):
        values = [float(v) for v in quoted.split(" / ")]
        assert all(abs(v - rows[m]["us"][variant]) <= 0.51 * 10 ** -digits for v, m in zip(values, ms, strict=True))


def test_the_fp4_split_figures_are_as_recorded_and_the_rule_splits_where_the_split_was_faster() -> None:
    # SPLIT_K_DEFAULT_MEASURED and the README against fp4_mma_split.json; default_split_k on the H200 (132 SMs;
    # two resident 4-warp blocks at M = 16, 179 registers, else three) splits exactly where clusters of two 4-warp
    # blocks (s2w4) were faster than the default in both runs
    from mircuda.matmul._fp4 import SPLIT_K_DEFAULT_MEASURED, default_split_k

    runs = recorded("fp4_mma_split.json")["runs"]
    a, b = ({(r["m"], r["n"], r["k"]): r["us"] for r in run} for run in runs.values())
    for run in (a, b):
        for (m, n, k), us in run.items():
            split = default_split_k(n, k, 32, 90, 132, lambda w, m=m: 2 if m == 16 else 3, 128)
            assert split == (us["s2w4"] < us["default"]), (m, n, k)

    def pair(us: dict[str, float]) -> str:
        return f"{us['s2w4']:.2f} against {us['default']:.2f}"

    def both(n: int) -> str:
        return (f"{b[(4, n, 4096)]['s2w4']:.2f} / {b[(8, n, 4096)]['s2w4']:.2f} against "
                f"{b[(4, n, 4096)]['default']:.2f} / {b[(8, n, 4096)]['default']:.2f}")

    text = flat(SPLIT_K_DEFAULT_MEASURED)
    assert f"5120x4096 {both(5120)} µs, 6144x4096 {both(6144)};" in text
    assert f"4096x4096 (row blocks fit one per SM) {pair(a[(4, 4096, 4096)])} at M = 4" in text
    assert f"(two waves) {pair(b[(4, 8192, 4096)])} and {pair(a[(4, 14336, 4096)])}" in text
    assert f"M = 16 on 6144x4096 (two resident blocks per SM) {pair(b[(16, 6144, 4096)])}" in text
    assert f"M = 4 / 8 on 6144x4096: {both(6144)} µs (H200, 2026-12-02, `fp4_mma_split.json`" in flat(README)


def test_the_64_row_swapped_tiles_figures_are_as_recorded() -> None:
    # README: M = 64 on 4096x4096 13.5 against 16.3 µs for the kernel before them, cuBLAS 12.9; the worst of the 48 cells at M = 32-64
    # from 0.74 to 0.93 of cuBLAS; the table's entries at M = 32-64 are the sweep's fastest
    text = flat(README)
    assert ("M = 64 on 4096x4096: 13.5 against 16.3 µs for the kernel before them, cuBLAS 12.9 (same run); the worst "
            "of the 48 cells at M = 32-64 "
            "over four type pairs and four shapes went from 0.74 to 0.93 of cuBLAS") in text
    sweep = recorded("matmul_sweep_m32_64_midm2.json")["rows"]
    replaced = {tuple(e[:5]): e for e in recorded("matmul_sweep_zeroing.json")["replaced"]}
    labels = {"bf16->bf16": ("bf16", "bf16"), "f16->f16": ("f16", "f16"), "bf16->f32": ("bf16", "f32"),
              "f16->f32": ("f16", "f32")}
    cells = {(labels[r["dtype"]], r["n"], r["k"], r["m"]) for r in sweep}
    assert len(cells) == 48
    worst_before, worst_after = 1e9, 1e9
    for (a, c), n, k, m in cells:
        rows = [r for r in sweep if (labels[r["dtype"]], r["n"], r["k"], r["m"]) == ((a, c), n, k, m)]
        fastest = min((r for r in rows if r["path"].startswith("sweep ")), key=lambda r: r["us"])
        cublas = next(r["us"] for r in rows if r["path"].startswith("cuBLAS"))
        before = next(r["us"] for r in rows if r["path"] == "DenseMatmulPlan")  # the table before this sweep
        # each became the table's entry, replaced in 2026-12-03's re-sweep (matmul_sweep_zeroing.json keeps them)
        assert replaced[a, c, n, k, m][7] == round(fastest["us"], 3), (a, c, n, k, m)
        worst_before, worst_after = min(worst_before, cublas / before), min(worst_after, cublas / fastest["us"])
        if ((a, c), n, k, m) == (("bf16", "bf16"), 4096, 4096, 64):
            assert (round(fastest["us"], 1), round(before, 1), round(cublas, 1)) == (13.5, 16.3, 12.9)
            assert fastest["path"] == "sweep sm90_swap_pingpong_64x32x64_c1x2_bf16_bf16"
    assert (round(worst_before, 2), round(worst_after, 2)) == (0.74, 0.93)


def test_the_paired_launch_figures_are_as_recorded() -> None:
    runs = recorded("launch_paired.json")["runs"]
    quoted = []
    for r in runs:
        us = r["us_per_launch_median"]
        quoted.append((round(r["ratio_median_of_pairs"], 3), round(r["ratio_quartiles"][0], 3),
                       round(r["ratio_quartiles"][1], 3), round(us["C cuLaunchKernel (the floor)"], 2),
                       round(us["mircuda TypedKernel.launch"], 2)))
    assert quoted == [(1.147, 1.108, 1.186, 2.75, 3.16), (1.133, 1.106, 1.172, 3.13, 3.54),
                      (1.15, 1.1, 1.197, 3.35, 3.84)]
    text = flat(README)
    assert ("1.147 (quartiles 1.108-1.186; C 2.75 µs, mircuda 3.16 µs per launch), 1.133 (1.106-1.172; C 3.13, "
            "mircuda 3.54) and 1.150 (1.100-1.197; C 3.35, mircuda 3.84)") in text


def test_the_m_major_fp8_scale_figures_are_as_recorded() -> None:
    # README (Blockwise FP8 plans, M > 16): the cooperative kernel with its M-major sa copy, as the default in one run
    # and as an experimental family beside the K-major kernel in the run before; ncu's two durations
    text = flat(README)
    assert ("geometric mean 0.915 of torch's rowwise `_scaled_mm` (worst 0.866) and 0.980 of its blockwise one "
            "(worst 0.956); the same kernel forced by name in that run 0.896 and 0.959") in text
    assert "The K-major form measured 0.849 and 0.906 in the run before" in text
    assert ("now takes 59.0 µs (1165 TFLOP/s) against 62.0 for the K-major form (59.8 for the M-major one, "
            "experimental build)") in text
    assert "the K-major kernel at 66 µs beside cuBLASLt's blockwise kernel's 55" in text
    assert "still met at 1 of the 8 points only" in text

    def summary(name: str) -> dict[str, tuple[float, float, float, float, int]]:
        return {s["kernel"]: (round(s["geomean_vs_rowwise"], 3), round(s["worst_vs_rowwise"], 3),
                              round(s["geomean_vs_blockwise"], 3), round(s["worst_vs_blockwise"], 3), s["goals_met"])
                for s in recorded(name)["summary"]}

    now = summary("fp8_sm90_sfa_m_major.json")
    assert now[f"default ({COOP})"] == (0.915, 0.866, 0.98, 0.956, 1)
    assert now[COOP][0] == 0.896 and now[COOP][2] == 0.959
    before = summary("fp8_sm90_sfa_m_major_experimental.json")
    assert (before[COOP][0], before[COOP][2]) == (0.849, 0.906)

    def point(name: str, path: str) -> tuple[float, float]:
        rows = recorded(name)["rows"]
        row = next(r for r in rows if r["path"] == path and (r["m"], r["n"], r["k"]) == (2048, 4096, 4096))
        return round(row["us"], 1), round(row["tflops"])

    assert point("fp8_sm90_sfa_m_major.json", f"default ({COOP})") == (59.0, 1165)
    assert point("fp8_sm90_sfa_m_major_experimental.json", f"default ({COOP})")[0] == 62.0  # the K-major default
    assert point("fp8_sm90_sfa_m_major_experimental.json",
                 "sm90_blockwise_coop_128x128x128_c1x2_sfamn_t_e4m3_bf16")[0] == 59.8
    ncu = recorded("fp8_sm90_ncu_vs_cublaslt.json")["kernels"]
    assert sorted(round(k["metrics"]["Duration (us)"]) for k in ncu.values()) == [55, 66]


def test_the_readme_quotes_the_cutlass_pdl_ab() -> None:
    # README's programmatic-dependent-launch paragraph, from the A/B it names (means of two medians per side)
    result = recorded("cutlass_pdl_ab.json")
    rows, summary = result["rows"], result["summary"]
    text = flat(README)
    capable = [r for r in rows if r["pdl_capable"]]
    faster = sum(r["on_vs_off"] > 1.01 for r in capable)
    slower = sum(r["on_vs_off"] < 0.99 for r in capable)
    assert (faster, slower, len(capable)) == (summary["faster_over_1pct"], summary["slower_over_1pct"], 16)
    assert (f"{faster} of the {len(capable)} cells whose kernel waits (in the measured table as it then was) faster "
            "by more than 1 %") in text
    assert f"{len(capable) - faster - slower} within 1 %, {slower} slower" in text

    def cell(m: int, n: int, k: int) -> str:
        r = next(r for r in rows if (r["m"], r["n"], r["k"]) == (m, n, k))
        assert r["off_mean_us"] == round(sum(r["off_us"]) / 2, 2) and r["on_mean_us"] == round(sum(r["on_us"]) / 2, 2)
        return f"{r['off_mean_us']:.2f} -> {r['on_mean_us']:.2f}"

    from mircuda.matmul._dense import DenseMatmulPlan

    doc = flat(DenseMatmulPlan.programmatic_launch.__doc__ or "")
    for m, n, k in ((64, 4096, 4096), (384, 4096, 4096), (256, 6144, 4096), (192, 4096, 14336), (128, 14336, 4096)):
        assert f"M = {m} {n}x{k} {cell(m, n, k)}" in text
        assert f"{n}x{k} {cell(m, n, k)}" in doc
    assert (f"of {len(capable)} such cells {faster} faster by more than 1 %, {len(capable) - faster - slower} within "
            f"1 %, {slower} slower") in doc
    below = [sum(r[f"ratio_{side}"] < 0.97 for r in rows) for side in ("off", "on")]
    assert f"of the {len(rows)} cells measured, {below[0]} were below 0.97 of cuBLAS without and {below[1]} with" in text


def test_the_readme_quotes_the_fp8_pdl_ab_and_the_pdl_rerun() -> None:
    # README's BlockwiseFp8Plan paragraph on programmatic dependent launch, from the A/B it names (means of the two
    # runs per side), and the dense paragraph's rerun on the shipped library
    text = flat(README)
    fp8 = recorded("fp8_pdl_ab.json")
    cells = {(c["m"], c["n"], c["k"]): c for c in fp8["cells"]}

    def means(m: int, n: int, k: int) -> str:
        us = cells[(m, n, k)]["plan_us"]
        off, on = (us["off_1"] + us["off_2"]) / 2, (us["on_1"] + us["on_2"]) / 2
        assert cells[(m, n, k)]["on_vs_off"] == round(off / on, 3)
        return f"{off:.2f} -> {on:.2f}"

    assert f"M = 256 6144x4096 {means(256, 6144, 4096)} µs" in text
    middle = [c["on_vs_off"] for c in fp8["cells"] if c["m"] <= 256]
    large = [c["on_vs_off"] for c in fp8["cells"] if c["m"] == 2048]
    assert f"{min(middle):.2f}-{max(middle):.2f}x faster" in text
    assert f"M = 2048 {min(large):.2f}-{max(large):.2f}x (4096x4096 {means(2048, 4096, 4096)})" in text
    rowwise = fp8["summary"]["M>=2048 geomean plan vs torch rowwise (off_1, off_2, on_1, on_2)"]
    blockwise = fp8["summary"]["M>=2048 geomean plan vs torch blockwise (off_1, off_2, on_1, on_2)"]
    assert (f"from {rowwise[0]:.3f} and {rowwise[1]:.3f} of torch rowwise to {rowwise[2]:.3f} and {rowwise[3]:.3f}, "
            f"and from {blockwise[0]:.3f} and {blockwise[1]:.3f} of torch blockwise to {blockwise[2]:.3f} and "
            f"{blockwise[3]:.3f}") in text
    assert fp8["failures"] == []
    record = recorded("cutlass_pdl_ab_rerun.json")
    rerun = record["summary"]
    edge = next(r for r in record["rows"] if (r["m"], r["n"], r["k"]) == (128, 14336, 4096))
    assert abs(edge["on_vs_off"] - 1) <= 0.0105 < edge["on_mean_us"] / edge["off_mean_us"] - 1  # within by the rule
    assert (f"{rerun['faster_over_1pct']} faster by more than 1 %, {rerun['within_1pct']} within (one at the edge: "
            f"M = 128 14336x4096 {edge['off_mean_us']:.2f} -> {edge['on_mean_us']:.2f} µs, "
            f"{100 * (edge['on_mean_us'] / edge['off_mean_us'] - 1):.2f} % slower), {rerun['slower_over_1pct']} slower"
            ) in text
    below = rerun["cells_below_0.97_of_cublas"]
    assert f"{below['off']} cells below 0.97 of cuBLAS without, {below['on']} with" in text


def test_the_readme_quotes_the_streamk_pdl_ab_and_the_resweep() -> None:
    # README: the rerun's six control cells with the split-K and stream-K kernels built with the waits, and the bf16
    # rows at M = 128, 192 and 384 swept again; figures derived from the records and the table
    text = flat(README)
    record = recorded("cutlass_pdl_ab_streamk.json")
    controls = {(r["m"], r["n"], r["k"]) for r in recorded("cutlass_pdl_ab_rerun.json")["rows"] if not r["pdl_capable"]}
    rows = {(r["m"], r["n"], r["k"]): r for r in record["rows"]}
    assert set(rows) == controls and all(r["pdl_capable"] for r in rows.values()) and record["failures"] == []
    # data-parallel: a kernel without stream-K units run with one K slice; the table of that day gave the split-K
    # kernel at M = 128 4096x14336 two (as today's still does)
    table = json.loads((ROOT / "mircuda" / "matmul" / "tuned" / "sm90_dense.json").read_text())["entries"]
    two = {(e[4], e[2], e[3]) for e in table if e[:2] == ["bf16", "bf16"] and e[6] > 1}
    one_slice = [c for c, r in rows.items() if "streamk" not in r["kernel"] and c not in two]
    assert sorted(one_slice) == [(128, 4096, 4096), (192, 6144, 4096), (192, 14336, 4096)]
    one_slice = [(128, 4096, 4096), (192, 14336, 4096), (192, 6144, 4096)]  # in the README's order
    quoted = ", ".join(f"M = {m} {n}x{k} {rows[m, n, k]['off_mean_us']:.2f} -> "
                       f"{rows[m, n, k]['on_mean_us']:.2f}{' µs' if i == 0 else ''}"
                       for i, (m, n, k) in enumerate(one_slice))
    assert f"the three that run data-parallel (one K slice per tile, no flags) faster ({quoted})" in text
    assert all(rows[c]["on_vs_off"] > 1.01 for c in one_slice)
    assert all(abs(r["on_vs_off"] - 1) <= 0.01 for c, r in rows.items() if c not in one_slice)
    sweep = [*recorded("matmul_sweep_pdl_bf16_m128_384.json")["rows"],
             *recorded("matmul_sweep_pdl_others_m128_384.json")["rows"]]
    labels = {"bf16->bf16": ["bf16", "bf16"], "f16->f16": ["f16", "f16"], "bf16->f32": ["bf16", "f32"],
              "f16->f32": ["f16", "f32"]}
    # the entries as these sweeps made them: later re-sweeps replaced them and keep them
    replaced = {tuple(e[:5]): e for e in recorded("matmul_sweep_zeroing.json")["replaced"]}
    resweep = [e for e in table_after(None) if e[4] in (128, 192, 384)]
    assert len(resweep) == 48 and sum(tuple(e[:5]) in replaced for e in resweep) == 12
    for e in resweep:  # each entry is its sweep's fastest deterministic row (the _nd kernels never enter the table)
        fastest = min((r for r in sweep if r["path"].startswith("sweep ") and "_nd_" not in r["path"]
                       and [*labels[r["dtype"]], r["n"], r["k"], r["m"]] == e[:5]), key=lambda r: r["us"])
        cublas = next(r["us"] for r in sweep if r["path"].startswith("cuBLAS") and r["dtype"] == fastest["dtype"]
                      and (r["n"], r["k"], r["m"]) == (fastest["n"], fastest["k"], fastest["m"]))
        splits = int(fastest["note"].split("splits=")[1].split()[0])
        assert (fastest["path"].removeprefix("sweep "), splits, round(fastest["us"], 3), round(cublas, 3)) == \
            (e[5], e[6], e[7], e[8])
    below = sum(e[8] / e[7] < 0.97 for e in resweep)
    # 42: the same 48 rows of b061a7a's table (git show b061a7a:mircuda/matmul/tuned/sm90_dense.json), no record holds
    assert f"{below} of those 48 entries below 0.97 of cuBLAS, against 42 of the entries they replace" in text
    every = recorded("cutlass_pdl_ab_all.json")
    summary, slower = every["summary"], [r for r in every["rows"] if r["on_vs_off"] < 0.99]
    assert summary["pdl_capable_cells"] == summary["cells"] == 22 and every["failures"] == [] and len(slower) == 1
    assert (f"{summary['faster_over_1pct']} faster by more than 1 %, {summary['within_1pct']} within, "
            f"{summary['slower_over_1pct']} slower (M = {slower[0]['m']} {slower[0]['n']}x{slower[0]['k']} "
            f"{slower[0]['off_mean_us']:.2f} -> {slower[0]['on_mean_us']:.2f} µs); "
            f"{summary['cells_below_0.97_of_cublas']['off']} cells below 0.97 of cuBLAS without, "
            f"{summary['cells_below_0.97_of_cublas']['on']} with.") in text


def test_the_readme_quotes_the_stream_k_flag_zeroing_ab_and_its_resweep() -> None:
    # README: the six cells with the memset library and the zeroing one (means over each library's two runs), and
    # the table's rows swept again with the zeroing library: every swept entry is its run's fastest deterministic
    # kernel, and the counts compare them with the entries they replaced
    text = flat(README)
    ab = recorded("streamk_zeroing_ab.json")
    runs = ab["runs"]
    assert [r["library"].split()[0] for r in runs] == ["memset", "zero_stream_k_flags"] * 2
    assert all(r["failures"] == [] for r in runs)

    def means(cell: tuple[int, int, int], setting: str) -> tuple[float, float]:
        us = [next(r[setting] for r in run["rows"] if (r["m"], r["n"], r["k"]) == cell) for run in runs]
        return mean(us[0::2]), mean(us[1::2])

    flagged = [(128, 4096, 14336), (384, 4096, 14336), (768, 14336, 4096)]
    controls = [(128, 4096, 4096), (192, 14336, 4096), (192, 6144, 4096)]
    for cell in flagged:
        kernel = next(r["kernel"] for r in runs[0]["rows"] if (r["m"], r["n"], r["k"]) == cell)
        splits = next(r["splits"] for r in runs[0]["rows"] if (r["m"], r["n"], r["k"]) == cell)
        assert ("streamk" in kernel) != (splits == 2), (kernel, splits)  # split-K with 2 slices, or stream-K units
    for cell in controls:
        kernel = next(r["kernel"] for r in runs[0]["rows"] if (r["m"], r["n"], r["k"]) == cell)
        splits = next(r["splits"] for r in runs[0]["rows"] if (r["m"], r["n"], r["k"]) == cell)
        assert "streamk" not in kernel and splits == 1, kernel
        memset, zeroing = means(cell, "on_mean_us")
        assert abs(memset / zeroing - 1) <= 0.001
    assert "the three data-parallel controls, launched programmatically, moved by 0.1 % or less" in text
    (a0, a1), (b0, b1), (c0, c1) = (means(cell, "on_mean_us") for cell in flagged)
    assert a0 > a1 and b0 > b1 and c0 > c1
    assert (f"went from {a0:.2f} to {a1:.2f} µs (M = 128 4096x14336, split-K, 2 slices), {b0:.2f} -> {b1:.2f} "
            f"(M = 384 4096x14336, stream-K forced) and {c0:.2f} -> {c1:.2f} (M = 768 14336x4096, stream-K;") in text
    off0, off1 = means(flagged[0], "off_mean_us")
    assert off1 > off0 and f"the memset did: {off0:.2f} -> {off1:.2f} µs at M = 128 4096x14336" in text
    summary = {(s["m"], s["n"], s["k"]): s for s in ab["summary"]}
    assert (summary[flagged[0]]["memset_on_us"], summary[flagged[0]]["zeroing_on_us"]) == (round(a0, 2), round(a1, 2))

    sweep = recorded("matmul_sweep_zeroing.json")
    assert sweep["failures"] == [] and len(sweep["sweeps"]) == 38
    labels = {"bf16->bf16": ["bf16", "bf16"], "f16->f16": ["f16", "f16"], "bf16->f32": ["bf16", "f32"],
              "f16->f32": ["f16", "f32"]}
    swept = {(*labels[s["dtype"]], s["m"]) for s in sweep["sweeps"]}
    assert len(swept) == 38
    assert {m for *_, m in swept} == {24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1536}
    assert {(a, c) for a, c, m in swept if m in (128, 192, 384)} == {("bf16", "bf16")}
    assert ("f16", "f32", 1536) not in swept
    table = table_after("matmul_sweep_zeroing.json")  # as this re-sweep left it
    now, before = resweep_entries("matmul_sweep_zeroing.json")
    assert len(now) == 152
    c = resweep_counts(now, before)
    assert (f"Of those 152 entries, {c['below']} are below 0.97 of cuBLAS, against {c['below_before']} of the entries "
            f"they replace, and {c['ge1']} at or above 1.0, against {c['ge1_before']}; the geometric mean of their ratios "
            f"is {c['mean']}, against {c['mean_before']}; {c['changed']} of them name another kernel or "
            "K-slice count.") in text
    middle = [e for e in table if 16 < e[4] < 2048]
    middle_before = [before.get(tuple(e[:5]), e) for e in middle]
    assert (f"Over the table's middle (16 < M < 2048, {len(middle)} entries), "
            f"{sum(e[8] / e[7] < 0.97 for e in middle)} are below 0.97 "
            f"({sum(e[8] / e[7] < 0.97 for e in middle_before)} before) and the worst is "
            f"{min(e[8] / e[7] for e in middle):.2f} ({min(e[8] / e[7] for e in middle_before):.2f} before).") in text
    # the part of it programmatic launch explains: entries that zero no flags, and rows swept with it before
    def zeroes(e: list[Any]) -> bool:
        return "streamk" in e[5] or e[6] > 1

    plain = [(before[tuple(e[:5])], e) for e in now if not zeroes(e) and not zeroes(before[tuple(e[:5])])]
    again = [(before[tuple(e[:5])], e) for e in now if e[:2] == ["bf16", "bf16"] and e[4] in (128, 192, 384)]
    faster = [100 * (geometric_mean([b[7] / a[7] for b, a in pairs]) - 1) for pairs in (plain, again)]
    assert (f"the {len(plain)} entries whose kernels zero no flags, before and after, are {faster[0]:.1f} % faster "
            f"(geometric mean of the time ratios), {sum(a[8] / a[7] < 0.97 for _, a in plain)} of them below 0.97 "
            f"against {sum(b[8] / b[7] < 0.97 for b, _ in plain)}; the {len(again)} bf16 entries at M = 128, 192 and "
            f"384, swept with programmatic launch earlier that day, are {faster[1]:.1f} % faster, "
            f"{sum(b[8] / b[7] < 0.97 for b, _ in again)} below 0.97 before and") in text
    assert "below 0.97 before and after." in text and sum(a[8] / a[7] < 0.97 for _, a in again) == \
        sum(b[8] / b[7] < 0.97 for b, _ in again)
    # the swept rows as the README lists them
    assert ("at M = 24, 32, 48, 64, 96, 256, 512 and 768 for the four type pairs, at M = 1536 for all but f16->f32, "
            "and the bf16 rows at M = 128, 192 and 384") in text
    assert {m for a, c, m in swept if (a, c) == ("f16", "f32")} == {24, 32, 48, 64, 96, 256, 512, 768}
    assert all({m for a, c, m in swept if (a, c) == pair} == {24, 32, 48, 64, 96, 256, 512, 768, 1536}
               for pair in (("f16", "f16"), ("bf16", "f32")))


def test_the_readme_quotes_the_rest_of_the_zeroing_resweep() -> None:
    # README: the rows the flag-zeroing re-sweep left, swept the same way; the table's entries there are each run's
    # fastest deterministic row, and the counts are of those entries against the ones they replaced
    text = flat(README)
    sweep = recorded("matmul_sweep_zeroing_rest.json")
    swept = {(*LABELS[s["dtype"]], s["m"]) for s in sweep["sweeps"]}
    assert sweep["failures"] == [] and len(sweep["sweeps"]) == len(swept) == 14
    assert swept == {(a, c, m) for a, c in (("f16", "f16"), ("bf16", "f32"), ("f16", "f32")) for m in (128, 192, 384)} \
        | {("f16", "f32", 1536)} | {(*pair, 1024) for pair in LABELS.values()}
    first = {(*LABELS[s["dtype"]], s["m"]) for s in recorded("matmul_sweep_zeroing.json")["sweeps"]}
    assert not swept & first  # the rows it left
    assert ("The rows it left (f16, bf16->f32 and f16->f32 at M = 128, 192 and 384; f16->f32 at M = 1536; the four "
            "type pairs at M = 1024) were swept so later that day") in text
    now, before = resweep_entries("matmul_sweep_zeroing_rest.json")
    assert len(now) == 56
    c = resweep_counts(now, before)
    assert counts_sentence(56, c) + " or K-slice count." in text


def test_the_readme_quotes_the_epilogue_tile_ab_and_its_sweep() -> None:
    # README and sm90.cuh: the 16-column epilogue tile, same kernel with either tile (A/B), and the rows swept with it
    text = flat(README)
    source = flat((ROOT / "mircuda" / "cutlass_build" / "src" / "sm90.cuh").read_text().replace("//", ""))
    ab = recorded("epilogue_tile_ab.json")
    assert [r["library"].split(":")[0] for r in ab["runs"]] == ["auto", "narrow", "auto", "narrow"]
    cells = {(s["dtype"], s["m"], s["n"], s["k"]): s for s in ab["summary"]}
    assert len(cells) == 16
    for s in cells.values():  # each summary figure is the mean of its library's two runs
        runs = [[r for r in run["rows"] if (r["dtype"], r["m"], r["n"], r["k"]) == (s["dtype"], s["m"], s["n"], s["k"])]
                for run in ab["runs"]]
        assert all(len(r) == 1 and r[0]["kernel"] == s["kernel"] for r in runs)
        assert s["auto_on_us"] == round((runs[0][0]["on_mean_us"] + runs[2][0]["on_mean_us"]) / 2, 2)
        assert s["narrow_on_us"] == round((runs[1][0]["on_mean_us"] + runs[3][0]["on_mean_us"]) / 2, 2)

    def quoted(dtype: str, m: int, n: int, k: int) -> str:
        s = cells[dtype, m, n, k]
        return f"{s['auto_on_us']:.2f} -> {s['narrow_on_us']:.2f}"

    swap192, coop256 = cells["bf16->bf16", 192, 14336, 4096], cells["bf16->f32", 8192, 4096, 4096]
    assert swap192["kernel"].startswith("sm90_swap_128x192x64_c4x1") and coop256["kernel"].startswith("sm90_coop_128x256")
    assert (f"the swapped 128x192 BF16 kernel went from {swap192['auto_on_us']:.2f} to {swap192['narrow_on_us']:.2f} µs "
            f"(M = 192 14336x4096) and the FP32 128x256 one from {coop256['auto_on_us']:.2f} to "
            f"{coop256['narrow_on_us']:.2f} (M = 8192 4096x4096)") in text
    assert f"the swapped 128x192 BF16 split-K kernel at M = 192 14336x4096 {quoted('bf16->bf16', 192, 14336, 4096)} µs" \
        in source
    coop192 = [s for s in cells.values() if s["kernel"].startswith("sm90_coop_128x192x64") and s["dtype"] == "bf16->bf16"]
    assert len(coop192) == 2 and max(abs(s["auto_on_us"] / s["narrow_on_us"] - 1) for s in coop192) < 0.008
    assert (f"the cooperative 128x192 BF16 kernel moved by less than 0.8 % ({quoted('bf16->bf16', 1536, 6144, 4096)} at "
            f"M = 1536 6144x4096, {quoted('bf16->bf16', 384, 4096, 14336)} at M = 384 4096x14336, stream-K)") in text
    # the same kernel in both libraries: what the first rule narrowed and the final one does too, or neither did
    first_rule = {"bf16_bf16": ("sm90_pingpong_64x128x64", "sm90_coop_128x192x64", "sm90_swap_128x192x64_c4x1"),
                  "bf16_f32": ("sm90_swap_pingpong_64x64x64_c2x1", "sm90_swap_128x128x64_splitk",
                               "sm90_coop_128x128x64_streamk", "sm90_coop_128x256x64_c2x1", "sm90_swap_128x32x128_splitk",
                               "sm90_swap_128x64x128_splitk")}
    same = [s for s in cells.values() if not s["kernel"].startswith(first_rule["bf16_f32" if s["kernel"].endswith("_f32") else "bf16_bf16"])]
    assert len(same) == 8 and max(abs(s["auto_on_us"] / s["narrow_on_us"] - 1) for s in same) <= 0.005
    assert "the 8 cells whose kernel is the same in both libraries moved by 0.5 % or less" in text
    pingpong, swap128 = cells["bf16->bf16", 128, 6144, 4096], cells["bf16->f32", 256, 4096, 14336]
    assert pingpong["kernel"] == "sm90_pingpong_64x128x64_bf16_bf16" and swap128["kernel"].startswith("sm90_swap_128x128x64")
    assert f"(64x128 BF16, 8 -> 9 stages: {quoted('bf16->bf16', 128, 6144, 4096)} µs at M = 128 6144x4096)" in text
    assert f"64x128 BF16, 8 -> 9 stages, {quoted('bf16->bf16', 128, 6144, 4096)} µs at M = 128 6144x4096)" in source
    faster = 100 * (swap128["auto_on_us"] / swap128["narrow_on_us"] - 1)
    assert f"though the swapped one was {faster:.1f} % faster at M = 256 4096x14336" in text
    assert f"the A/B measured the swapped one {faster:.1f} % faster at M = 256 4096x14336, a small output" in source

    # the sweep: the two FP32 128x128 kernels at M = 128 14336x4096, with the 16-column tile and (the entry before)
    # without; the table keeps the entries before for them
    sweep = recorded("matmul_sweep_epilogue.json")
    before = {tuple(e[:5]): e for e in sweep["replaced"]}
    slower = []
    for a in ("bf16", "f16"):
        entry = before[a, "f32", 14336, 4096, 128]
        row = next(r for r in sweep["rows"] if r["path"] == f"sweep {entry[5]}" and LABELS[r["dtype"]] == [a, "f32"]
                   and (r["n"], r["k"], r["m"]) == (14336, 4096, 128)
                   and int(r["note"].split("splits=")[1].split()[0]) == entry[6])
        slower.append(f"{entry[7]:.2f} -> {row['us']:.2f}")
    assert f"5 -> 6: {slower[0]} and {slower[1]} µs at M = 128 14336x4096 in two sweeps that day" in text
    assert f"5 -> 6: {slower[0]} and {slower[1]} µs at M = 128 14336x4096, a large output" in source
    def winner(e: list[Any]) -> str:  # the run's fastest deterministic kernel for the entry's cell
        return str(min((r for r in sweep["rows"] if r["path"].startswith("sweep ") and "_nd_" not in r["path"]
                        and [*LABELS[r["dtype"]], r["n"], r["k"], r["m"]] == e[:5]), key=lambda r: r["us"])["path"])

    fp32_128 = ("sm90_swap_128x128x64_splitk_", "sm90_coop_128x128x64_streamk")
    assert len(sweep["kept"]) == 4 and all(e[1] == "f32" and (e[5].startswith(fp32_128) or
                                                              winner(e).removeprefix("sweep ").startswith(fp32_128))
                                           for e in sweep["kept"])
    now, _ = resweep_entries("matmul_sweep_epilogue.json")
    assert len(now) == 52 and len(sweep["sweeps"]) == 13
    for e in now:  # and every other entry of these runs neither names nor replaced such a kernel
        if e not in sweep["kept"] and e[1] == "f32":
            assert not e[5].startswith(fp32_128) and not before[tuple(e[:5])][5].startswith(fp32_128), e
    c = resweep_counts(now, before)
    assert (f"of those 52 entries, {c['below']} are below 0.97 of cuBLAS against {c['below_before']}, and {c['ge1']} "
            f"at or above 1.0 against {c['ge1_before']}; the geometric mean of their ratios is {c['mean']}, "
            f"against {c['mean_before']}.") in text
    table = table_after("matmul_sweep_epilogue.json")
    for a in ("bf16", "f16"):
        e = next(e for e in table if e[:5] == [a, "f32", 4096, 14336, 128])
        assert e[5:7] == [f"sm90_swap_128x64x128_splitk_{a}_f32", 2]
        assert f"{a}->f32 {before[tuple(e[:5])][8] / before[tuple(e[:5])][7]:.3f} -> {e[8] / e[7]:.3f}" in text
    assert f"The whole table then: {table_counts(table)}." in text
    on_new = [e for e in table if on_16_column_tile(e)]
    swept = {tuple(e[:5]) for e in now}
    assert (f"{sum(tuple(e[:5]) not in swept for e in on_new)} of the {len(on_new)} entries that named a kernel with "
            "the new tile had not been swept with it") in text


def table_counts(table: list[list[Any]]) -> str:
    """The README's summary of a measured table: how many entries below 0.97 of cuBLAS, the worst, and its middle."""
    worst = min(table, key=lambda e: e[8] / e[7])
    return (f"{sum(e[8] / e[7] < 0.97 for e in table)} of its {len(table)} entries below 0.97, the worst "
            f"{worst[8] / worst[7]:.2f} ({worst[0]}->{worst[1]} M = {worst[4]} {worst[2]}x{worst[3]}); its middle "
            f"(16 < M < 2048), {sum(e[8] / e[7] < 0.97 for e in table if 16 < e[4] < 2048)} of "
            f"{sum(16 < e[4] < 2048 for e in table)}")


def on_16_column_tile(entry: list[Any]) -> bool:
    """Whether a table entry names a kernel the final rule of sm90.cuh's Config gives the 16-column epilogue tile."""
    narrow = ("sm90_coop_128x256x64_c2x1", "sm90_swap_128x32x128_splitk", "sm90_swap_128x64x128_splitk")
    wide16 = ("sm90_coop_128x192x64", "sm90_swap_128x192x64_c4x1")
    return entry[5].startswith(narrow) if entry[1] == "f32" else entry[5].startswith(wide16)


def test_the_readme_quotes_the_resweep_with_the_final_epilogue_tile() -> None:
    # README: the rows whose entries named a kernel with the 16-column tile but had been swept without it, swept with
    # the final rule's library; the counts are of the entries made against those replaced
    text = flat(README)
    sweep = recorded("matmul_sweep_final_tile.json")
    swept = {(*LABELS[s["dtype"]], s["m"]) for s in sweep["sweeps"]}
    f32 = {(a, "f32") for a in ("bf16", "f16")}
    assert sweep["failures"] == [] and len(sweep["sweeps"]) == len(swept) == 21
    assert swept == {(*p, m) for p in f32 for m in (24, 32, 48, 96, 1024, 2048)} | {("f16", "f32", 384)} \
        | {(a, a, m) for a in ("bf16", "f16") for m in (512, 768, 1024, 1536)}
    assert ("bf16->f32 and f16->f32 at M = 24, 32, 48, 96, 1024 and 2048, f16->f32 at M = 384, bf16 and f16 at M = "
            "512, 768, 1024 and 1536)") in text
    before_table = table_after("matmul_sweep_epilogue.json")
    epilogue_swept = {(*LABELS[s["dtype"]], s["m"]) for s in recorded("matmul_sweep_epilogue.json")["sweeps"]}
    stale = [e for e in before_table if on_16_column_tile(e) and (e[0], e[1], e[4]) not in epilogue_swept]
    assert {(e[0], e[1], e[4]) for e in stale} <= swept  # every row the epilogue sweep left stale
    now, before = resweep_entries("matmul_sweep_final_tile.json")
    assert len(now) == 84 and len(stale) == 28
    c = resweep_counts(now, before)
    assert counts_sentence(84, c) + " or K-slice count." in text
    made = {tuple(e[:5]): e for e in now}

    def slower(group: list[list[Any]], column: int = 7) -> list[float]:  # percent, the entry made against the stale one
        return [100 * (made[tuple(e[:5])][column] / e[column] - 1) for e in group]

    assert f"The 28 entries are {100 * (geometric_mean([1 + s / 100 for s in slower(stale)]) - 1):.1f} % slower" \
        in text
    coop256 = [e for e in stale if e[5].startswith("sm90_coop_128x256x64_c2x1")]
    swap32 = [e for e in stale if e[5].startswith("sm90_swap_128x32x128_splitk")]
    wide = [e for e in stale if e[5].startswith("sm90_coop_128x192x64")]
    assert len(coop256) + len(swap32) + len(wide) + 2 == 28  # and the swapped 128x64x128 FP32 ones at M = 48
    assert {e[4] for e in coop256} == {1024, 2048} and {(e[2], e[3], e[4]) for e in swap32} == \
        {(14336, 4096, 24), (14336, 4096, 32)}
    assert (f"the FP32 128x256 ones (M = 1024 and 2048) {-max(slower(coop256)):.1f}-{-min(slower(coop256)):.1f} % faster, "
            f"the swapped 128x32x128 FP32 ones (M = 24 and 32, 14336x4096) {min(slower(swap32)):.1f}-"
            f"{max(slower(swap32)):.1f} % slower, where cuBLAS was {min(slower(swap32, 8)):.1f}-"
            f"{max(slower(swap32, 8)):.1f} % slower too, the 16-bit 128x192 ones within "
            f"{max(abs(s) for s in slower(wide)):.1f} %") in text
    table = table_after("matmul_sweep_final_tile.json")
    counts = table_counts(table).replace("its middle (16 < M < 2048)", "its middle")
    on_new = [e for e in table if on_16_column_tile(e)]
    assert all((e[0], e[1], e[4]) in swept | epilogue_swept for e in on_new)
    assert f"The whole table then: {counts}; each of the {len(on_new)} entries that name a kernel with the 16-column " \
        "tile was swept with it." in text


NEW_FAMILIES = {"sm90_swap_pingpong_64x32x64_c4x1": "the swapped 64x32 4x1", "sm90_pingpong_64x96x64_c2x1":
                "the ping-pong 64x96 2x1", "sm90_pingpong_128x112x64_c1x2": "the 128x112 1x2",
                "sm90_pingpong_128x96x64_c1x2": "the 128x96 1x2"}
"""The last four SM90 families of 2026-12-03 and the README's names for them, in the order it lists what they won."""


def test_the_readme_quotes_what_the_new_families_won() -> None:
    # README: the four families timed beside each entry's kernel (--kernels) on every row from M = 24 to 512
    text = flat(README)
    sweep = recorded("matmul_sweep_new_families.json")
    swept = {(*LABELS[s["dtype"]], s["m"]) for s in sweep["sweeps"]}
    ms = (24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
    assert sweep["failures"] == [] and len(sweep["sweeps"]) == len(swept) == 40
    assert swept == {(*LABELS[p], m) for p in LABELS for m in ms}
    for cell, (plan, timed) in cell_kernels(sweep).items():  # the plan's kernel and the four
        assert {t for t in timed if not t.startswith(tuple(NEW_FAMILIES))} == {plan}, cell
        assert len(timed) == 5, cell
    now, before = resweep_entries("matmul_sweep_new_families.json")
    assert len(now) == 160
    c = resweep_counts(now, before)
    assert counts_sentence(160, c) + ", each naming one of the new families" in text
    changed = [e for e in now if e[5:7] != before[tuple(e[:5])][5:7]]
    assert all(e[5].startswith(tuple(NEW_FAMILIES)) for e in changed)
    won = {f: [e for e in changed if e[5].startswith(f)] for f in NEW_FAMILIES}
    assert sum(map(len, won.values())) == len(changed)
    kept = [e for e in now if e[5:7] == before[tuple(e[:5])][5:7]]
    assert (len(kept), sum(e[8] / e[7] < 0.97 for e in kept)) == (160 - c["changed"], 27)
    assert f"so the {len(kept)} entries that kept their kernel moved too: 27 of the {c['below']} below 0.97" in text
    listed = [text.index(f"{len(won[f])} {'' if i else 'name '}{name} (") for i, (f, name) in
              enumerate(NEW_FAMILIES.items())]
    assert listed == sorted(listed)
    cells = {f: sorted({(e[2], e[3], e[4]) for e in won[f]}) for f in NEW_FAMILIES}
    assert cells == {"sm90_swap_pingpong_64x32x64_c4x1": [(6144, 4096, 24), (6144, 4096, 32), (14336, 4096, 24),
                                                          (14336, 4096, 32)],
                     "sm90_pingpong_64x96x64_c2x1": [(4096, 4096, 128), (6144, 4096, 128)],
                     "sm90_pingpong_128x112x64_c1x2": [(14336, 4096, 128), (14336, 4096, 512)],
                     "sm90_pingpong_128x96x64_c1x2": [(4096, 14336, 384), (6144, 4096, 256)]}
    assert {before[tuple(e[:5])][5].rsplit("_", 2)[0] for e in won["sm90_swap_pingpong_64x32x64_c4x1"]} == \
        {"batched_gemv", "sm90_swap_128x32x128_splitk"}  # "where the batched GEMV and the swapped 128x32x128 ran"
    made = {tuple(e[:5]): e for e in now}
    gemv, swap = before[("bf16", "f32", 6144, 4096, 24)], made[("bf16", "f32", 6144, 4096, 24)]
    same_run = next(r["us"] for r in sweep["rows"] if (r["dtype"], r["m"], r["n"], r["k"]) == ("bf16->f32", 24, 6144,
                    4096) and r["path"] == "sweep " + gemv[5])
    assert (f"bf16->f32 M = 24 6144x4096 {swap[7]:.2f} µs against {same_run:.2f} for the batched GEMV in the same run, "
            f"{swap[8] / swap[7]:.2f} of cuBLAS, the entry before {gemv[8] / gemv[7]:.2f})") in text
    worst_then = min(table_after("matmul_sweep_final_tile.json"), key=lambda e: e[8] / e[7])
    assert worst_then[:5] == ["f16", "f32", 6144, 4096, 128]
    after = made[tuple(worst_then[:5])]
    assert after[5].startswith("sm90_pingpong_64x96x64_c2x1")
    assert (f"f16->f32 M = 128 6144x4096, the table's worst, {worst_then[8] / worst_then[7]:.2f} -> "
            f"{after[8] / after[7]:.2f})") in text
    assert f"The whole table then: {table_counts(table_after('matmul_sweep_new_families.json'))}." in text


PINGPONG_144_176 = {"sm90_pingpong_128x176x64_c1x2": "the 128x176", "sm90_pingpong_128x144x64_c1x2": "the 128x144"}
"""The ping-pong families of 2026-12-04 and the README's names for them, in the order it lists what they won."""


def test_the_readme_quotes_what_the_128x144_and_128x176_ping_pong_tiles_won() -> None:
    # README: the two families timed beside each entry's kernel (--kernels) at M = 256-1536
    text = flat(README)
    sweep = recorded("matmul_sweep_pingpong_144_176.json")
    swept = {(*LABELS[s["dtype"]], s["m"]) for s in sweep["sweeps"]}
    assert sweep["failures"] == [] and len(sweep["sweeps"]) == len(swept) == 20
    assert swept == {(*LABELS[p], m) for p in LABELS for m in (256, 384, 512, 768, 1536)}
    for cell, (plan, timed) in cell_kernels(sweep).items():  # the plan's kernel and the two
        assert {t for t in timed if not t.startswith(tuple(PINGPONG_144_176))} == {plan} and len(timed) == 3, cell
    now, before = resweep_entries("matmul_sweep_pingpong_144_176.json")
    assert len(now) == 80
    c = resweep_counts(now, before)
    assert counts_sentence(80, c) + ", each naming one of the two." in text
    changed = [e for e in now if e[5:7] != before[tuple(e[:5])][5:7]]
    won = {f: [e for e in changed if e[5].startswith(f)] for f in PINGPONG_144_176}
    assert sum(map(len, won.values())) == len(changed)
    listed = [text.index(f"{len(won[f])} {'name ' if i == 0 else ''}{name} (M = ") for i, (f, name) in
              enumerate(PINGPONG_144_176.items())]
    assert listed == sorted(listed)
    cells = {f: sorted((e[0], e[1], e[2], e[4]) for e in won[f]) for f in PINGPONG_144_176}
    on_14336 = [(i, o, 14336, m) for i, o in LABELS.values() for m in (384, 768)]
    assert cells["sm90_pingpong_128x176x64_c1x2"] == sorted(
        on_14336 + [(i, o, 14336, 1536) for i, o in LABELS.values() if (i, o) != ("bf16", "bf16")])
    assert cells["sm90_pingpong_128x144x64_c1x2"] == sorted(
        [(i, o, 6144, 1536) for i, o in LABELS.values()] + [("f16", "f32", 6144, 768)])
    # "where the cooperative 128x176 and 128x192 ran"
    assert {before[tuple(e[:5])][5].rsplit("_", 2)[0] for e in won["sm90_pingpong_128x176x64_c1x2"]} == \
        {"sm90_coop_128x176x64_c1x2_swz1", "sm90_coop_128x192x64_swz1"}

    def span(entries: list[list[Any]]) -> str:
        ratios = sorted(e[8] / e[7] for e in entries)
        return f"{ratios[0]:.3f}-{ratios[-1]:.3f}"

    made = {tuple(e[:5]): e for e in now}
    at = {m: [made[(i, o, n, 4096, m)] for i, o, n, m_ in on_14336 if m_ == m] for m in (384, 768)}
    was = {m: [before[tuple(e[:5])] for e in at[m]] for m in at}
    bf16 = made[("bf16", "bf16", 14336, 4096, 768)]
    coop = next(r["us"] for r in sweep["rows"] if (r["dtype"], r["m"], r["n"], r["k"]) == ("bf16->bf16", 768, 14336,
                4096) and r["path"] == "sweep sm90_coop_128x176x64_c1x2_swz1_bf16_bf16")
    assert (f"M = 768: {span(was[768])} -> {span(at[768])} of cuBLAS, bf16 {bf16[7]:.2f} µs against {coop:.2f} for "
            f"the cooperative 128x176 in the same run; M = 384: {span(was[384])} -> {span(at[384])}, still below "
            "0.97)") in text
    assert all(e[8] / e[7] < 0.97 for e in at[384])
    assert f"The whole table then: {table_counts(table_after('matmul_sweep_pingpong_144_176.json'))}." in text


def test_the_readme_quotes_what_the_nopdl_variant_won() -> None:
    # README: the ping-pong 64x128 kernel without programmatic dependent launch beside each entry's kernel
    text = flat(README)
    sweep = recorded("matmul_sweep_nopdl.json")
    swept = {(*LABELS[s["dtype"]], s["m"]) for s in sweep["sweeps"]}
    assert sweep["failures"] == [] and swept == {(*LABELS[p], m) for p in LABELS for m in (192, 256)}
    assert len(sweep["sweeps"]) == 8
    for cell, (plan, timed) in cell_kernels(sweep).items():  # the plan's kernel and the variant
        assert timed == {plan, "sm90_pingpong_64x128x64_nopdl_" + "_".join(plan.rsplit("_", 2)[1:])}, cell
    now, before = resweep_entries("matmul_sweep_nopdl.json")
    assert len(now) == 32
    c = resweep_counts(now, before)
    assert counts_sentence(32, c) + ", each the `_nopdl` one" in text
    changed = [e for e in now if e[5:7] != before[tuple(e[:5])][5:7]]
    assert all(e[5].startswith("sm90_pingpong_64x128x64_nopdl_") for e in changed)
    made = {tuple(e[:5]): e for e in now}

    def ratios(keys: list[tuple[Any, ...]], table: dict[tuple[Any, ...], list[Any]]) -> list[float]:
        return sorted(table[key][8] / table[key][7] for key in keys)

    at192 = [(i, o, 4096, 14336, 192) for i, o in LABELS.values()]
    assert all(before[key][5].startswith("sm90_pingpong_64x128x64_") for key in at192)
    was, got = ratios(at192, before), ratios(at192, made)
    assert max(got) < 0.97
    assert (f"{was[0]:.3f}-{was[-1]:.3f} -> {got[0]:.3f}-{got[-1]:.3f} of cuBLAS (still below 0.97); at M = 256 "
            "there") in text
    swap, pingpong = ("bf16", "f32", 4096, 14336, 256), ("f16", "f32", 4096, 14336, 256)
    assert before[swap][5].startswith("sm90_swap_128x128x64_splitk") and before[pingpong][5].startswith(
        "sm90_pingpong_64x128x64_f16")
    assert (f"bf16->f32 {before[swap][8] / before[swap][7]:.3f} -> {made[swap][8] / made[swap][7]:.3f} and f16->f32 "
            f"{before[pingpong][8] / before[pingpong][7]:.3f} -> {made[pingpong][8] / made[pingpong][7]:.3f}") in text
    kept = [e for e in now if e[5:7] == before[tuple(e[:5])][5:7]]
    moved = [abs(e[8] / e[7] / (before[tuple(e[:5])][8] / before[tuple(e[:5])][7]) - 1) for e in kept]
    tipped = [e for e in kept if e[8] / e[7] < 0.97 <= before[tuple(e[:5])][8] / before[tuple(e[:5])][7]]
    assert (f"the ratios of the other {len(kept)} entries, re-timed, moved by up to {100 * max(moved):.1f} %, "
            f"{['no', 'one', 'two', 'three'][len(tipped)]} of them to below 0.97") in text
    assert f"The whole table now: {table_counts(json.loads(TABLE.read_text())['entries'])}." in text


def test_the_readme_quotes_why_the_nopdl_variant_exists() -> None:
    ab = recorded("cutlass_pdl_ab.json")
    row = next(r for r in ab["rows"] if (r["m"], r["n"], r["k"]) == (192, 4096, 14336))
    assert row["kernel"] == "sm90_pingpong_64x128x64_bf16_bf16"
    capable = [r for r in ab["rows"] if r["pdl_capable"]]
    slower = [r for r in capable if r["on_mean_us"] > 1.01 * r["off_mean_us"]]
    assert row in slower and (len(capable), len(slower)) == (ab["summary"]["pdl_capable_cells"],
                                                              ab["summary"]["slower_over_1pct"])
    assert (f"({row['off_mean_us']:.2f} against {row['on_mean_us']:.2f} µs with it at M = 192 on 4096x14336, bf16, "
            f"H200, 2026-12-03, `benchmarks/results/cutlass_pdl_ab.json`: of its {len(capable)} cells (of "
            f"{len(ab['rows'])}) whose kernel can launch so, {len(slower)} slower with it by more than 1 %, "
            f"this one by {100 * (row['on_mean_us'] / row['off_mean_us'] - 1):.1f} "
            "%)") in flat(README)


def test_the_readme_quotes_why_the_other_kernels_have_no_nopdl_variant() -> None:
    ab = recorded("matmul_nopdl_nine_ab.json")
    pairs = ab["pairs"]
    for p in pairs:  # each pair is a kernel and its _nopdl variant timed in one run, at one cell
        rows = {r["path"]: r["us"] for r in ab["rows"]
                if (r["dtype"], r["m"], r["n"], r["k"]) == (p["dtype"], p["m"], p["n"], p["k"])
                and f"splits={p['splits']} " in r["note"] + " "}
        prefix, input, output = p["kernel"].rsplit("_", 2)
        with_pdl, nopdl = rows[f"sweep {prefix}_{input}_{output}"], rows[f"sweep {prefix}_nopdl_{input}_{output}"]
        assert abs(with_pdl - p["us_with_pdl"]) < 1e-3 and abs(nopdl - p["us_nopdl"]) < 1e-3, p
        assert rows["DenseMatmulPlan"] > 0 and p["kernel"] in next(  # the cell's entry named the kernel
            r["note"] for r in ab["rows"] if r["path"] == "DenseMatmulPlan"
            and (r["dtype"], r["m"], r["n"], r["k"]) == (p["dtype"], p["m"], p["n"], p["k"]))
    kernels = {p["kernel"].rsplit("_", 2)[0] for p in pairs}
    low = ab["table_below_0_97"]  # the packaged table's entries below 0.97 on the day of the runs
    assert kernels == {e[5].rsplit("_", 2)[0] for e in low
                       if 128 <= e[4] <= 768 and e[5].startswith("sm90_") and "_nopdl_" not in e[5]}
    others = {(e[5].rsplit("_", 2)[0], e[4]) for e in low if e[5].rsplit("_", 2)[0] not in kernels
              and "_nopdl_" not in e[5]}
    assert others == {("batched_gemv", 24), ("sm90_swap_pingpong_64x48x64_c2x1", 96),
                      ("sm90_coop_128x256x64_c2x1", 8192)}
    cells = {(p["dtype"], p["m"], p["n"], p["k"]) for p in pairs}
    slower = sorted(100 * (p["us_nopdl"] / p["us_with_pdl"] - 1) for p in pairs)
    assert len(kernels) == 9 and len(pairs) == len(cells) and slower[0] > 0
    assert ("Launching without programmatic dependent launch helps no other kernel: the nine CUTLASS kernels that "
            "the packaged table's entries below 0.97 of cuBLAS named at M = 128-768 (2026-12-04), each registered "
            "a second time as `<kernel>_nopdl_*` and timed beside itself in the same run in "
            f"{len(cells)} cells at those M whose entry names it, were slower without it in all {len(cells)}, by "
            f"{slower[0]:.1f} to {slower[-1]:.1f} % (median {median(slower):.1f} %; H200, 2026-12-04, "
            "`benchmarks/results/matmul_nopdl_nine_ab.json`), so only the ping-pong 64x128 kernel has the variant "
            "(the table's other entries below 0.97 are the batched GEMV at M = 24, the swapped ping-pong 64x48 at "
            "M = 96 and the cooperative 128x256 at M = 8192).") in flat(README)


def test_the_readme_quotes_why_the_64x144_ping_pong_tile_was_dropped() -> None:
    rows = {r["path"].removeprefix("probe "): r["us"] for r in recorded("midm_probe.json")["rows"]
            if (r["dtype"], r["m"], r["n"], r["k"]) == ("bf16->bf16", 192, 6144, 4096)}
    pingpong, swapped = rows["sm90_pingpong_64x144x64_c1x2_bf16_bf16"], rows["sm90_swap_128x96x64_c4x1_splitk_bf16_bf16"]
    assert min(rows.values()) < pingpong  # it won nothing there
    assert (f"as ping-pong 64x144 with a 1x2 cluster, took {pingpong:.2f} µs there against {swapped:.2f} for the "
            "swapped 128x96 kernel") in flat(README)


def test_the_swapped_64x32_4x1_comment_quotes_the_sweep() -> None:
    source = flat((ROOT / "mircuda" / "cutlass_build" / "src" / "instance.cuh").read_text().replace("//", ""))
    rows = [r for r in recorded("matmul_sweep_final_tile.json")["rows"]
            if (r["dtype"], r["m"], r["n"], r["k"]) == ("bf16->f32", 24, 6144, 4096)]
    gemv = next(r["us"] for r in rows if r["path"] == "sweep batched_gemv_bf16_f32")
    cublas = next(r["us"] for r in rows if r["path"].startswith("cuBLAS"))
    assert gemv == min(r["us"] for r in rows if r["path"].startswith("sweep "))  # the fastest of ours there
    assert (f"the batched GEMV ({gemv:.2f} µs at M = 24 on 6144x4096, bf16->f32) and cuBLAS ({cublas:.2f}) differ "
            f"by {100 * (gemv / cublas - 1):.0f} %") in source


def test_the_readme_quotes_the_whole_profiles_of_2026_12_04() -> None:
    """The "Whole profiles on one day's code" table: every figure recomputed from the record its row names, and the
    run settings the text states from the records that keep them."""
    row = {line.split("|")[1].strip(): line for line in README.splitlines() if line.startswith("| `")}
    fp8 = recorded("fp8_profile_20261204.json")["rows"]
    vector = {(r["n"], r["k"]): r["us"] for r in fp8 if r["path"] == "BlockwiseFp8VectorPlan"}
    decode = [r["vs_rowwise"] for r in fp8 if r["path"] == "BlockwiseFp8Plan" and r["m"] <= 16]
    large = [r for r in fp8 if r["path"] == "BlockwiseFp8Plan" and r["m"] >= 2048]
    shapes = ((4096, 4096), (14336, 4096), (4096, 14336))
    assert (f"M = 1 (`BlockwiseFp8VectorPlan`): {' / '.join(f'{vector[s]:.2f}' for s in shapes)} µs on 4096x4096 / "
            f"14336x4096 / 4096x14336; M <= 16 (`BlockwiseFp8Plan`): {min(decode):.2f}-{max(decode):.2f}x faster than torch's rowwise `_scaled_mm`, "
            f"{sum(v >= 1.5 for v in decode)} of {len(decode)} points at 1.5x or more; M >= 2048: "
            f"{geometric_mean([r['vs_rowwise'] for r in large]):.3f} of its rowwise and "
            f"{geometric_mean([r['vs_blockwise'] for r in large]):.3f} of its blockwise TFLOP/s (geometric means of "
            f"{len(large)} points)") in row["`fp8-profile`"]

    fp4 = recorded("fp4_profile_20261204.json")["rows"]
    m1 = {(r["n"], r["k"]): r["fp4_us"] for r in fp4 if r["m"] == 1}
    time_ratios = [r["time_ratio"] for r in fp4 if r["m"] <= 16]
    tflops_ratios = [r["tflops_ratio"] for r in fp4 if r["m"] >= 2048]
    assert (f"M = 1: {' / '.join(f'{m1[s]:.2f}' for s in shapes)} µs on the same three shapes; M <= 16: "
            f"{min(time_ratios):.2f}-{max(time_ratios):.2f} of the BF16 plans' time, "
            f"{sum(v <= 0.5 for v in time_ratios)} of {len(time_ratios)} points at 0.5 or less; M >= 2048 (the portable "
            f"path): {min(tflops_ratios):.2f}-{max(tflops_ratios):.2f} of the BF16 plan's TFLOP/s") in row["`fp4-profile`"]

    settings = [recorded(f"{name}_20261204.json") for name in ("fp4_profile", "moe_profile")]
    assert all((record["calls"], record["repeats"]) == (10, 5) for record in settings)
    assert "5 x 10 back-to-back calls (`--calls 10 --repeats 5`" in flat(README)
    moe = {(r["layer"], r["tokens"]): r for r in recorded("moe_profile_20261204.json")["rows"]}
    mix1, mix16, mix4096 = (moe["mixtral", t] for t in (1, 16, 4096))
    fine1, fine16, fine4096 = (moe["fine", t] for t in (1, 16, 4096))
    assert (f"Mixtral-like at 1 / 16 / 4096 tokens: {mix1['grouped_us']:.1f} µs ({mix1['grouped_tbps']:.2f} TB/s; the "
            f"per-expert loop takes {mix1['loop_ratio']:.2f}x as long) / {mix16['grouped_us']:.1f} µs "
            f"({mix16['grouped_tbps']:.2f} TB/s; loop {mix16['loop_ratio']:.2f}x) / {mix4096['torch_ratio']:.2f}x "
            f"`torch._grouped_mm`'s TFLOP/s; fine-grained: {fine1['grouped_us']:.1f} µs (loop {fine1['loop_ratio']:.2f}x) / "
            f"{fine16['grouped_us']:.1f} µs ({fine16['grouped_tbps']:.2f} TB/s; loop {fine16['loop_ratio']:.2f}x) / "
            f"{fine4096['torch_ratio']:.2f}x") in row["`moe-profile`"]

    dense = [r for r in recorded("matmul_profile_20261204.json")["rows"] if r["path"] == "DenseMatmulPlan"]
    worst = min(dense, key=lambda r: r["ratio_to_cublas"])
    assert {r["dtype"] for r in dense} == {"bf16->bf16", "f16->f16", "bf16->f32"}
    assert len({r["m"] for r in dense}) == 20 and len({(r["n"], r["k"]) for r in dense}) == 4
    assert (f"{sum(r['ratio_to_cublas'] >= 1.0 for r in dense)} of {len(dense)} at or above cuBLAS, "
            f"{sum(r['ratio_to_cublas'] < 0.97 for r in dense)} below 0.97, the worst {worst['ratio_to_cublas']:.2f} "
            f"(bf16->f32, M = {worst['m']}, {worst['n']}x{worst['k']})") in row["`matmul-profile`"]
    assert worst["dtype"] == "bf16->f32"

    layer = {r["m"]: r for r in recorded("decoder_layer_profile_20261204.json")["rows"]
             if r["path"] == "mircuda graph (4 plans, PDL)"}
    def joined(key: str, digits: int) -> str:
        return " / ".join(f"{layer[m][key]:.{digits}f}" for m in (1, 8, 16))

    assert (f"{joined('us', 1)} µs at M = 1 / 8 / 16 ({joined('tbps', 2)} TB/s); cuBLAS in a torch graph takes "
            f"{joined('ratio_to_cublas', 2)}x as long") in row["`decoder-layer-profile`"]

    graph = {r["library"]: r["graph_host_us"] for r in recorded("graph_profile_20261204.json")["rows"]
             if r["kernels"] == 100}
    assert recorded("graph_profile_20261204.json")["hot_path"] == "c-extension"
    assert (f"one replay of 100 nodes: {graph['mircuda']:.2f} µs of host time (the C floor "
            f"{graph['C, driver API cuGraphLaunch (the floor)']:.2f}, `cuda.bindings` "
            f"{graph['cuda.bindings cuGraphLaunch']:.2f}, CuPy {graph['CuPy']:.2f}, torch {graph['torch']:.2f})"
            ) in row["`graph-profile`"]

    paired = recorded("launch_paired_20261204.json")
    per_launch = paired["us_per_launch_median"]
    assert (f"the typed launch: {paired['ratio_median_of_pairs']:.3f}x the C floor "
            f"({per_launch['mircuda TypedKernel.launch']:.2f} against {per_launch['C cuLaunchKernel (the floor)']:.2f} µs "
            f"per launch); two later runs: "
            f"{recorded('launch_paired_20261204_b.json')['ratio_median_of_pairs']:.3f}x and "
            f"{recorded('launch_paired_20261204_c.json')['ratio_median_of_pairs']:.3f}x") in row["`benchmarks/launch_paired.py`"]

    vector = recorded("dense_vector_profile_20261204.json")
    plan = {(r["n"], r["k"]): r for r in vector["rows"] if r["path"] == "DenseVectorPlan" and r["dtype"] == "bf16->bf16"}
    times = " / ".join(f"{plan[s]['us']:.2f}" for s in shapes)
    faster = " / ".join(f"{plan[s]['ratio_to_cublas']:.2f}" for s in shapes)
    assert (f"`DenseVectorPlan`, bf16: {times} µs on 4096x4096 / 14336x4096 / "
            f"4096x14336 (issue 16's goals 9.0 / 27.0 / 27.0 µs: not met); cuBLAS takes "
            f"{faster}x as long") in row["`dense-vector-profile`"]
    assert all("NOT met" in goal for goal in vector["goals"])

    overhead = recorded("launch_overhead_20261204.json")
    ratio, us = overhead["ratio_to_c_floor"], overhead["us_per_launch"]
    floor = "C, driver API cuLaunchKernel (the floor)"
    assert (f"the typed launch {ratio['mircuda TypedKernel.launch']:.2f}x the C floor "
            f"({us['mircuda TypedKernel.launch']:.2f} against {us[floor]:.2f} µs), `cuda.bindings` with a `void**` block "
            f"{ratio['cuda.bindings cuLaunchKernel, void** block']:.2f}x, cuda.core {ratio['cuda.core launch']:.2f}x, "
            f"CuPy {ratio['CuPy RawKernel']:.2f}x, Numba {ratio['Numba dispatcher, eager signature']:.2f}x"
            ) in row["`benchmarks/launch_overhead.py`"]

    breakdown = recorded("launch_breakdown_20261204.json")
    assert breakdown["hot_path"] == "c-extension"
    empty = breakdown["sections"]["typed launch, empty(float*)"]
    entry = next(p for p in empty if p["piece"].startswith("entry point call"))
    python_us = empty[empty.index(entry) - 1]["cumulative_us"]
    replay = {p["piece"]: p["us"] for p in breakdown["sections"]["Graph.launch (100 nodes)"]}
    assert (f"a typed launch of `empty(float*)` spends {python_us:.2f} µs in Python before the entry point (C extension "
            f"and driver: {entry['us']:.2f} µs); `Graph.launch` of 100 nodes {replay['Graph.launch in all']:.2f} µs, of which "
            f"the entry point {replay['entry point alone: graph_launch(exec, stream) (C extension + driver)']:.2f} µs"
            ) in row["`benchmarks/launch_breakdown.py`"]

    ncu = {(r["n"], r["m"]): r for r in recorded("decode_kernels_ncu_20261204.json")["rows"]}
    stalls = [100 * r["scoreboard_stall_cycles"] / r["warp_cycles_per_issued_instruction"] for r in ncu.values()]
    dram = [r["dram_throughput_pct"] for r in ncu.values()]
    assert min(stalls) > 50
    assert (f"the batched GEMV at M = 16 (32 weight rows per warp) needs {ncu[28672, 16]['registers_per_thread']} registers "
            f"per thread ({ncu[28672, 16]['theoretical_occupancy_pct']:.1f} % theoretical occupancy), at M = 8 "
            f"{ncu[28672, 8]['registers_per_thread']}, the M = 1 kernel {ncu[28672, 1]['registers_per_thread']}; all wait "
            f"mostly on their loads, at {min(dram):.0f}-{max(dram):.0f} % of DRAM peak") in row["`benchmarks/decode_kernels_ncu.py` under `ncu`"]


def test_the_graph_boundary_probe_quotes_its_record() -> None:
    """``benchmarks/graph_boundary_ab.py``'s docstring: the M = 1 figures of each variant, from its record, and the
    verdict they support (no variant faster than the graph as profiled)."""
    text = flat((ROOT / "benchmarks" / "graph_boundary_ab.py").read_text(encoding="utf-8"))
    record = recorded("graph_boundary_ab_20261204.json")
    assert record["failures"] == []
    m1 = {r["variant"]: r for r in record["rows"] if r["m"] == 1}
    base = m1["graph (as profiled)"]["us"]
    assert all(r["us"] >= base for v, r in m1.items() if v.startswith("graph"))
    assert (f"M = 1: {base:.2f} µs back to back, single {m1['graph (as profiled)']['single_us']:.2f}; the first kernel "
            f"without PDL {m1['graph, first kernel without PDL']['us']:.2f}, an empty kernel after "
            f"{m1['graph + empty kernel after']['us']:.2f} or before {m1['graph + empty kernel before']['us']:.2f}, no PDL "
            f"{m1['graph, no PDL']['us']:.2f}; direct executes {m1['direct (4 executes)']['us']:.2f}") in text
    assert f"costs about {base - m1['direct (4 executes)']['us']:.1f} µs" in text
    for m in (8, 16):
        rows = {r["variant"]: r["us"] for r in record["rows"] if r["m"] == m}
        assert all(rows["graph (as profiled)"] - us <= 0.12 for v, us in rows.items() if v.startswith("graph"))
    assert "by more than 0.12 µs at M = 8 and 16, nor at all at M = 1" in text
