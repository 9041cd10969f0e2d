"""Names for a function's results, kept through compilation into executable.json's ``result_names``.

An importer that knows what its graph calls each output (ONNX's ``graph.output``) sets the function
attribute ``output_names`` with ``output_names_attr``; ``tessera.build`` writes it into the function
record, and every runtime's tensor API names the outputs by it (else ``output0``, ``output1`` ...).
"""

from __future__ import annotations

# The function attribute: one name per result leaf (nested tuples flattened in order).
OUTPUT_NAMES = "output_names"


def output_names_attr(names) -> dict:
    """``{"output_names": [...]}`` for an attrs dict, or ``{}`` when the names cannot name the outputs
    (one empty or not a string, or two alike): the runtimes then fall back to ``output0`` ..."""
    names = list(names)
    if not names or not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        return {}
    return {OUTPUT_NAMES: names}
