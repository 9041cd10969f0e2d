"""The codegen tests reuse the kernel tests' harness and cases (tests/kernels), imported by name."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernels"))
