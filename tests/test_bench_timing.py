"""The benchmarks' interleaving (benchmarks/_timing.py): each round runs every candidate once, and
shuffled rounds vary who runs before whom; and three benchmark scripts run end to end."""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import json
import pathlib
import sys
from collections import defaultdict

import jax
import pytest

from jaxgru._src import native

_PATH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "_timing.py"
_spec = importlib.util.spec_from_file_location("bench_timing", _PATH)
assert _spec is not None and _spec.loader is not None
timing = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(timing)


def _order_of_calls(shuffle: bool, rounds: int = 30) -> list[str]:
    calls: list[str] = []
    candidates = {name: (lambda name=name: calls.append(name)) for name in "abcd"}
    times = timing.interleaved_times(candidates, rounds, shuffle=shuffle)
    assert {name: len(ts) for name, ts in times.items()} == dict.fromkeys("abcd", rounds)
    return calls


def _predecessors(calls: list[str]) -> dict[str, set[str]]:
    before: dict[str, set[str]] = defaultdict(set)
    for prev, name in itertools.pairwise(calls):
        if prev != name:  # (the last of one round may start the next)
            before[name].add(prev)
    return before


def test_shuffled_rounds_run_each_candidate_once_after_varying_predecessors():
    calls = _order_of_calls(shuffle=True)
    rounds = [calls[i:i + 4] for i in range(0, len(calls), 4)]
    assert all(sorted(r) == list("abcd") for r in rounds)
    assert len({tuple(r) for r in rounds}) > 5  # not one order, nor a rotation of one (4 orders)
    assert all(len(p) == 3 for p in _predecessors(calls).values())  # every other candidate, at times
    assert calls == _order_of_calls(shuffle=True)  # seeded: a run repeats


def test_unshuffled_rounds_keep_the_listed_order():
    calls = _order_of_calls(shuffle=False, rounds=3)
    assert calls == list("abcd") * 3


def _run_script(name: str, tmp_path, monkeypatch, shapes: list[str]) -> list[dict]:
    """benchmarks/NAME.py's main on `shapes` (CELL,L,N,I,H), one round, its JSON rows."""
    monkeypatch.syspath_prepend(str(_PATH.parent))
    monkeypatch.delitem(sys.modules, name, raising=False)
    script = importlib.import_module(name)
    out = tmp_path / f"{name}.json"
    argv = ["--repeats", "1", "--out", str(out)] + [a for s in shapes for a in ("--shape", s)]
    with jax.numpy_rank_promotion("allow"):  # train_step's textbook cell broadcasts its bias as users write it
        script.main(argv)
    return json.loads(out.read_text())["rows"]


# From 2026-12-01 to 12-04 both scripts stopped at their first LSTM shape on an option only the
# GRU takes, unnoticed: each runs here end to end on a tiny GRU and LSTM.
SHAPES = ["gru,3,2,4,5", "lstm,3,2,4,5"]


def test_train_step_benchmark_runs_every_cell(tmp_path, monkeypatch):
    rows = _run_script("train_step", tmp_path, monkeypatch, SHAPES)
    assert [(r["cell"], r["L"], r["N"], r["I"], r["H"]) for r in rows] == [("gru", 3, 2, 4, 5), ("lstm", 3, 2, 4, 5)]
    for r in rows:
        assert set(r["median_ms"]) == {"jaxgru", "grad(reference)", "grad(textbook scan)"}
        assert all(v > 0 for v in r["median_ms"].values()) and r["ratio_vs_grad_reference"] > 0


def test_loop_layouts_benchmark_runs_every_cell(tmp_path, monkeypatch):
    rows = _run_script("loop_layouts", tmp_path, monkeypatch, SHAPES)
    assert [(r["cell"], r["L"], r["N"], r["I"], r["H"]) for r in rows] == [("gru", 3, 2, 4, 5), ("lstm", 3, 2, 4, 5)]
    for r in rows:
        assert set(r["median_ms"]) == {"bm/loop", "bm/hoist", "fm/loop", "fm/hoist"}
        assert r["chosen"] in r["median_ms"] and r["chosen_vs_best"] >= 1.0


def test_samples_are_sized_by_every_timer_of_jaxgru(monkeypatch):
    # cpu_isa.py's timers (xla, avx512, ...) and cpu_native_ab.py's builds are jaxgru's under other
    # names: unless named in `ours`, they got single-call samples (the slowest peer sized them)
    monkeypatch.syspath_prepend(str(_PATH.parent))
    run = importlib.import_module("run")
    warm = {"xla": 1e-3, "avx512": 1e-4, "onnxruntime": 1e-2}
    assert run.calls_per_sample(warm, 5e-3) == 1  # onnxruntime's 10 ms sizes it
    assert run.calls_per_sample(warm, 5e-3, ours=warm) == 50  # the fastest ISA's 0.1 ms does
    assert run.calls_per_sample(warm, 5e-3, most=8, ours=warm) == 8
    assert run.calls_per_sample({"jaxgru-cpu": 1e-3, "torch": 2e-3}, 5e-3) == 5


@pytest.mark.skipif(not native.available(), reason="the native extension is not built")
def test_probe_benchmark_runs_and_splits_its_rounds(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(_PATH.parent))
    monkeypatch.delitem(sys.modules, "cpu_probe", raising=False)
    script = importlib.import_module("cpu_probe")
    out = tmp_path / "cpu_probe.json"
    script.main(["--repeats", "3", "--out", str(out), "--case", "lstm,forward,70,2,4,16"])
    (row,) = json.loads(out.read_text())["rows"]
    assert row["case"].startswith("lstm-forward-uni L=70 N=2 I=4 H=16")
    assert set(row["median_ms"]) == {"probe", "no probe", "one thread"}
    split = [m for m in (row["far_ms"], row["near_ms"]) if m is not None]
    assert row["far_rounds"] <= 3 and all(set(m) == set(row["median_ms"]) for m in split)
