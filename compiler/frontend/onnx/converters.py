"""The converters: each ONNX op in terms of the IR's operators (tessera.op).

Importing this module registers them all. Semantics follow the ONNX operator docs for the opset each
converter names; where an opset changed an op (Softmax's axis at 13, attributes that became inputs),
there is one converter per version. They live in modules by kind."""

from . import (  # noqa: F401  (importing registers)
    convert_attention,
    convert_control,
    convert_elementwise,
    convert_extra,
    convert_integer,
    convert_loops,
    convert_misc_ops,
    convert_nn,
    convert_reduce,
    convert_rnn,
    convert_sampling,
    convert_scatter,
    convert_shape,
    convert_signal,
    convert_transformer,
    convert_vision,
)
