import os
import sys

# The kernel harness (check_op, quantized weights) lives with the kernel tests.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "kernels"))
