"""plan_memory: storage reuse by lifetime with symbolic sizes; one arena with upper bounds."""

import pytest
from llama_layer import build_layer
from tessera import op
from tessera.ir import BlockBuilder, MemoryPlanError, Tensor, Var
from tessera.target import Target
from tessera.transform import fuse_ops, fuse_tir, legalize_ops
from tessera.transform.plan_memory import plan_function, plan_memory

TARGET = Target.preset("llvmpipe")


def figure_10(upper_bound=None):
    """The Relax paper's Figure 10: four intermediates of a chain over (n, 4)."""
    x = Var("x", Tensor(("n", 4), "float32"))
    n = x.struct_info.shape[0]
    bb = BlockBuilder()
    attrs = {"tir_var_upper_bound": {"n": upper_bound}} if upper_bound else None
    with bb.function("main", [x], attrs=attrs):
        with bb.dataflow():
            lv0 = bb.emit(op.exp(x), "lv0")                  # (n, 4)
            lv1 = bb.emit(op.flatten(lv0), "lv1")            # (n * 4,)
            lv2 = bb.emit(op.exp(lv1), "lv2")                # (n * 4,)
            lv3 = bb.emit(op.reshape(lv2, [n, 4]), "lv3")    # (n, 4)
            gv = bb.emit_output(op.exp(lv3), "gv")
        bb.emit_func_output(gv)
    return legalize_ops(bb.get(), TARGET)


def test_figure_10_four_intermediates_share_two_storages_with_symbolic_n():
    plan = plan_function(figure_10()["main"])
    intermediates = {name: plan.tensor_token[name] for name in ("lv0", "lv1", "lv2", "lv3")}
    assert intermediates["lv0"] == intermediates["lv2"]
    assert intermediates["lv1"] == intermediates["lv3"]
    assert len(set(intermediates.values())) == 2
    assert str(plan.tokens[intermediates["lv0"]].size) == "n * 16"
    assert plan.arena_bytes == 0 and not plan.static  # no upper bound: every storage is allocated at run time


def test_with_an_upper_bound_the_function_runs_from_one_arena():
    plan = plan_function(figure_10(upper_bound=2048)["main"])
    assert plan.static
    # At most two tensors are alive at once; the result reuses a freed storage.
    assert plan.arena_bytes == 2 * 2048 * 16
    assert plan.liveness_lower_bound == 2 * 2048 * 16
    assert all(t.offset % 256 == 0 for t in plan.tokens)


def test_arena_is_split_into_buffers_no_larger_than_max_buffer_size():
    plan = plan_function(figure_10(upper_bound=2048)["main"], max_buffer_size=2048 * 16 + 256)
    assert plan.buffers == [2048 * 16, 2048 * 16]
    for token in plan.tokens:
        assert token.offset + token.static_size <= plan.buffers[token.buffer]


def test_a_tensor_larger_than_any_buffer_is_named_with_its_size_and_the_limit():
    with pytest.raises(MemoryPlanError, match=r"function main: tensor lv\d: float32\[n, 4\] needs 131072 bytes "
                       r"\(0 MiB\) at its sizes' upper bounds, more than the target's maxBufferSize 65536") as error:
        plan_memory(figure_10(upper_bound=8192), max_buffer_size=65536)
    assert (error.value.size, error.value.limit) == (131072, 65536)


def test_llama_layer_arena_is_close_to_the_liveness_lower_bound():
    mod = build_layer(upper_bound=2048)
    lowered = legalize_ops(fuse_tir(fuse_ops(mod, TARGET), TARGET), TARGET)
    plan = plan_function(lowered["layer"])
    assert plan.static
    assert plan.arena_bytes <= 1.10 * plan.liveness_lower_bound, (plan.arena_bytes, plan.liveness_lower_bound)


@pytest.mark.parametrize("context", [1024, 8192])
def test_smollm2_webgpu_arenas_are_within_five_percent_of_the_liveness_lower_bound(context):
    """Issue 16: SmolLM2 for webgpu with the default prefill chunk (1024 at context 1024, 2048 at
    8192); the plan only, without kernels. The greedy layout reaches the bound exactly today."""
    from tessera import nn
    from tessera.app.compile import default_prefill_chunk
    from tessera.frontend import bundled_smollm2_path, load_gguf
    from tessera.models import export_llm, model_from_gguf
    from tessera.transform.pipeline import Pipeline

    target = Target.preset("webgpu")
    model, weights = model_from_gguf(load_gguf(bundled_smollm2_path()))
    chunk = default_prefill_chunk(model.config, context, target)
    mod = nn.bind_weights(export_llm(model, context, target.quantized_activations, chunk), weights)
    lowered = Pipeline.default(target)(mod)
    for name in ("prefill", "decode"):
        plan = lowered[name].attr("memory_plan")
        assert plan["static"] and len(plan["buffers"]) == 1, name
        assert plan["arena_bytes"] <= 1.05 * plan["liveness_lower_bound_bytes"], (name, plan["arena_bytes"],
                                                                                  plan["liveness_lower_bound_bytes"])
    assert lowered["prefill"].attr("memory_plan")["arena_bytes"] < 64 * 10 ** 6
