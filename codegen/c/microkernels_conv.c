/* Convolution and pooling micro-kernels.
 *
 * externs: */
