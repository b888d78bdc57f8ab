"""Turn benchmark results (JSON) into docs/performance.md and docs/img/performance.png.

    python benchmarks/report.py [benchmarks/results/bench_full.json]

The page's tables, its targets table and the plot are regenerated from the JSON only; the
prose around them lives in benchmarks/performance_notes.md (the markers <!-- tables --> and
<!-- targets --> say where they go) and is copied in verbatim. tests/test_docs.py checks that
the page is this script's output of the committed notes and bench_full.json: run it after a
suite (save the suite there) or after editing the notes.
"""

from __future__ import annotations

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from _timing import geo

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


def targets(data: dict) -> str:
    """Where the run stands against the targets (issue 14's for the native lowering), for both CPU
    lowerings, from the same rows as the tables."""
    fwd = [r for r in data["rows"] if r["case"]["mode"] == "forward"]
    train = [r for r in data["rows"] if r["case"]["mode"] == "train"]
    sf, st = data["summary"]["forward"], data["summary"]["train"]

    def slower(s):  # the summary's counts: xla's, and the cpu's with those beyond the paired interval
        return (f"{s['cases_slower_than_best']} of {s['cases']}",
                f"{s['cpu_cases_slower_than_best']} of {s['cases']} ({s['cpu_cases_slower_beyond_noise']})")

    def roof(rows, peer):
        big = [r for r in rows if r["case"]["N"] >= 64 and r["median_s"].get(peer)]
        return f"{sum(1 for r in big if r['roofline_s'] * 1.5 >= r['median_s'][peer])} of {len(big)}"

    def faster(rows, peer, ours):
        return _x(geo([r["median_s"][peer] / r["median_s"][ours] for r in rows
                        if r["median_s"].get(peer) and r["median_s"].get(ours)]))

    lines = [
        "| | target | jaxgru-xla | jaxgru-cpu |",
        "|---|---|---|---|",
        f"| forward: time over the best of onnxruntime and PyTorch, geo-mean | 0.8x or less | "
        f"{_x(sf['geomean_ratio_vs_best'])} | {_x(sf['cpu_geomean_ratio_vs_best'])} |",
        "| forward: cases slower than the best (cpu: beyond the paired interval) | none | "
        "{} | {} |".format(*slower(sf)),
        f"| training step: time over PyTorch's, geo-mean | 0.7x or less | {_x(st['geomean_ratio_vs_torch'])} | "
        f"{_x(st['cpu_geomean_ratio_vs_torch'])} |",
        "| training step: cases slower than PyTorch (cpu: beyond the paired interval) | none | "
        "{} | {} |".format(*slower(st)),
        f"| batch 64 within 1.5x of the roofline: forward; training | all | {roof(fwd, 'jaxgru-xla')}; "
        f"{roof(train, 'jaxgru-xla')} | {roof(fwd, 'jaxgru-cpu')}; {roof(train, 'jaxgru-cpu')} |",
    ]
    for label, peer in (("Flax `nn.RNN`", "flax"), ("Equinox", "equinox")):
        cells = [f"{faster(fwd, peer, ours)}; {faster(train, peer, ours)}" for ours in ("jaxgru-xla", "jaxgru-cpu")]
        lines.append(f"| faster than {label}, geo-mean: forward; training | 1.5x | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


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


def page(data: dict, notes: str) -> str:
    """docs/performance.md: the notes with the run's tables and targets in place of their markers."""
    marker = "<!-- tables -->"
    body = tables(data) + "\n\n![jaxgru and its peers](img/performance.png)\n"
    out = notes.replace(marker, body) if marker in notes else notes + "\n" + body
    return out.replace("<!-- targets -->", targets(data))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path = pathlib.Path(argv[0]) if argv else ROOT / "benchmarks" / "results" / "bench_full.json"
    data = json.loads(path.read_text())
    if data.get("partial"):  # run.py saves its rows after every case; a stopped run has no summary
        raise SystemExit(f"{path} holds a run stopped after {len(data['rows'])} cases: run the suite to its end")
    DOC.write_text(page(data, NOTES.read_text() if NOTES.exists() else ""))
    plot(data)
    print(f"wrote {DOC} and {PLOT} from {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
