/* Integer SIMD dot products of the K-quant blocks (Q2_K .. Q6_K) and of Q5_0 and Q5_1 with
 * activations rounded to q8 blocks of 32 (tsr_quantize_q8 in microkernels.c).
 *
 * externs: */
