"""Draw docs/img/gate_orders.png: the order of the stacked gate blocks in each system.

    python docs/scripts/gate_orders.py [output.png]

The orders are read from ``jaxgru.interop._layout`` (what the converters use), so the picture
cannot drift from the code: rerun this script and commit the PNG when they change.
"""

from __future__ import annotations

import pathlib
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt
from matplotlib.patches import Patch, Rectangle

from jaxgru.interop import _layout

DEFAULT_OUTPUT = pathlib.Path(__file__).resolve().parents[1] / "img" / "gate_orders.png"

# (system, GRU order, LSTM order); None: no stacked order (one weight per gate)
ROWS = [
    ("ONNX / jaxgru", _layout.ONNX_GRU, _layout.ONNX_LSTM),
    ("PyTorch nn.GRU / nn.LSTM", _layout.TORCH_GRU, _layout.TORCH_LSTM),
    ("Keras 3 GRU / LSTM", _layout.KERAS_GRU, _layout.KERAS_LSTM),
    (f'WebNN, layout "{_layout.WEBNN_GRU_LAYOUTS[0]}" / "{_layout.WEBNN_LSTM_LAYOUTS[0]}"',
     _layout.WEBNN_GRU_LAYOUTS[0], _layout.WEBNN_LSTM_LAYOUTS[0]),
    (f'WebNN, layout "{_layout.WEBNN_GRU_LAYOUTS[1]}" / "{_layout.WEBNN_LSTM_LAYOUTS[1]}"',
     _layout.WEBNN_GRU_LAYOUTS[1], _layout.WEBNN_LSTM_LAYOUTS[1]),
    ("Apple BNNS Graph", _layout.BNNS_GRU, _layout.BNNS_LSTM),
    ("Flax nnx GRUCell / OptimizedLSTMCell", _layout.FLAX_NNX_GRU, _layout.FLAX_NNX_OPTIMIZED_LSTM),
    ("Flax linen cells", None, None),
]

# one colour per gate meaning, the same in every row
GATES = {
    "z": ("update", "#4c72b0"), "r": ("reset", "#dd8452"), "n": ("new / candidate (ONNX: h)", "#55a868"),
    "i": ("input", "#8172b3"), "o": ("output", "#c44e52"), "f": ("forget", "#937860"),
    "g": ("cell candidate (ONNX: c)", "#64b5cd"),
}


def _blocks(ax, x0: float, y: float, order: str | None) -> None:
    if order is None:
        ax.text(x0 + 0.1, y + 0.4, "one Dense layer per gate (no stacked order)", va="center",
                fontsize=9, style="italic", color="#555555")
        return
    for k, gate in enumerate(order):
        ax.add_patch(Rectangle((x0 + k, y), 0.95, 0.8, facecolor=GATES[gate][1], edgecolor="white"))
        ax.text(x0 + k + 0.475, y + 0.4, gate, ha="center", va="center", color="white",
                fontsize=12, fontweight="bold")


def draw(output: pathlib.Path) -> pathlib.Path:
    """Draw the figure into ``output`` (a PNG) and return the path."""
    fig, ax = plt.subplots(figsize=(10.5, 0.55 * len(ROWS) + 1.9))
    gru_x, lstm_x = 4.6, 9.0
    for row, (name, gru, lstm) in enumerate(ROWS):
        y = len(ROWS) - 1 - row
        ax.text(0, y + 0.4, name, va="center", fontsize=10, fontweight="bold" if row == 0 else "normal")
        _blocks(ax, gru_x, y, gru)
        if lstm is not None or gru is not None:
            _blocks(ax, lstm_x, y, lstm)
    top = len(ROWS) + 0.15
    ax.text(gru_x + 1.5, top, "GRU gate blocks", ha="center", fontsize=11, fontweight="bold")
    ax.text(lstm_x + 2.0, top, "LSTM gate blocks", ha="center", fontsize=11, fontweight="bold")
    ax.set_xlim(0, 13.2)
    ax.set_ylim(-1.6, len(ROWS) + 0.6)
    ax.axis("off")
    handles = [Patch(facecolor=c, label=f"{g}: {label}") for g, (label, c) in GATES.items()]
    ax.legend(handles=handles, loc="lower center", ncol=4, fontsize=8.5, frameon=False,
              bbox_to_anchor=(0.5, -0.02))
    ax.set_title("Order of the gate blocks along the stacked gate axis of W, R and the biases",
                 fontsize=11)
    output.parent.mkdir(parents=True, exist_ok=True)
    # no version string in the file: the PNG changes only when the picture does
    fig.savefig(output, dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return output


if __name__ == "__main__":
    print(draw(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUTPUT))
