/* f32 GEMM micro-kernels over packed panels.
 *
 * externs: */
