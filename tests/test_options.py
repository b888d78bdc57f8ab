"""The option and cell tables are the one declaration: every public signature, docstring and
derived mapping must agree with them (so they cannot drift apart)."""

from __future__ import annotations

import inspect
import re

import pytest

import jaxgru
import jaxgru.equinox
import jaxgru.flax
from jaxgru._src import cells, options
from jaxgru._src.modules import CELL_SIZES, MODULE_OPTIONS, module_options
from jaxgru._src.webgpu import shaders
from jaxgru.interop import _onnx, _torch

CELLS = ("gru", "lstm")
LAYER = {"gru": jaxgru.gru, "lstm": jaxgru.lstm}
STACK = {"gru": jaxgru.gru_stack, "lstm": jaxgru.lstm_stack}
STEP = {"gru": jaxgru.gru_cell, "lstm": jaxgru.lstm_cell}
# each framework's own trailing keywords: its mode flag (nnx.Dropout's `deterministic`,
# eqx.nn.Dropout's `inference`), dtypes and randomness
MODULES = {
    "flax": ({"gru": jaxgru.flax.GRU, "lstm": jaxgru.flax.LSTM}, ("deterministic", "dtype", "param_dtype", "rngs")),
    "equinox": ({"gru": jaxgru.equinox.GRU, "lstm": jaxgru.equinox.LSTM}, ("inference", "dtype", "key")),
}


def _keywords(fn) -> dict[str, object]:
    return {n: p.default for n, p in inspect.signature(fn).parameters.items() if p.kind is p.KEYWORD_ONLY}


def _documented_args(fn) -> set[str]:
    """The names in a docstring's Args section."""
    doc = inspect.getdoc(fn) or ""
    section = re.search(r"Args:\n(.*?)(\n\S|\Z)", doc, flags=re.DOTALL)
    assert section, f"{fn.__qualname__} has no Args section"
    return set(re.findall(r"^\s{2}(\*{0,2}\w+):", section.group(1), flags=re.MULTILINE))


@pytest.mark.parametrize("cell", CELLS)
def test_layer_signature_is_the_table(cell):
    spec = cells.spec(cell)
    operands = {o.name: None for o in spec.operands if o.kind in ("state", "lens")}
    table = {o.name: o.default for o in options.options_for(cell)}
    assert _keywords(LAYER[cell]) == {**operands, **table}
    assert list(_keywords(LAYER[cell]))[len(operands):] == list(table), "options out of table order"


@pytest.mark.parametrize("cell", CELLS)
def test_layer_docstrings_document_every_option(cell):
    names = set(options.option_names(cell))
    assert names <= _documented_args(LAYER[cell])
    step_doc = inspect.getdoc(STEP[cell]) or ""
    for name in options.option_names(cell, per_step=True):
        assert f"``{name}``" in step_doc, f"{cell}_cell's docstring omits {name}"
    for name in set(options.option_names(cell)) - set(options.option_names(cell, per_step=True)):
        assert f"``{name}``" not in step_doc, f"{cell}_cell's docstring lists {name}, which it refuses"


@pytest.mark.parametrize("framework", MODULES)
@pytest.mark.parametrize("cell", CELLS)
def test_module_signature_is_the_table(framework, cell):
    classes, tail = MODULES[framework]
    cls = classes[cell]
    kw = _keywords(cls.__init__)
    want = {"num_layers": 1, "bidirectional": False}
    want.update({n: options.OPTIONS_BY_NAME[n].default for n in module_options(cell)})
    want.update(MODULE_OPTIONS)  # the module-level (stack) options, not in the layer table
    want.update(CELL_SIZES[cell])  # the cell's own sizes (LSTM's proj_size): weight shapes, not options
    assert {k: v for k, v in kw.items() if k not in tail} == want
    assert list(kw)[-len(tail):] == list(tail)
    assert set(module_options(cell)) | set(MODULE_OPTIONS) | set(CELL_SIZES[cell]) | set(tail) <= _documented_args(cls)
    assert cls.cell == cell


@pytest.mark.parametrize("cell", CELLS)
def test_stack_signature_spells_out_the_module_level_options(cell):
    kw = _keywords(STACK[cell])
    assert {k: kw[k] for k in MODULE_OPTIONS} == MODULE_OPTIONS
    assert kw["key"] is None  # the dropout key: per call, not an option
    assert not set(MODULE_OPTIONS) & set(options.OPTIONS_BY_NAME), "stack-level options stay out of the table"
    assert {*MODULE_OPTIONS, "key"} <= _documented_args(STACK[cell])


@pytest.mark.parametrize("cell", CELLS)
def test_step_and_stack_accept_exactly_the_table(cell):
    p = jaxgru.init_gru if cell == "gru" else jaxgru.init_lstm
    import jax
    import jax.numpy as jnp

    params = p(jax.random.key(0), 2, 3)
    states = [jnp.zeros((1, 3))] * cells.spec(cell).num_states
    other = "input_forget" if cell == "gru" else "linear_before_reset"
    with pytest.raises(TypeError, match=f"unexpected option '{other}'"):
        STEP[cell](params, jnp.zeros((1, 2)), *states, **{other: True})
    with pytest.raises(TypeError, match="unexpected option 'direction'"):
        STEP[cell](params, jnp.zeros((1, 2)), *states, direction="forward")
    with pytest.raises(TypeError, match=f"unexpected option '{other}'"):
        STACK[cell]([params], jnp.zeros((4, 1, 2)), **{other: True})


def test_flags_reach_config_repr_and_wgsl():
    for cell in CELLS:
        source = shaders.source(cell, "f32")
        assert re.search(r"^override G: u32;$", source, flags=re.MULTILINE)
        assert re.search(r"^override K: u32;$", source, flags=re.MULTILINE)
        for o in options.flags_for(cell):
            assert o.wgsl and re.search(rf"^override {o.wgsl}: bool", source, flags=re.MULTILINE), o.name
            cfg = options.make_config(cell, "t", **{o.name: True})
            assert getattr(cfg, o.name) is True
            assert f"{o.abbrev or o.name}=1" in repr(cfg)
            assert getattr(cfg.replace(**{o.name: False}), o.name) is False
    gru_cfg = options.make_config("gru", "t")
    assert gru_cfg.input_forget is False  # another cell's flag reads as its default
    with pytest.raises(AttributeError):
        gru_cfg.no_such_option  # noqa: B018


def test_converter_mappings_come_from_the_table():
    for cell in CELLS:
        # every layer option (refused by value where PyTorch cannot express it) and dropout
        assert set(_torch._TORCH_OPTIONS[cell]) == set(options.option_names(cell)) | set(MODULE_OPTIONS)
        onnx_names = {o.onnx for o in options.options_for(cell) if o.onnx}
        assert onnx_names <= _onnx._ATTRS[cell.upper()]
        assert all(o.onnx_type for o in options.options_for(cell) if o.onnx)


def test_cell_tables():
    assert cells.GRU.num_gates == 3 and cells.LSTM.num_gates == 4
    assert cells.GRU.operand_names == ("x", "params.w", "params.r", "params.b", "initial_h", "sequence_lens")
    assert cells.LSTM.param_fields == ("w", "r", "b", "p", "proj")
    # proj is an optional operand: only a projected call has it, just before sequence_lens
    assert [o.field for o in cells.LSTM.operands_for(options.RNNConfig("lstm", proj=True))][-2:] == ["proj", "lens"]
    assert cells.LSTM.operands_for(options.RNNConfig("lstm")) == cells.LSTM.operands
    assert [o.name for o in cells.LSTM.state_operands] == ["initial_h", "initial_c"]
    for cell in CELLS:
        params_cls = jaxgru.GRUParams if cell == "gru" else jaxgru.LSTMParams
        assert params_cls._fields == cells.spec(cell).param_fields
        assert len(cells.spec(cell).activations) == len(options.DEFAULT_ACTIVATIONS[cell])
