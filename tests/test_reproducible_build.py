"""The same module compiles to the same executable in every process: fused functions' parameters
follow the program's order, not the hash of a variable (PYTHONHASHSEED differs per run)."""

import os
import subprocess
import sys

BUILD = """
import hashlib, json, sys
sys.path[:0] = [{tests!r}, {models!r}]
import tessera
from tessera import nn
from tessera.models import LlamaForCausalLM, export_llm
from test_llama_vs_transformers import reference
model, config, weights = reference("qwen2-bias")
exe = tessera.build(nn.bind_weights(export_llm(LlamaForCausalLM(config), 32), weights), "llvmpipe")
print(hashlib.sha256(json.dumps(exe.to_json(), sort_keys=True).encode()).hexdigest())
"""


def test_two_processes_build_the_same_executable():
    here = os.path.dirname(os.path.abspath(__file__))
    script = BUILD.format(tests=here, models=os.path.join(here, "models"))
    digests = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
        digests.append(run.stdout.strip().splitlines()[-1])
    assert digests[0] == digests[1]
