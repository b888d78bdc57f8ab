"""The device run's figures in short: per case, the medians of every peer in ms and the ratios that
matter (the WGSL path against PyTorch CUDA and against the native CPU lowering on the same host; the
native CPU lowering against the best of onnxruntime and PyTorch), then their geometric means.

    python benchmarks/gpu/summary.py [RESULTS_DIR]     # default benchmarks/results

Reads gpu_bench.json and gpu_cpu16_bench.json (benchmarks/gpu/run.sh), partial runs included.
"""

from __future__ import annotations

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # benchmarks/

from _timing import geo


def _table(path: pathlib.Path, ratios: dict[str, tuple[str, tuple[str, ...]]]) -> None:
    """Print one results file: medians per peer and, per ratio name, numerator / best of the others."""
    if not path.exists():
        print(f"{path.name}: missing")
        return
    d = json.loads(path.read_text())
    peers = d["peers"]
    print(f"{path.name}: {len(d['rows'])} cases{' (partial)' if d.get('partial') else ''}; "
          f"machine {d.get('machine', {}).get('cpu', '?')}")
    print("case".ljust(44) + "".join(p.rjust(13) for p in peers) + "".join(r.rjust(18) for r in ratios))
    found: dict[str, list[tuple[str, float]]] = {r: [] for r in ratios}  # (mode, ratio)
    for row in d["rows"]:
        med = {p: v for p, v in row["median_s"].items() if v}
        cells = "".join((f"{med[p] * 1e3:.2f}" if p in med else "—").rjust(13) for p in peers)
        for r, (num, dens) in ratios.items():
            best = min((med[p] for p in dens if p in med), default=None)
            if num in med and best:
                found[r].append((row["case"]["mode"], med[num] / best))
                cells += f"{med[num] / best:.2f}".rjust(18)
            else:
                cells += "—".rjust(18)
        print(row["case"]["name"][:43].ljust(44) + cells)
    for r, xs in found.items():
        for mode in ("forward", "train"):
            sel = [x for m, x in xs if m == mode]
            if sel:
                over = sum(x > 1 for x in sel)
                print(f"  {r} {mode}: geo-mean {geo(sel):.2f} over {len(sel)} cases, {over} over 1.0")


def main() -> None:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results")
    _table(root / "gpu_bench.json", {"wgsl/torch-cuda": ("jaxgru-wgsl", ("torch-cuda",)),
                                     "wgsl/jaxgru-cpu": ("jaxgru-wgsl", ("jaxgru-cpu",))})
    _table(root / "gpu_cpu16_bench.json", {"cpu/best(ort,pt)": ("jaxgru-cpu", ("onnxruntime", "torch")),
                                           "cpu/xla": ("jaxgru-cpu", ("jaxgru-xla",))})


if __name__ == "__main__":
    main()
