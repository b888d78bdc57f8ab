"""jaxgru.interop.from_packed_sequence against torch's pad_packed_sequence and nn.GRU / nn.LSTM."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import jax.numpy as jnp  # noqa: E402
from torch.nn.utils.rnn import pack_padded_sequence, pack_sequence, pad_packed_sequence  # noqa: E402

import jaxgru  # noqa: E402
from jaxgru.interop import from_packed_sequence, from_torch  # noqa: E402

IN, H = 3, 4
TOL = {"atol": 1e-5, "rtol": 1e-5}
LENGTHS = [3, 6, 1, 6, 4]  # unsorted, a tie, a length of 1


def _sequences(lengths, *features, dtype=torch.float32):
    g = torch.Generator().manual_seed(sum(lengths))
    return [torch.randn(n, *features, generator=g).to(dtype) for n in lengths]


@pytest.mark.parametrize("enforce_sorted", [False, True])
@pytest.mark.parametrize("features", [(IN,), (2, 3), ()])
def test_matches_pad_packed_sequence(enforce_sorted, features):
    lengths = sorted(LENGTHS, reverse=True) if enforce_sorted else LENGTHS
    packed = pack_sequence(_sequences(lengths, *features), enforce_sorted=enforce_sorted)
    assert (packed.unsorted_indices is None) == enforce_sorted
    x, lens = from_packed_sequence(packed)
    want_x, want_lens = pad_packed_sequence(packed)  # time-major, original order, zero padding
    assert x.dtype == jnp.float32 and lens.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(x), want_x.numpy())
    np.testing.assert_array_equal(np.asarray(lens), want_lens.numpy())
    np.testing.assert_array_equal(np.asarray(lens), lengths)


def test_pack_padded_batch_first_and_dtypes():
    seqs = _sequences(LENGTHS, IN, dtype=torch.float64)
    padded = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True)  # [N, L, I]
    packed = pack_padded_sequence(padded, torch.tensor(LENGTHS), batch_first=True, enforce_sorted=False)
    x, lens = from_packed_sequence(packed)
    np.testing.assert_array_equal(np.asarray(x), np.swapaxes(padded.float().numpy(), 0, 1))
    assert lens.tolist() == LENGTHS
    bf16 = pack_sequence(_sequences(LENGTHS, IN, dtype=torch.bfloat16), enforce_sorted=False)
    x, _ = from_packed_sequence(bf16)
    assert x.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(x, np.float32), pad_packed_sequence(bf16)[0].float().numpy())
    ones = pack_sequence([torch.ones(1, IN, requires_grad=True)])
    x, lens = from_packed_sequence(ones)
    assert x.shape == (1, 1, IN) and lens.tolist() == [1]


@pytest.mark.parametrize(("kind", "num_layers", "bidirectional"),
                         [("GRU", 2, True), ("LSTM", 2, True), ("GRU", 1, False), ("LSTM", 3, False)])
def test_torch_module_on_packed_equals_jaxgru_on_converted(kind, num_layers, bidirectional):
    torch.manual_seed(num_layers)
    module = getattr(torch.nn, kind)(IN, H, num_layers=num_layers, bidirectional=bidirectional)
    packed = pack_sequence(_sequences(LENGTHS, IN), enforce_sorted=False)
    with torch.no_grad():
        out, state = module(packed)
    want_y, _ = pad_packed_sequence(out)  # [L, N, D*H], zeros past each length
    want_states = state if isinstance(state, tuple) else (state,)

    x, lens = from_packed_sequence(packed)
    layers, options = from_torch(module)
    stack = jaxgru.gru_stack if kind == "GRU" else jaxgru.lstm_stack
    y, *states = stack(layers, x, sequence_lens=lens, backend="xla", **options)
    length, d, batch, hidden = y.shape
    y = np.transpose(np.asarray(y), (0, 2, 1, 3)).reshape(length, batch, d * hidden)
    valid = np.arange(length)[:, None] < np.asarray(lens)[None, :]
    np.testing.assert_allclose(y[valid], want_y.numpy()[valid], **TOL)
    assert not y[~valid].any()  # jaxgru's Y is zero past each length, as pad_packed_sequence's
    for got, want in zip(states, want_states):
        np.testing.assert_allclose(np.asarray(got), want.numpy(), **TOL)


@pytest.mark.parametrize("call", [
    lambda p, x: jaxgru.gru(p["gru"][0], x),
    lambda p, x: jaxgru.lstm(p["lstm"][0], x),
    lambda p, x: jaxgru.gru_stack(p["gru"], x),
    lambda p, x: jaxgru.lstm_stack(p["lstm"], x),
], ids=["gru", "lstm", "gru_stack", "lstm_stack"])
def test_a_packed_sequence_as_x_says_what_to_do(call):
    z = lambda *s: np.zeros(s, np.float32)
    params = {"gru": [jaxgru.GRUParams(z(1, 3 * H, IN), z(1, 3 * H, H))],
              "lstm": [jaxgru.LSTMParams(z(1, 4 * H, IN), z(1, 4 * H, H))]}
    packed = pack_sequence(_sequences(LENGTHS, IN), enforce_sorted=False)
    with pytest.raises(TypeError, match=r"x is a torch PackedSequence; convert it with "
                                        r"jaxgru\.interop\.from_packed_sequence\(packed\)"):
        call(params, packed)


def test_refuses_what_is_not_packed():
    with pytest.raises(TypeError, match=r"packed must be a torch\.nn\.utils\.rnn\.PackedSequence; got Tensor"):
        from_packed_sequence(torch.zeros(3, 2, IN))
