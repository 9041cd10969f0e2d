"""Applications over the compiler's public API (DESIGN.md section 1).

    compile.py   `tessera compile`: a GGUF chat model into a directory, and the compile cache
    chat.py      `tessera chat`: a conversation with a compiled model in the Python VM
    bundle.py    `tessera bundle`: a static web site that chats with a model in the browser
    serve.py     `tessera serve`: a bundle over HTTP on 127.0.0.1
    inspect.py   `tessera inspect`: what an executable holds
    memory.py    what an executable needs on the device: weights, arenas, the KV cache
    progress.py  a build's progress on stderr: redrawn on a terminal, a line per stage elsewhere
    demo.py      `tessera demo`: a tour of the compiler on a small example

They use tessera.build, tessera.vm (Executable, VirtualMachine), tessera.frontend, tessera.models
and tessera.nn; nothing in the compiler core imports this package.
"""

from .bundle import bundle_model
from .chat import ChatError, ChatSession, Sampling
from .compile import CompiledModel, cached_compile, compile_model, compiler_fingerprint
from .serve import serve
