"""mircuda.timing.ResultTable: the profiles' tables as aligned text (the CLI's output, unchanged by the move
to the table type: each profile's former f-string layout is kept below as the reference) and as HTML."""

from __future__ import annotations

from dataclasses import asdict

import pytest

import mircuda as mc
from mircuda.cli import _fp8_profile, _graph_profile, _matmul_bench, _profile
from mircuda.timing import Column, ResultTable


# -- the former layouts, verbatim, as references ----------------------------------------------------------
def matmul_text_before(title: str, rows: list[_matmul_bench.Row]) -> str:
    out = [title, f"  {'path':<34} {'dtype':<10} {'M':>5} {'N':>6} {'K':>6} {'µs':>9} {'TFLOP/s':>8} {'TB/s':>6} "
                  f"{'cuBLAS/x':>8}"]
    for r in rows:
        ratio = f"{r.ratio_to_cublas:.2f}" if r.ratio_to_cublas is not None else "-"
        out.append(f"  {r.path:<34} {r.dtype:<10} {r.m:>5} {r.n:>6} {r.k:>6} {r.us:>9.2f} {r.tflops:>8.1f} "
                   f"{r.tbps:>6.2f} {ratio:>8}{'  ' + r.note if r.note else ''}")
    return "\n".join(out)


def graph_text_before(rows: list[dict[str, object]]) -> str:
    # The former layout with the C floor's additions: the library column as wide as the floor's name
    # (39), the ratio to the floor last, and the floor's note after the table's own.
    head = (f"{'library':<39} {'N':>4} {'direct host':>12} {'direct dev':>11} {'graph host':>11} "
            f"{'graph dev':>10} {'host ÷':>7} {'dev ÷':>6} {'graph host vs mircuda':>22} {'× C floor':>10}")
    out = [head, "-" * len(head)]
    for r in rows:
        def cell(key: str, width: int) -> str:
            return f"{f'{r[key]:.2f}' if key in r else 'n/a':>{width}}"  # noqa: B023
        out.append(f"{r['library']:<39} {r['kernels']:>4} {cell('direct_host_us', 12)} {cell('direct_device_us', 11)} "
                   f"{cell('graph_host_us', 11)} {cell('graph_device_us', 10)} {cell('direct_over_graph_host', 7)} "
                   f"{cell('direct_over_graph_device', 6)} {cell('graph_host_vs_mircuda', 22)} "
                   f"{cell('graph_host_ratio_to_c_floor', 10)}")
    out.append("(µs: direct = the whole sequence of N launches; graph = one replay. ÷ = direct / graph; "
               "× C floor = graph host / the C floor's graph host for the same N.)")
    out += list(dict.fromkeys(str(r["note"]) for r in rows if "note" in r))
    return "\n".join(out)


def fp8_text_before(rows: list[_fp8_profile.Fp8Row]) -> str:
    out = [f"  {'path':<30} {'M':>5} {'N':>6} {'K':>6} {'µs':>9} {'rate':>13} {'rowwise/x':>9} {'blockw/x':>9}"]
    for r in rows:
        rate = f"{r.tbps:.2f} TB/s" if r.m <= 16 else f"{r.tflops:.0f} TFLOP/s"
        rw = f"{r.vs_rowwise:.2f}" if r.vs_rowwise is not None else "-"
        bw = f"{r.vs_blockwise:.2f}" if r.vs_blockwise is not None else "-"
        out.append(f"  {r.path:<30} {r.m:>5} {r.n:>6} {r.k:>6} {r.us:>9.2f} {rate:>13} {rw:>9} {bw:>9}"
                   f"{'  ' + r.note if r.note else ''}")
    return "\n".join(out)


def test_the_dense_profiles_print_what_they_printed_before() -> None:
    rows = [_matmul_bench.row("cuBLAS (torch.matmul)", "bf16->bf16", 1, 4096, 4096, 12.3456, 2, 2),
            _matmul_bench.row("DenseMatmulPlan dense_vector_bf16_bf16", "bf16->bf16", 1, 4096, 4096, 10.5, 2, 2,
                              "a note"),
            _matmul_bench.row("a path longer than thirty-four characters, not cut", "bf16->f32", 8192, 14336,
                              4096, 123456.789, 2, 4)]
    rows[1].ratio_to_cublas = 12.3456 / 10.5
    text = str(_matmul_bench.table("dense-vector-profile on H200", rows))
    assert text == matmul_text_before("dense-vector-profile on H200", rows)
    assert "1.18  a note" in text and text.splitlines()[2].endswith("-")


def test_graph_profile_prints_what_it_printed_before() -> None:
    rows: list[dict[str, object]] = [
        {"library": "mircuda", "kernels": 1, "direct_host_us": 2.5, "direct_device_us": 3.125, "graph_host_us": 1.75,
         "graph_device_us": 2.0, "graph_host_vs_mircuda": 1.0, "direct_over_graph_host": 1.43,
         "direct_over_graph_device": 1.56},
        {"library": "cuda.bindings cuGraphLaunch", "kernels": 100, "graph_host_us": 3.25, "graph_device_us": 180.0,
         "graph_host_vs_mircuda": 1.857, "graph_host_ratio_to_c_floor": 2.355},
        {"library": _graph_profile.FLOOR_NAME, "kernels": 100, "graph_host_us": 1.38, "graph_host_vs_mircuda": 0.789,
         "graph_host_ratio_to_c_floor": 1.0, "note": "C floor: a note"}]
    text = str(_graph_profile.table(rows, "graph-profile on H200"))
    assert text == "graph-profile on H200\n" + graph_text_before(rows)
    lines = text.splitlines()
    assert lines[3].endswith("n/a") and lines[4].count("n/a") == 4 and lines[5].count("n/a") == 5
    assert lines[-1] == "C floor: a note"


def test_fp8_profile_prints_what_it_printed_before() -> None:
    rows = [_fp8_profile.fp8_row("BlockwiseFp8VectorPlan", 1, 4096, 4096, 6.2, "rel err 1.0e-03"),
            _fp8_profile.fp8_row("BlockwiseFp8Plan", 2048, 14336, 4096, 250.0)]
    rows[1].vs_rowwise, rows[1].vs_blockwise = 0.97, 1.2
    assert str(_fp8_profile.table(rows)) == fp8_text_before(rows)
    assert _fp8_profile.table(rows).column("rate")[1].endswith("TFLOP/s")


def test_profile_prints_its_pairs_without_a_header() -> None:
    pairs = [("NVRTC compile + load (cold)", "41.0 ms"), ("launch", "2.10 µs per call")]
    width = max(len(k) for k, _ in pairs)
    assert str(_profile.table(pairs)) == "\n".join(f"  {k:<{width}}  {v}" for k, v in pairs)


# -- the type itself ---------------------------------------------------------------------------------------
COLUMNS = (Column("name", "name", None, "<"), Column("us", "µs", 7, format="{:.1f}"),
           Column("rate", "rate", None, format=lambda v: f"{v:.0f}/s", missing="n/a"))


def test_auto_widths_fit_the_widest_cell_or_header_and_text_rows_are_right_stripped() -> None:
    t = ResultTable(COLUMNS, [{"name": "a", "us": 1.25, "rate": 800.0}, {"name": "longer name", "us": None}])
    assert str(t).splitlines() == ["name             µs  rate", "a               1.2 800/s",
                                   "longer name       -   n/a"]
    t.header = False
    assert str(t).splitlines()[0] == "a               1.2 800/s"


def test_title_indent_rule_and_notes() -> None:
    t = ResultTable(COLUMNS[:2], [{"name": "x", "us": 2.0}], title="Title", indent="  ", rule=True, notes=["n1"])
    assert str(t).splitlines() == ["Title", "  name      µs", "-" * 14, "  x        2.0", "n1"]


def test_html_is_escaped_aligned_and_carries_title_and_notes() -> None:
    t = ResultTable(COLUMNS, [{"name": "<b>&", "us": 3.0, "rate": 1.0}], title="T <1>", notes=["a < b"])
    html = t._repr_html_()
    assert "<caption style='text-align:left'><b>T &lt;1&gt;</b></caption>" in html
    assert "<th style='text-align:left'>name</th><th style='text-align:right'>µs</th>" in html
    assert "<td style='text-align:left'>&lt;b&gt;&amp;</td><td style='text-align:right'>3.0</td>" in html
    assert "<td style='text-align:right'>1/s</td>" in html and html.endswith("<p>a &lt; b</p>")
    assert "<thead>" not in ResultTable(COLUMNS, header=False)._repr_html_()


def test_columns_give_raw_values_and_rows_are_copies() -> None:
    row = {"name": "a", "us": 1.0, "extra": 7}
    t = ResultTable(COLUMNS, [row])
    t.append({"name": "b"})
    row["us"] = 99.0
    assert t.column("us") == [1.0, None] and t.column("extra") == [7, None] and len(t) == 2
    assert t.rows[0]["us"] == 1.0
    assert repr(t) == "ResultTable(3 columns, 2 rows, title='')"
    with pytest.raises(mc.ContractError) as info:
        t.column("nope")
    assert info.value.argument == "key"


@pytest.mark.parametrize("make, argument", [
    (lambda: ResultTable([]), "columns"),
    (lambda: ResultTable(["name"]), "columns"),  # type: ignore[list-item]
    (lambda: ResultTable([Column("a", "a"), Column("a", "b")]), "columns"),
    (lambda: ResultTable(COLUMNS, [("a", 1.0)]), "row"),  # type: ignore[list-item]
    (lambda: Column("a", "a", align="^"), "align"),
    (lambda: Column("a", "a", width=-1), "width"),
])
def test_bad_tables_are_refused_by_name(make, argument) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(mc.ContractError) as info:
        make()
    assert info.value.argument == argument


def test_a_matmul_row_keeps_every_field_for_plots() -> None:
    r = _matmul_bench.row("p", "bf16", 16, 4096, 4096, 10.0, 2, 2)
    t = _matmul_bench.table("", [r])
    assert t.rows == [asdict(r)] and str(t).splitlines()[0].startswith("  path")
