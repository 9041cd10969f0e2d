"""from_exported_program (docs/torch.md): aten ops checked against torch through the reference
interpreter, dynamic dims as bounded shape variables, weights, .pt2 files, executables for cpu and
wasm, small BERT and ResNet from transformers, and every refusal one clear TorchImportError."""

from __future__ import annotations

import numpy as np
import pytest
import tessera
import torch
import torch.nn.functional as F
from tessera.frontend import TorchImportError, from_exported_program
from tessera.ir import interpret
from tessera.ir.errors import TesseraError

torch.manual_seed(0)
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # torch's own pytree deprecation, on export


class Fn(torch.nn.Module):
    """A module around a function, with the submodules (weights) it uses."""

    def __init__(self, fn, **modules):
        super().__init__()
        self.fn = fn
        self.parts = torch.nn.ModuleDict(modules)

    def forward(self, *args):
        return self.fn(self.parts, *args)


def _outputs(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [v for v in value.values() if isinstance(v, torch.Tensor)]
    return [v for v in value if isinstance(v, torch.Tensor)]


def _run(mod, args):
    got = interpret(mod, "main", *[np.asarray(a) for a in args])
    return [np.asarray(g) for g in (got if isinstance(got, list | tuple) else [got])]


def _check(module, args, dynamic_shapes=None, rtol=1e-4, atol=1e-5, also=()):
    """Export ``module`` on ``args``, import it, and compare the interpreter with torch on ``args``
    and on each tuple of ``also`` (other sizes within the dims' bounds)."""
    module = module.eval()
    ep = torch.export.export(module, tuple(args), dynamic_shapes=dynamic_shapes)
    mod = from_exported_program(ep)
    for inputs in (tuple(args), *also):
        with torch.no_grad():
            want = _outputs(module(*inputs))
        got = _run(mod, [t.numpy() for t in inputs])
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == tuple(w.shape)
            np.testing.assert_allclose(g, w.numpy(), rtol=rtol, atol=atol)
    return mod


def _x(*shape):
    return torch.randn(*shape)


# -- ops, by kind ---------------------------------------------------------------------------------

CASES = {
    "arithmetic": (lambda p, x, y, i: (x + y, x - 2.5, x * y, x / (y.abs() + 1), 3 - x, x ** 2, x.pow(3.0),
                                       torch.sqrt(x.abs()), torch.rsqrt(x.abs() + 1), torch.exp(x),
                                       torch.log(x.abs() + 1), i + 1, i / 2, i // 3, torch.maximum(x, y)),
                   lambda: (_x(3, 4), _x(3, 4), torch.randint(-9, 9, (3, 4)))),
    "activations": (lambda p, x: (F.relu(x), F.gelu(x), F.gelu(x, approximate="tanh"), F.silu(x), torch.sigmoid(x),
                                  torch.tanh(x), F.hardtanh(x, -0.5, 0.5), F.relu6(x * 4), F.hardswish(x * 4),
                                  F.hardsigmoid(x * 4), F.leaky_relu(x, 0.2), F.elu(x), torch.softmax(x, -1),
                                  torch.log_softmax(x, 1), torch.erf(x)),
                    lambda: (_x(2, 3, 5),)),
    "selection": (lambda p, x, y: (torch.where(x > 0, x, y), x.masked_fill(x < 0, -1.0), (x == y) | (x > 1),
                                   torch.clamp(x, -0.3, 0.4), torch.where(y < 0, 0.0, x), (x != 0) & (y <= 0.5)),
                  lambda: (_x(3, 4), _x(3, 4))),
    "reductions": (lambda p, x: (x.mean((1,), keepdim=True), x.sum(-1), x.amax(0), x.amin((0, 2)),
                                 *x.max(dim=1), x.argmax(-1), x.sum(), x.mean(), x.var(-1),
                                 x.std((0, 1), keepdim=True, correction=0)),
                   lambda: (_x(2, 3, 4),)),
    "views": (lambda p, x: (x.view(6, 4), x.reshape(-1), x.permute(2, 0, 1), x.transpose(0, 1), x[0].t(),
                            x.unsqueeze(1), x[:, :1].squeeze(1), x.flatten(1), x[:, :1].expand(2, 5, 4),
                            x.transpose(1, 2).contiguous(), x.clone(), x[:, 1:3], x[..., ::2], x[:, 0],
                            x[..., -1]),
              lambda: (_x(2, 3, 4),)),
    "joins": (lambda p, x, y, idx: (torch.cat([x, y], 1), torch.stack([y, y * 2], 0), *x.split(3, 1), *x.chunk(2, 0),
                                    torch.index_select(x, 1, idx), *y.unbind(1), torch.gather(x, 1, idx.expand(4, 2)),
                                    x[idx], x[:, idx], F.pad(x, (1, 2, 0, 1)), F.pad(x, (-1, 1), value=2.0)),
              lambda: (_x(4, 7), _x(4, 2), torch.tensor([2, 0]))),
    "made": (lambda p, x: (torch.arange(5), torch.arange(1, 10, 2, dtype=torch.float32), torch.full((2, 3), 1.5),
                           torch.zeros(3, dtype=torch.int64), torch.ones(2, 2) + x[:2, :2], x.to(torch.int32),
                           x.to(torch.float64), torch.cumsum(x, 1), F.dropout(x, 0.5, training=False)),
             lambda: (_x(3, 5),)),
    "more functions": (lambda p, x, i: (torch.sign(x), x % 0.7, torch.fmod(x, 0.7), torch.fmod(i, 3), i % -3,
                                        torch.isnan(x), torch.log2(x.abs() + 1), torch.exp2(x),
                                        torch.clamp(x, x[:, :1], None), torch.round(x, decimals=1),
                                        x.repeat(2, 1, 3), x.flip(-1), x.roll(1, 1), x.norm(dim=-1),
                                        F.normalize(x, dim=1), torch.var_mean(x, -1)[1], F.instance_norm(x)),
                       lambda: (_x(2, 3, 4), torch.randint(-20, 20, (2, 3)))),
    "ranking": (lambda p, x, i: (*x.topk(3), *x.topk(2, dim=0, largest=False), *torch.sort(x, dim=1, descending=True),
                                 torch.argsort(x, -1), *torch.sort(i, stable=True)),
                lambda: (_x(4, 7), torch.randint(0, 3, (2, 9)))),
    "linear algebra": (lambda p, x, a, b: (p["fc"](x), p["nobias"](x), torch.addmm(x[:, 0], a, b), torch.mm(a, b),
                                           torch.bmm(a[None], b[None]), x @ a.T, torch.matmul(a[None], b)),
                       lambda: (_x(5, 4), _x(5, 4), _x(4, 5)),
                       dict(fc=torch.nn.Linear(4, 3), nobias=torch.nn.Linear(4, 2, bias=False))),
    "convolution": (lambda p, x, s: (p["c"](x), p["strided"](x), p["grouped"](x), p["dilated"](x), p["c1"](s),
                                     p["up"](x), p["up_grouped"](x), p["up1"](s)),
                    lambda: (_x(2, 4, 9, 9), _x(2, 4, 11)),
                    dict(c=torch.nn.Conv2d(4, 6, 3, padding=1), strided=torch.nn.Conv2d(4, 2, 3, stride=2),
                         grouped=torch.nn.Conv2d(4, 4, 3, groups=2, bias=False),
                         dilated=torch.nn.Conv2d(4, 2, 3, dilation=2, padding=2), c1=torch.nn.Conv1d(4, 3, 3),
                         up=torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1),
                         up_grouped=torch.nn.ConvTranspose2d(4, 4, 2, stride=2, groups=2, bias=False),
                         up1=torch.nn.ConvTranspose1d(4, 3, 3, stride=3, dilation=2))),
    "resampling": (lambda p, x: (F.interpolate(x, scale_factor=2), F.interpolate(x, size=(7, 5)),
                                 F.interpolate(x, scale_factor=2, mode="bilinear"),
                                 F.interpolate(x, size=(7, 9), mode="bilinear", align_corners=True),
                                 F.interpolate(x, size=(3, 4), mode="bilinear"),
                                 F.interpolate(x, scale_factor=1.5, mode="nearest-exact")),
                   lambda: (_x(2, 3, 4, 6),)),
    "pooling and norms": (lambda p, x, t: (F.max_pool2d(x, 2), F.max_pool2d(x, 3, 2, 1, ceil_mode=True),
                                           F.avg_pool2d(x, 3, 2, 1), F.avg_pool2d(x, 2, count_include_pad=False),
                                           F.adaptive_avg_pool2d(x, 1), F.adaptive_avg_pool2d(x[..., :8, :8], 2),
                                           p["bn"](x), p["gn"](x), p["ln"](t), F.layer_norm(t, (6,)), p["emb"](
                                               torch.tensor([[1, 3], [0, 2]]))),
                          lambda: (_x(2, 4, 9, 9), _x(2, 3, 6)),
                          dict(bn=torch.nn.BatchNorm2d(4), gn=torch.nn.GroupNorm(2, 4), ln=torch.nn.LayerNorm(6),
                               emb=torch.nn.Embedding(5, 3))),
}


def _batch_norm_statistics(module):
    bn = module.parts["bn"] if "bn" in module.parts else None
    if bn is not None:
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)


@pytest.mark.parametrize("case", sorted(CASES))
def test_ops_match_torch(case):
    fn, inputs, *modules = CASES[case]
    module = Fn(fn, **(modules[0] if modules else {}))
    _batch_norm_statistics(module)
    _check(module, inputs())


def test_attention_with_masks_causality_and_grouped_heads():
    q, k, v = _x(2, 4, 5, 8), _x(2, 4, 6, 8), _x(2, 4, 6, 8)
    bool_mask = torch.rand(5, 6) > 0.4
    bool_mask[1] = False  # a row masked entirely: torch gives zeros there
    float_mask = torch.randn(2, 1, 5, 6)
    kv = _x(2, 2, 6, 8)

    def fn(p, q, k, v, bool_mask, float_mask, kv):
        return (F.scaled_dot_product_attention(q, k, v),
                F.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask),
                F.scaled_dot_product_attention(q, k, v, attn_mask=float_mask, scale=0.3),
                F.scaled_dot_product_attention(q, q, q, is_causal=True),
                F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True))

    _check(Fn(fn), (q, k, v, bool_mask, float_mask, kv), atol=1e-5)


# -- dynamic dims, weights, names -----------------------------------------------------------------


class _Tagger(torch.nn.Module):
    """Embeds tokens, adds positions, normalizes: batch and seq both dynamic, sizes computed from them."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(20, 8)
        self.pos = torch.nn.Parameter(torch.randn(16, 8))
        self.register_buffer("scale", torch.tensor(0.5))
        self.out = torch.nn.Linear(8, 3)

    def forward(self, ids):
        batch, seq = ids.shape
        h = self.emb(ids) + self.pos[:seq] * self.scale
        pairs = torch.cat([h, h[:, -1:]], 1)  # seq + 1
        return self.out(pairs).softmax(-1).flatten(0, 1)  # batch * (seq + 1)


def _tagger_program():
    batch, seq = torch.export.Dim("batch", min=1, max=4), torch.export.Dim("seq", min=2, max=12)
    module = _Tagger().eval()
    ep = torch.export.export(module, (torch.randint(0, 20, (2, 5)),), dynamic_shapes={"ids": {0: batch, 1: seq}})
    return module, ep


def test_dims_become_bounded_shape_variables_and_run_at_several_sizes():
    module, ep = _tagger_program()
    mod = from_exported_program(ep)
    main = mod["main"]
    assert [p.name_hint for p in main.params] == ["ids"]
    assert [str(d) for d in main.params[0].struct_info.shape] == ["batch", "seq"]
    assert main.attr("tir_var_lower_bound") == {"batch": 1, "seq": 2}
    assert main.attr("tir_var_upper_bound") == {"batch": 4, "seq": 12}
    for batch, seq in ((1, 2), (3, 7), (4, 12)):
        ids = torch.randint(0, 20, (batch, seq))
        [got] = _run(mod, [ids.numpy()])
        assert got.shape == (batch * (seq + 1), 3)
        np.testing.assert_allclose(got, module(ids).detach().numpy(), rtol=1e-4, atol=1e-6)
    weights = _weight_names(mod)
    assert {"emb.weight", "pos", "scale", "out.weight", "out.bias"} <= weights


def _weight_names(mod) -> set[str]:
    from tessera.ir.expr import Constant

    names = set()

    def visit(value):
        if isinstance(value, Constant) and value.name:
            names.add(value.name)
        for field in getattr(value, "__dataclass_fields__", {}):
            child = getattr(value, field)
            for item in child if isinstance(child, tuple) else (child,):
                if hasattr(item, "__dataclass_fields__"):
                    visit(item)

    visit(mod["main"].body)
    return names


def test_ops_that_need_static_sizes_take_a_dynamic_batch():
    """Pooling's ceil mode, adaptive pooling, upsampling, flips and a bias-free layer norm need only
    the axes they work on to be static: the batch may be a shape variable."""
    def fn(p, x):
        pooled = F.adaptive_avg_pool2d(F.max_pool2d(x, 3, 2, 1, ceil_mode=True), 2)
        upsampled = F.interpolate(pooled, scale_factor=2, mode="bilinear").flip(-1)
        return p["ln"](upsampled.flatten(1)), F.interpolate(x, size=(5, 3))

    module = Fn(fn, ln=torch.nn.LayerNorm(48, bias=False))
    batch = torch.export.Dim("batch", min=1, max=6)
    _check(module, (_x(2, 3, 8, 8),), dynamic_shapes=(({0: batch},),), also=[(_x(5, 3, 8, 8),), (_x(1, 3, 8, 8),)])


def test_tied_weights_are_one_constant():
    module = Fn(lambda p, ids: p["head"](p["emb"](ids)), emb=torch.nn.Embedding(10, 4),
                head=torch.nn.Linear(4, 10, bias=False))
    module.parts["head"].weight = module.parts["emb"].weight
    mod = _check(module, (torch.tensor([[1, 2, 3]]),))
    assert _weight_names(mod) == {"parts.emb.weight"}


def test_dims_narrow_the_exported_range_and_nothing_else():
    _, ep = _tagger_program()
    mod = from_exported_program(ep, dims={"batch": (1, 2)})
    assert mod["main"].attr("tir_var_upper_bound") == {"batch": 2, "seq": 12}
    with pytest.raises(TorchImportError, match="outside the range torch exported"):
        from_exported_program(ep, dims={"seq": (2, 100)})
    with pytest.raises(TorchImportError, match="no shape variable.*batch, seq"):
        from_exported_program(ep, dims={"length": (1, 2)})


def test_a_derived_dim_gets_a_variable_and_its_symbol_the_inverse():
    """x's length is 2*n: it gets a variable of its own, and n (the pairs' count) is length // 2."""
    module = Fn(lambda p, x: x.view(x.shape[0], -1, 2).sum(-1) * x.shape[1]).eval()
    half = torch.export.Dim("half", min=2, max=16)
    ep = torch.export.export(module, (_x(2, 8),), dynamic_shapes=(({1: 2 * half},),))
    mod = from_exported_program(ep)
    assert mod["main"].attr("tir_var_lower_bound") == {"args_0_dim1": 4}
    assert mod["main"].attr("tir_var_upper_bound") == {"args_0_dim1": 32}
    for length in (4, 10, 32):
        x = _x(2, length)
        [got] = _run(mod, [x.numpy()])
        np.testing.assert_allclose(got, module(x).numpy(), rtol=1e-5)


def test_a_pt2_file_loads_by_path(tmp_path):
    module, ep = _tagger_program()
    path = tmp_path / "tagger.pt2"
    torch.export.save(ep, str(path))
    mod = from_exported_program(str(path))
    ids = torch.randint(0, 20, (2, 9))
    [got] = _run(mod, [ids.numpy()])
    np.testing.assert_allclose(got, module(ids).detach().numpy(), rtol=1e-4, atol=1e-6)
    # torch.export.load forgets the Dims' names: the variables are named after the input's axes.
    assert mod["main"].attr("tir_var_upper_bound") == {"ids_dim0": 4, "ids_dim1": 12}
    (tmp_path / "junk.pt2").write_bytes(b"not a zip")
    with pytest.raises(TorchImportError, match="is not a program torch.export.save wrote") as error:
        from_exported_program(str(tmp_path / "junk.pt2"))
    assert error.value.kind == "invalid"
    with pytest.raises(TorchImportError, match="no such file"):
        from_exported_program(str(tmp_path / "missing.pt2"))


@pytest.mark.parametrize("kind", ["cpu", "wasm"])
def test_compiled_executables_match_torch_and_refuse_sizes_outside_the_bounds(tmp_path, kind):
    module, ep = _tagger_program()
    folder = tmp_path / kind
    tessera.build(from_exported_program(ep), kind).save(str(folder))
    session = tessera.InferenceSession(folder, device=kind)
    [ids_arg] = session.get_inputs()
    assert (ids_arg.name, ids_arg.shape) == ("ids", ["batch", "seq"])
    for batch, seq in ((1, 3), (4, 12)):
        ids = torch.randint(0, 20, (batch, seq))
        [got] = session.run(None, {"ids": ids.numpy()})
        np.testing.assert_allclose(got, module(ids).detach().numpy(), rtol=1e-4, atol=1e-6)
    with pytest.raises(TesseraError, match="ids"):
        session.run(None, {"ids": np.zeros((5, 3), np.int64)})
    with pytest.raises(TesseraError, match="ids"):
        session.run(None, {"ids": np.zeros((2, 13), np.int64)})


def test_a_cnn_compiled_for_cpu_matches_torch(tmp_path):
    module = Fn(lambda p, x: F.adaptive_avg_pool2d(F.relu(p["bn"](p["c"](x))), 1).flatten(1),
                c=torch.nn.Conv2d(3, 8, 3, stride=2, padding=1), bn=torch.nn.BatchNorm2d(8)).eval()
    _batch_norm_statistics(module)
    x = _x(1, 3, 16, 16)
    tessera.build(from_exported_program(torch.export.export(module, (x,))), "cpu").save(str(tmp_path / "cnn"))
    [got] = tessera.InferenceSession(tmp_path / "cnn", device="cpu").run(None, {"args_0": x.numpy()})
    np.testing.assert_allclose(got, module(x).detach().numpy(), rtol=1e-4, atol=1e-5)


# -- real architectures ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bert():
    """A small BERT from transformers (random weights), exported with dynamic batch and seq: (model, module)."""
    import transformers

    config = transformers.BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=32)
    model = transformers.BertModel(config).eval()
    batch, seq = torch.export.Dim("batch", min=1, max=4), torch.export.Dim("seq", min=2, max=24)
    ids, mask = torch.randint(0, 60, (2, 7)), torch.ones(2, 7, dtype=torch.int64)
    ep = torch.export.export(model, (), {"input_ids": ids, "attention_mask": mask},
                             dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}})
    return model, from_exported_program(ep)


def _bert_feeds(model, batch: int, seq: int):
    ids, mask = torch.randint(0, 60, (batch, seq)), torch.ones(batch, seq, dtype=torch.int64)
    mask[-1, seq // 2:] = 0  # padding on the last row
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask)
    return {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}, [want.last_hidden_state, want.pooler_output]


def test_bert_from_transformers_matches_torch_at_two_sizes(bert):
    model, mod = bert
    assert mod["main"].attr("output_names") == ["last_hidden_state", "pooler_output"]
    for batch, seq in ((2, 7), (3, 19)):
        feeds, want = _bert_feeds(model, batch, seq)
        for got, expected in zip(_run(mod, list(feeds.values())), want):
            np.testing.assert_allclose(got, expected.numpy(), rtol=1e-3, atol=1e-4)


def test_bert_compiled_for_wasm_serves_several_sizes(bert, tmp_path):
    model, mod = bert
    tessera.build(mod, "wasm").save(str(tmp_path / "bert"))
    session = tessera.InferenceSession(tmp_path / "bert", device="wasm")
    assert [(o.name, o.shape) for o in session.get_outputs()] == [
        ("last_hidden_state", ["batch", "seq", 32]), ("pooler_output", ["batch", 32])]
    for batch, seq in ((1, 5), (4, 24)):
        feeds, want = _bert_feeds(model, batch, seq)
        for got, expected in zip(session.run(None, feeds), want):
            np.testing.assert_allclose(got, expected.numpy(), rtol=1e-3, atol=1e-4)


def test_resnet_from_transformers_matches_torch():
    import transformers

    config = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                       layer_type="bottleneck", num_labels=5)
    model = transformers.ResNetForImageClassification(config).eval()
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 1.5)
    x = _x(2, 3, 32, 32)
    mod = from_exported_program(torch.export.export(model, (x,)))
    [logits] = _run(mod, [x.numpy()])
    with torch.no_grad():
        want = model(x).logits
    np.testing.assert_allclose(logits, want.numpy(), rtol=1e-3, atol=1e-4)


# -- refusals -------------------------------------------------------------------------------------


def test_an_unsupported_op_is_one_error_naming_it_and_the_node():
    ep = torch.export.export(Fn(lambda p, x: torch.erfinv(x) + 1).eval(), (_x(3, 4),))
    with pytest.raises(TorchImportError) as error:
        from_exported_program(ep)
    assert "aten.erfinv" in str(error.value) and "node 'erfinv'" in str(error.value)
    assert error.value.kind == "unsupported"
    assert error.value.__cause__ is None and error.value.__context__ is None  # no chained traceback


def test_refusals_name_what_is_wrong():
    with pytest.raises(TorchImportError, match="takes a torch.export.ExportedProgram"):
        from_exported_program(object())
    train = Fn(lambda p, x: p["bn"](x), bn=torch.nn.BatchNorm1d(3)).train()
    with pytest.raises(TorchImportError, match="eval mode"):
        from_exported_program(torch.export.export(train, (_x(4, 3),)))
    with pytest.raises(TorchImportError, match=r"node 'atan' \(aten.atan.default\): the op is not supported"):
        from_exported_program(torch.export.export(Fn(lambda p, x: torch.atan(x)), (_x(3, 5),)))
    with pytest.raises(TorchImportError, match="cumsum along a symbolic dimension"):
        n = torch.export.Dim("n", min=2, max=9)
        from_exported_program(torch.export.export(Fn(lambda p, x: x.cumsum(0)), (_x(4),), dynamic_shapes=(({0: n},),)))
