"""The planner's figures as a markdown table: the stepwise plan (what main chose at these shapes
before the tiled variant) against today's automatic plan, per cell, batch and hidden size.

Printed by ``python -m jaxgru plan`` and by benchmarks/gpu/run.sh; the table in docs/wgsl.md is
its output for the discrete-GPU profile. No device needed (unless ``limits="device"``).
"""

from __future__ import annotations

from collections.abc import Sequence

from jaxgru._src.webgpu.plan import plan_for

BATCHES = (1, 16, 64)
HIDDEN = (256, 512, 1024)
_MIB = 1 << 20


def table(limits: str | dict[str, int] = "discrete-gpu", *, seq_length: int = 128,
          batches: Sequence[int] = BATCHES, hidden: Sequence[int] = HIDDEN) -> str:
    """The figures of the stepwise and the automatic plan for GRU and LSTM (I = H, f32).

    Args:
      limits: as ``plan_for``'s (a profile name, "device", or a dict).
      seq_length: L of every call.
      batches: the batch sizes N.
      hidden: the hidden sizes H.

    Returns:
      A markdown table, one row per (cell, N, H).
    """
    head = ("| cell | N | H | stepwise: workgroups / step dispatch | R read / step (MiB) | auto: variant | "
            "workgroups / step dispatch | invocations / workgroup | tile: rows x units, k split | "
            "R read / step (MiB) |")
    rows = [head, "|" + "---|" * head.count(" |")]
    for cell in ("gru", "lstm"):
        for n in batches:
            for h in hidden:
                kw = {"seq_length": seq_length, "batch": n, "input_size": h, "hidden_size": h, "limits": limits}
                before, after = plan_for(cell, variant="stepwise", **kw), plan_for(cell, **kw)
                tile = (f"{after['rows_per_workgroup']} x {after['units_per_workgroup']}, {after['k_split']}"
                        if after["variant"] == "tiled" else "—")
                rows.append(
                    f"| {cell.upper()} | {n} | {h} | {before['workgroups_per_step_dispatch']} | "
                    f"{_mib(before['r_bytes_read_per_step'])} | {after['variant']} | "
                    f"{after['workgroups_per_step_dispatch']} | {after['invocations_per_workgroup']} | {tile} | "
                    f"{_mib(after['r_bytes_read_per_step'])} |"
                )
    return "\n".join(rows)


def _mib(nbytes: object) -> str:
    assert isinstance(nbytes, int)
    return f"{nbytes / _MIB:.1f}"
