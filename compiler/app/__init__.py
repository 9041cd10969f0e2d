"""Applications over the compiler's public API (docs/architecture.md, "The layers").

    compile.py   `tessera compile`: a GGUF chat model into a directory, and the compile cache
    chat.py      `tessera chat`: a conversation with a compiled model in the Python VM
    bundle.py    `tessera bundle`: a static web site that chats with a model in the browser
    serve.py     `tessera serve`: a model behind the OpenAI API with its chat page, or a bundle's site
    engine.py    the request queue behind it, one request at a time in a worker thread
    openai_api.py  its requests checked, its replies and errors in OpenAI's JSON
    http_server.py the Starlette application: the API, the page, static files
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
