"""Turn benchmark results (JSON) into docs/performance.md and docs/img/performance.png.

    python benchmarks/report.py [benchmarks/results/bench_full.json]

The page's tables and the plot are regenerated from the JSON only; the prose around them
lives in benchmarks/performance_notes.md and is copied in verbatim.
"""

from __future__ import annotations

import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "performance.md"
PLOT = ROOT / "docs" / "img" / "performance.png"
NOTES = pathlib.Path(__file__).resolve().parent / "performance_notes.md"


def _ms(v):
    return "—" if v is None else (f"{v * 1e3:.2f}" if v < 10 else f"{v * 1e3:.1f}")


def _x(v, pct=False):
    if v is None:
        return "—"
    return f"{v:.0%}" if pct else f"{v:.2f}x"


def _paired(r: dict) -> str:
    """The native lowering's ratio to the best compared peer, with the paired round-by-round
    interval where the run kept its rounds (runs before 2026-12-02 17:00 did not)."""
    if r.get("cpu_paired_vs_best") is None:
        return _x(r.get("cpu_ratio_vs_best"))
    _, lo, hi = r["cpu_paired_vs_best"]
    return f"{_x(r.get('cpu_ratio_vs_best'))} ({lo:.2f}–{hi:.2f})"


def tables(data: dict) -> str:
    peers = data["peers"]
    lim = data["limits"]
    out = [
        f"Measured on {data['machine']['cores']} cores ({data['machine']['cpu']}), jax {data['machine']['jax']}, "
        f"{data['machine']['date']}: sgemm peak **{lim['sgemm_gflops']['peak']:.0f} GFLOP/s**, memory bandwidth "
        f"**{lim['bandwidth_gbs']:.1f} GB/s**. Times are medians (ms) of interleaved rounds; "
        "ratios compare jaxgru-xla and jaxgru-cpu (the native lowering) with the best of onnxruntime "
        "and PyTorch in the same run (below 1 is faster); the roofline column is the roofline time "
        "over jaxgru-xla's time, the last one over jaxgru-cpu's. In brackets after the cpu ratio: the "
        "95% interval of the median of its round-by-round ratios (`_timing.paired_ratio`); where it "
        "contains 1, the difference is within this run's noise.",
        "",
    ]
    for mode in ("forward", "train"):
        rows = [r for r in data["rows"] if r["case"]["mode"] == mode]
        if not rows:
            continue
        used = [p for p in peers if any(p in r["median_s"] for r in rows)]
        out += [f"### {'Forward (inference)' if mode == 'forward' else 'Training step (forward + backward)'}", ""]
        head = ["case", *used, "xla / best", "cpu / best", "roofline", "cpu roofline", "compile s", "mem MB"]
        out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in rows:
            med = r["median_s"]
            kind, shape = r["case"]["name"].split(" ", 1)
            cells = [f"{kind.replace(f'-{mode}', '')} {shape}"]
            cells += [_ms(med.get(p)) for p in used]
            cpu, roof = med.get("jaxgru-cpu"), r.get("roofline_s")
            cells += [_x(r.get("ratio_vs_best")), _paired(r),
                      _x(r.get("roofline_fraction"), pct=True),
                      _x(roof / cpu if (roof and cpu) else None, pct=True),
                      f"{r['compile_s'].get('jaxgru-xla', 0):.2f}",
                      "—" if r["memory_mb"].get("jaxgru-xla") is None else f"{r['memory_mb']['jaxgru-xla']:.1f}"]
            out.append("| " + " | ".join(cells) + " |")
        s = data["summary"][mode]
        parts = [f"{k.replace('_', ' ')} **{v:.2f}**" if isinstance(v, float) else f"{k.replace('_', ' ')} {v}"
                 for k, v in s.items() if v is not None]
        out += ["", "Summary: " + "; ".join(parts), ""]
    return "\n".join(out)


def plot(data: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = data["rows"]
    peers = [p for p in data["peers"] if p != "jaxgru-wgsl"]
    fig, ax = plt.subplots(figsize=(11, 0.32 * len(rows) + 1.5))
    height = 0.8 / len(peers)
    for k, peer in enumerate(peers):
        ys, xs = [], []
        for i, r in enumerate(rows):
            best = r.get("best_compared") or min(r["median_s"].values())
            if peer in r["median_s"]:
                ys.append(i + k * height)
                xs.append(r["median_s"][peer] / best)
        ax.barh(ys, xs, height=height, label=peer)
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(rows))])
    ax.set_yticklabels([r["case"]["name"] for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xlabel("time / best of onnxruntime and PyTorch (log scale; left is faster)")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT, dpi=110)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path = pathlib.Path(argv[0]) if argv else ROOT / "benchmarks" / "results" / "bench_full.json"
    data = json.loads(path.read_text())
    if data.get("partial"):  # run.py saves its rows after every case; a stopped run has no summary
        raise SystemExit(f"{path} holds a run stopped after {len(data['rows'])} cases: run the suite to its end")
    notes = NOTES.read_text() if NOTES.exists() else ""
    marker = "<!-- tables -->"
    body = tables(data) + "\n\n![jaxgru and its peers](img/performance.png)\n"
    page = notes.replace(marker, body) if marker in notes else notes + "\n" + body
    DOC.write_text(page)
    plot(data)
    print(f"wrote {DOC} and {PLOT} from {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
