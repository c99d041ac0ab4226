"""What a CUDA graph's boundary costs the decoder layer's back-to-back replays (GPU): the layer of
``decoder-layer-profile`` (four DenseMatmulPlans, bf16, two weight sets, cold weights) captured in variants
that differ only at the graph's ends, each timed back to back (``--calls`` replays behind a spin kernel)
and single (one replay between the events), as ``decoder-layer-profile`` times them.

Variants: the plans as captured by ``decoder-layer-profile``; the first kernel launched without programmatic
dependent launch (PDL); an empty kernel (one warp, no PDL) appended after the last projection, or put
before the first; no PDL at all; and the four plans executed directly (no graph). Every graph's outputs are
checked against float64 before it is timed. A probe: it reaches into the plans' launch configuration
(``plan._nvrtc.config``), which the public API does not offer.

    python benchmarks/graph_boundary_ab.py [--m 1,8,16] [--calls 10] [--repeats 5] [--json PATH]

H200, 2026-12-04 (`benchmarks/results/graph_boundary_ab_20261204.json`): no graph variant beat the graph as
profiled by more than 0.12 µs at M = 8 and 16, nor at all at M = 1 (M = 1: 109.00 µs back to back, single
106.40; the first kernel without PDL 109.31, an empty kernel after 110.26 or before 109.67, no PDL 112.25;
direct executes 106.63). A boundary between two graphs costs about 2.4 µs that programmatic dependent launch
hides between layers in one graph or one stream; nothing at the graph's ends recovers it.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]  # this checkout's mircuda, not an installed one

import mircuda as mc  # noqa: E402
from mircuda.cli._decoder_layer_profile import LAYER, layer_bytes  # noqa: E402
from mircuda.dtypes import bf16  # noqa: E402
from mircuda.timing import StreamTimer  # noqa: E402

EMPTY = mc.cuda_kernel('extern "C" __global__ void empty(int* unused) {}')
Empty = mc.cuda_export("empty", unused=mc.DeviceBuffer[mc.i32])
VARIANTS = ("graph (as profiled)", "graph, first kernel without PDL", "graph + empty kernel after",
            "graph + empty kernel before", "graph, no PDL", "direct (4 executes)")


class _Bench:
    """One context's stream, timer, weight sets and the empty kernel the variants add."""

    def __init__(self, calls: int, repeats: int) -> None:
        driver = mc.Driver.initialize()
        self.context = driver.create_context(driver.devices()[0])
        self.stream = self.context.create_stream()
        self.pool = self.context.default_memory_pool()
        self.timer = StreamTimer(self.context, self.stream)
        self.calls, self.repeats = calls, repeats
        self.rng = np.random.default_rng(0)
        self.empty = mc.Compiler(self.context).compile(EMPTY).kernel(Empty)
        self.scratch = self.pool.allocate(mc.i32, self.stream, 1)
        self.host_w = [self.rng.standard_normal((n, k), dtype=np.float32).astype(bf16) for _, n, k in LAYER]
        self.w64 = [w.astype(np.float64) for w in self.host_w]
        self.sets = [[self.stream.upload(self.pool, w) for w in self.host_w] for _ in range(2)]
        self.failures: list[str] = []

    def measure_m(self, m: int) -> list[dict[str, Any]]:
        stream, pool = self.stream, self.pool
        xh = [self.rng.standard_normal((m, k), dtype=np.float32).astype(bf16) for _, _, k in LAYER]
        xs = [stream.upload(pool, x) for x in xh]
        ys = [pool.allocate(bf16, stream, m * n) for _, n, _ in LAYER]
        wants = [x.astype(np.float64) @ w.T for x, w in zip(xh, self.w64)]
        plans: list[mc.DenseMatmulPlan[Any, Any]] = [
            mc.DenseMatmulPlan(self.context, stream, mc.DenseMatmulSpec(m, n, k), input=bf16) for _, n, k in LAYER]
        configs = [p._nvrtc.config for p in plans]  # type: ignore[union-attr]
        one_warp = mc.LaunchConfig((1,), (32,))

        def layer(s: int) -> None:
            for p, x, w, y in zip(plans, xs, self.sets[s], ys):
                p.execute(stream, x, w, y)

        def pdl(which: list[bool]) -> None:
            for p, c, on in zip(plans, configs, which):
                p._nvrtc.config = dataclasses.replace(  # type: ignore[union-attr]
                    c, programmatic_stream_serialization=c.programmatic_stream_serialization and on)

        def capture(variant: str, s: int) -> Any:
            pdl([variant != "graph, no PDL" and not (variant == "graph, first kernel without PDL" and i == 0)
                 for i in range(4)])

            def body(_: object) -> None:
                if variant == "graph + empty kernel before":
                    self.empty.launch(stream, one_warp, self.scratch)
                layer(s)
                if variant == "graph + empty kernel after":
                    self.empty.launch(stream, one_warp, self.scratch)
            try:
                return stream.capture(None, body)
            finally:
                pdl([True] * 4)

        rows: list[dict[str, Any]] = []
        nbytes = layer_bytes()
        for variant in VARIANTS:
            graphs = [] if variant.startswith("direct") else [capture(variant, s) for s in range(2)]
            try:
                for g in graphs:
                    for y in ys:
                        stream.memset(y, 0xFF)  # NaN: an output left unwritten fails the check
                    g.launch(stream)
                    for (name, n, _), y, want in zip(LAYER, ys, wants):
                        got = stream.download(y).astype(np.float64).reshape(m, n)
                        err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
                        if not err <= 2e-2:
                            self.failures.append(f"{variant} M={m} {name}: relative error {err:.2e}")

                def replay(i: int, graphs: list[Any] = graphs) -> None:
                    if graphs:
                        graphs[i % 2].launch(stream)
                    else:
                        layer(i % 2)
                back = self.timer.median(replay, self.calls, self.repeats)
                single = self.timer.median(replay, 1, self.repeats)
            finally:
                for g in graphs:
                    g.close()
            rows.append({"m": m, "variant": variant, "us": back, "single_us": single, "tbps": nbytes / back / 1e6})
            print(f"M={m:3d} {variant:36s} {back:8.2f} µs back to back ({nbytes / back / 1e6:.2f} TB/s), "
                  f"single {single:8.2f}", flush=True)
        for p in plans:
            p.close()
        for b in xs + ys:
            b.free(stream)
        return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--m", default="1,8,16")
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    bench = _Bench(args.calls, args.repeats)
    rows = [row for m in (int(v) for v in args.m.split(",")) for row in bench.measure_m(m)]
    record = {"benchmark": "graph_boundary_ab", "device": bench.context.device_info().name,
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "calls": args.calls,
              "repeats": args.repeats, "weight_bytes": layer_bytes(), "failures": bench.failures, "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
    for f in bench.failures:
        print("FAILED:", f)
    return 1 if bench.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
