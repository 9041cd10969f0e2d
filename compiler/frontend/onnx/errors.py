"""The one error the ONNX importer raises on a model it cannot take."""

from __future__ import annotations

from ...ir.errors import TesseraError


class OnnxImportError(TesseraError):
    """A model the importer refuses, with where and why.

    ``kind`` is "unsupported" (an op, attribute value, dtype or opset the importer does not
    implement: the model may be fine) or "invalid" (the file or graph itself is wrong: truncated,
    an external-data path outside the model's folder, shapes that contradict each other)."""

    def __init__(self, message: str, kind: str = "unsupported"):
        self.kind = kind
        self.constant_input = ""  # the value that had to be a constant, where that is the reason
        super().__init__(message)


def node_label(node, index: int) -> str:
    """How a message names a node: its name when it has one, else its index in the graph."""
    return f"node '{node.name}'" if node.name else f"node #{index}"
