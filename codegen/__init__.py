"""Kernel code generators, one folder per target (WGSL, SPIR-V, Metal, OpenCL C, C).

The backends arrive with the kernel issue; this package exists so that
`tessera.codegen` resolves to `codegen/` from the start (DESIGN.md section 1).
"""
