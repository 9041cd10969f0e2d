"""The converters: each aten op in terms of the IR's operators (tessera.op).

Importing this module registers them all. They live in modules by kind; semantics follow the op's
schema in torch's native_functions.yaml and its eager CPU kernel."""

from . import (  # noqa: F401  (importing registers)
    convert_elementwise,
    convert_nn,
    convert_reduce,
    convert_resample,
    convert_select,
    convert_shape,
)
