"""Ops composed at import from the IR's operators: TopK, Einsum, QLinearConv, ConvInteger."""
