"""tessera.nn: define models as modules, export them as graph functions over symbolic lengths.

    class MLP(nn.Module):
        def __init__(self):
            self.up = nn.Linear(64, 256)
            self.down = nn.Linear(256, 64)

        def forward(self, x):
            return self.down(op.nn.silu(self.up(x)))

    mod = nn.export(MLP(), "main", {"x": R.Tensor(("n", 64), "float32")})

A module's forward receives and returns graph expressions; ``export`` builds
one function whose parameters are the inputs followed by every weight of the
model, named by its path (``layers.0.attn.q_proj.weight``). ``bind_weights``
turns weights into constants, which executables keep in their tensor cache.
"""

from .module import (
    Conv2d,
    Embedding,
    Linear,
    ModelError,
    Module,
    ModuleList,
    Parameter,
    RMSNorm,
    bind_weights,
    bind_weights_after_fusion,
    export,
)

__all__ = ["Conv2d", "Embedding", "Linear", "ModelError", "Module", "ModuleList", "Parameter", "RMSNorm",
           "bind_weights", "bind_weights_after_fusion", "export"]
