"""PyTorch ``PackedSequence`` -> jaxgru's padded inputs and ``sequence_lens``."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

_FNAME = "jaxgru.interop.from_packed_sequence"


def _numpy(t: Any) -> np.ndarray:
    """A CPU numpy copy of a tensor (bfloat16, which numpy lacks, through float32: exact)."""
    import torch

    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return np.asarray(jnp.asarray(t.float().numpy(), jnp.bfloat16))
    return t.numpy()


def from_packed_sequence(packed: Any) -> tuple[jax.Array, jax.Array]:
    """A ``torch.nn.utils.rnn.PackedSequence`` as jaxgru's padded ``x`` and ``sequence_lens``.

    The inverse of ``pack_padded_sequence``, as ``pad_packed_sequence`` (time-major) computes
    it: the sequences back in their original batch order (``packed.unsorted_indices``, so
    ``enforce_sorted=False`` packs work too), zeros past each length. Pass both to
    ``jaxgru.gru`` / ``lstm`` / the stacks with ``layout=0``: their outputs at the valid steps
    and their final states are those of the PyTorch module run on ``packed``.

    Args:
      packed: a ``PackedSequence`` (of any dtype and device; it is copied to the host).

    Returns:
      ``(x, sequence_lens)``: ``x [L, N, *features]`` (jax array in the data's dtype, L the
      longest length) and ``sequence_lens [N]`` int32.

    Raises:
      TypeError: ``packed`` is not a ``PackedSequence``.

    Example:
      >>> import numpy as np, torch, jaxgru
      >>> from torch.nn.utils.rnn import pack_sequence
      >>> from jaxgru.interop import from_packed_sequence
      >>> packed = pack_sequence([torch.ones(2, 3), torch.ones(4, 3)], enforce_sorted=False)
      >>> x, lens = from_packed_sequence(packed)
      >>> x.shape, lens.tolist(), float(x[2:, 0].sum())
      ((4, 2, 3), [2, 4], 0.0)
      >>> module = torch.nn.GRU(3, 5)
      >>> layers, options = jaxgru.interop.from_torch(module)
      >>> y, y_h = jaxgru.gru_stack(layers, x, sequence_lens=lens, **options)
      >>> out, h_n = module(packed)
      >>> bool(np.allclose(h_n.detach().numpy(), y_h, atol=1e-5))
      True
    """
    from torch.nn.utils.rnn import PackedSequence

    if not isinstance(packed, PackedSequence):
        raise TypeError(f"{_FNAME}: packed must be a torch.nn.utils.rnn.PackedSequence; got "
                        f"{type(packed).__name__}.")
    data = _numpy(packed.data)  # [sum of lengths, *features], time-major: step t's rows first
    batch_sizes = packed.batch_sizes.detach().cpu().numpy().astype(np.int64)  # [L], non-increasing
    length, batch = len(batch_sizes), int(batch_sizes[0]) if len(batch_sizes) else 0
    valid = np.arange(batch)[None, :] < batch_sizes[:, None]  # [L, N], sorted batch order
    x = np.zeros((length, batch, *data.shape[1:]), data.dtype)
    x[valid] = data  # row-major over (t, i): the packed order
    lens = valid.sum(0).astype(np.int32)
    if packed.unsorted_indices is not None:
        order = packed.unsorted_indices.detach().cpu().numpy()
        x, lens = x[:, order], lens[order]
    return jnp.asarray(x), jnp.asarray(lens)
