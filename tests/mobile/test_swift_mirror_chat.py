"""The chat half of the Swift package's C call sequence (runtime-native/tests/test_swift_mirror.c), on a
chat model: ctest cannot compile one, so this compiles the tiny random-weight Llama for the CPU and runs
the mirror on it. The mirror's greedy reply must be the Python VM's on the same build."""

import os
import subprocess

from native.build import ensure_native_build
from tessera.app.chat import ChatSession, Sampling

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_engine_sequence_chats_cancels_resets_and_closes(tiny_gguf, tmp_path):
    from tessera.app.compile import compile_model

    build = ensure_native_build()
    folder = str(tmp_path / "cpu")
    compile_model(tiny_gguf, folder, "cpu", 64)
    result = subprocess.run([os.path.join(build, "test_swift_mirror"), folder], capture_output=True, text=True,
                            cwd=os.path.join(ROOT, "runtime-native", "tests"), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    replies = [line[len("reply: "):] for line in result.stdout.splitlines() if line.startswith("reply: ")]
    assert len(replies) == 1
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello there"}]
    python = ChatSession(folder).reply(messages, 6, Sampling(temperature=0.0))["reply"]
    assert replies[0] == python
