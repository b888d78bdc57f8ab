"""The benchmarks' interleaving (benchmarks/_timing.py): each round runs every candidate once, and
shuffled rounds vary who runs before whom."""

from __future__ import annotations

import importlib.util
import itertools
import pathlib
from collections import defaultdict

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
