"""The ONNX backend-test cases for GRU and LSTM (generators shipped in the onnx wheel).

Each generator builds a node, inputs and the expected outputs (computed by onnx's numpy
reference) and hands them to ``expect``; we capture those and run jaxgru on them.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from onnx import helper

import jaxgru


def _collect(module_name, cls_name):
    module = importlib.import_module(f"onnx.backend.test.case.node.{module_name}")
    cases = []

    def capture(node, inputs, outputs, name, **kwargs):
        del kwargs
        cases.append((name, node, inputs, outputs))

    original = module.expect
    module.expect = capture
    try:
        cls = getattr(module, cls_name)
        for attr in sorted(dir(cls)):
            if attr.startswith("export"):
                getattr(cls, attr)()
    finally:
        module.expect = original
    return cases


CASES = _collect("gru", "GRU") + _collect("lstm", "LSTM")


def _run(node, inputs):
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    names = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]
    # node.input skips optional inputs with ""; the generator lists values for named ones
    values = dict(zip([names[pos] for pos, n in enumerate(node.input) if n], inputs))
    kw = dict(layout=int(attrs.get("layout", 0)))
    if "direction" in attrs:
        kw["direction"] = attrs["direction"].decode() if isinstance(attrs["direction"], bytes) else attrs["direction"]
    if node.op_type == "GRU":
        kw["linear_before_reset"] = bool(attrs.get("linear_before_reset", 0))
        params = jaxgru.GRUParams(values["W"], values["R"], values.get("B"))
        fn = jaxgru.gru
    else:
        kw["input_forget"] = bool(attrs.get("input_forget", 0))
        params = jaxgru.LSTMParams(values["W"], values["R"], values.get("B"), values.get("P"))
        fn = jaxgru.lstm
        if "initial_c" in values:
            kw["initial_c"] = values["initial_c"]
    if "initial_h" in values:
        kw["initial_h"] = values["initial_h"]
    if "sequence_lens" in values:
        kw["sequence_lens"] = values["sequence_lens"]
    assert int(attrs["hidden_size"]) == params.r.shape[-1]
    return fn(params, values["X"], **kw)


@pytest.mark.parametrize(("name", "node", "inputs", "outputs"), CASES, ids=[c[0] for c in CASES])
def test_onnx_backend_case(name, node, inputs, outputs):
    got = _run(node, inputs)
    # The generator lists expected values for the outputs the node names, in order.
    wanted = list(zip([i for i, o in enumerate(node.output) if o], outputs))
    assert wanted, name
    for i, want in wanted:
        np.testing.assert_allclose(np.asarray(got[i]), want, rtol=1e-5, atol=1e-6, err_msg=f"{name} output {i}")


def test_cases_were_found():
    names = {c[0] for c in CASES}
    assert len(names) >= 12 and any("seq_length" in n for n in names), names
