"""Small ONNX graphs for the importer's focused tests, and their check against ONNX's own reference
evaluator (the node tests' oracle) through the IR's interpreter."""

from __future__ import annotations

import numpy as np
from onnx import helper
from onnx.reference import ReferenceEvaluator
from tessera.frontend import from_onnx
from tessera.ir import interpret


def graph_model(nodes, inputs, outputs, opset: int, initializers=()):
    """A default-domain model of ``nodes``; ``inputs``/``outputs`` are (name, elem_type, shape)."""
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs], initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def as_outputs(got) -> list[np.ndarray]:
    """The interpreter's result (one value or a tuple) as a list of arrays."""
    return [np.asarray(g) for g in (got if isinstance(got, tuple | list) else [got])]


def interpret_and_compare(model, feeds: dict, rtol: float, atol: float) -> list[np.ndarray]:
    """Import ``model``, run it on the interpreter and assert each output has the reference
    evaluator's dtype and shape and its values within ``rtol``/``atol``; returns the outputs."""
    got = as_outputs(interpret(from_onnx(model), "main", *feeds.values()))
    want = ReferenceEvaluator(model).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got
