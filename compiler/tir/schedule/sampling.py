"""sample-token rule: the kernel of ``R.sample_token`` (tessera.op.sampling states the semantics).

The kernel runs in one workgroup: each thread owns a contiguous chunk of the vocabulary. The
thresholds are found without sorting, bit by bit on the weights' IEEE bits (for non-negative
floats the bits order like the values): 32 counting passes for top-k and 32 summing passes for
top-p, each an exact answer. ``greedy=True`` builds a kernel that stops after the arg-max.
"""

from __future__ import annotations

from ... import arith
from ..compute import OpaqueDef
from ..ir import (
    Assign,
    Barrier,
    Buffer,
    Builtin,
    Const,
    Declare,
    For,
    IfThen,
    Load,
    Local,
    PrimFunc,
    Select,
    Store,
    Unary,
    binary,
    cast,
    from_prim,
    intrinsic,
    logical_and,
    maximum,
    minimum,
)
from .common import scalars_of
from .reduction import tree_combine


def schedule_sample_token(defn: OpaqueDef, target, name: str) -> PrimFunc:
    logits, history, params = defn.inputs
    greedy = bool(defn.params["greedy"])
    vocab = arith.Analyzer().as_int(logits.size)  # static: the operator's legalization checks it
    threads = min(256, target.limit("maxComputeInvocationsPerWorkgroup"))
    chunk = -(-vocab // threads)
    out = defn.output
    # Penalized logits, then weights, in device memory: a kernel scratch output.
    work = Buffer("work", "f32", (arith.IntImm(vocab),), storage_dtype="float32")
    red = Buffer("red", "f32", (arith.IntImm(threads),), "workgroup")
    red_index = Buffer("red_index", "i32", (arith.IntImm(threads),), "workgroup")
    lid = Builtin("local_id", 0)
    i, j, bit = Local("i"), Local("j"), Local("bit")
    lo, hi = Local("lo"), Local("hi")
    # The operator names the five values of ``params`` in their order (tessera.op.sampling.PARAMS).
    temperature, top_k, top_p, penalty, uniform = (Local(n, "f32") for n in defn.params["param_names"])

    def over_chunk(*body):
        return For(i, lo, hi, tuple(body))

    def penalized(v):
        return Select(binary(">", v, Const(0.0, "f32")), binary("/", v, penalty), binary("*", v, penalty), "f32")

    t = Local("t")
    body = [Declare(lo, binary("*", lid, Const(chunk))), Declare(hi, minimum(binary("+", lo, Const(chunk)),
                                                                               Const(vocab)))]
    body += [Declare(local, Load(params, Const(index))) for index, local in
             enumerate((temperature, top_k, top_p, penalty, uniform))]
    body += [over_chunk(Store(work, i, Load(logits, i))), Barrier("storage"),
             # Repeated ids write the same value: each reads the unpenalized logit.
             For(j, lid, from_prim(history.shape[0]), (
                 Declare(t, Load(history, j)),
                 IfThen(logical_and(binary(">=", t, Const(0)), binary("<", t, Const(vocab))),
                        (Store(work, t, penalized(Load(logits, t))),))), step=threads),
             Barrier("storage")]
    best, best_index = Local("best", "f32"), Local("best_index")
    body += [Declare(best, Const(float("-inf"), "f32")), Declare(best_index, Const(2**31 - 1)),
             over_chunk(IfThen(binary(">", Load(work, i), best), (Assign(best, Load(work, i)), Assign(best_index, i)))),
             Store(red, lid, best), Store(red_index, lid, best_index), *tree_combine(red, threads, "argmax", red_index),
             Assign(best, Load(red, Const(0))), Assign(best_index, Load(red_index, Const(0)))]
    if greedy:
        body.append(IfThen(binary("==", lid, Const(0)), (Store(out, Const(0), best_index),)))
        return _kernel(name, logits, history, params, out, work, body, threads, (red, red_index))
    body += _sampling_passes(work, red, red_index, out, threads, vocab, over_chunk, i, lid, bit,
                             (temperature, top_k, top_p, uniform), best, best_index)
    return _kernel(name, logits, history, params, out, work, body, threads, (red, red_index))


def _sampling_passes(work, red, red_index, out, threads, vocab, over_chunk, i, lid, bit, knobs, best, best_index):
    temperature, top_k, top_p, uniform = knobs
    f32 = "f32"
    zero = Const(0.0, f32)
    scale = Local("scale", f32)
    prefix, candidate = Local("prefix", "u32"), Local("candidate", "u32")
    k, count, mass, goal = Local("k"), Local("count"), Local("mass", f32), Local("goal", f32)

    def key_of(value):
        return Unary("bitcast_u32", value, "u32")

    def reduce(partial: Local, shared: Buffer, result: Local):
        """Sum ``partial`` over the workgroup into ``result`` (every thread gets it)."""
        return [Barrier(), Store(shared, lid, partial), *tree_combine(shared, threads, "sum"),
                Assign(result, Load(shared, Const(0)))]

    def partial_over_chunk(partial: Local, contribution):
        """partial = sum over the chunk of ``contribution`` (for weights whose key >= candidate)."""
        return [Assign(partial, Const(0, partial.dtype) if partial.dtype == "i32" else zero),
                over_chunk(IfThen(binary(">=", key_of(Load(work, i)), candidate),
                                  (Assign(partial, binary("+", partial, contribution)),)))]

    def bit_search(accept):
        """The largest key K with ``accept`` true for the set {key >= K}, decided bit by bit."""
        return [Assign(prefix, Const(0, "u32")),
                For(bit, Const(0), Const(32), (
                    Assign(candidate, binary("|", prefix, binary("<<", Const(1, "u32"),
                                                                 cast(binary("-", Const(31), bit), "u32")))),
                    *accept,
                ))]

    total_count, total_mass = Local("total_count"), Local("total_mass", f32)
    weight = Load(work, i)
    stmts = [Declare(scale, Select(binary(">", temperature, zero), binary("/", Const(1.0, f32), temperature),
                                   Const(1.0, f32), f32)),
             # Each thread rewrites only its own chunk, and reads only it from here on.
             over_chunk(Store(work, i, intrinsic("exp", binary("*", binary("-", Load(work, i), best), scale)))),
             Declare(k, cast(top_k, "i32")),
             Assign(k, Select(logical_and(binary(">", k, Const(0)), binary("<", k, Const(vocab))), k,
                              Const(vocab), "i32")),
             Declare(prefix, Const(0, "u32")), Declare(candidate, Const(0, "u32")),
             Declare(count, Const(0)), Declare(total_count, Const(0)),
             Declare(mass, zero), Declare(total_mass, zero), Declare(goal, zero)]
    # top-k: the k-th largest weight's key.
    stmts += bit_search([*partial_over_chunk(count, Const(1)), *reduce(count, red_index, total_count),
                         IfThen(binary(">=", total_count, k), (Assign(prefix, candidate),))])
    # top-p: the goal is a share of the top-k mass.
    stmts += [Assign(candidate, prefix), *partial_over_chunk(mass, weight), *reduce(mass, red, total_mass),
              Assign(goal, Select(binary("<", top_p, Const(1.0, f32)), binary("*", top_p, total_mass), total_mass,
                                  f32))]
    stmts += bit_search([*partial_over_chunk(mass, weight), *reduce(mass, red, total_mass),
                         IfThen(binary(">=", total_mass, goal), (Assign(prefix, candidate),))])
    # The draw: prefix sums of the chunks' kept mass (thread 0, serially), then the chunk holding
    # the target finds the id. Thread 0 first writes the arg-max, which stands when rounding puts
    # the target past the last kept weight, and when the temperature is 0.
    start, end, target, running = (Local(n, f32) for n in ("start", "end", "target", "running"))
    found, index = Local("found", "bool"), Local("c")
    stmts += [Assign(candidate, prefix), *partial_over_chunk(mass, weight), Barrier(), Store(red, lid, mass),
              Barrier(),
              IfThen(binary("==", lid, Const(0)), (
                  For(index, Const(1), Const(threads), (
                      Store(red, index, binary("+", Load(red, binary("-", index, Const(1))), Load(red, index))),)),
                  Store(out, Const(0), best_index))),
              Barrier(), Barrier("storage"),
              Declare(end, Load(red, lid)),
              Declare(start, Select(binary("==", lid, Const(0)), zero,
                                    Load(red, maximum(binary("-", lid, Const(1)), Const(0))), f32)),
              # Within the chunk the running sum starts at 0, in the order `mass` was summed.
              Declare(target, binary("-", binary("*", uniform, Load(red, Const(threads - 1))), start)),
              Declare(running, zero), Declare(found, Const(False, "bool"))]
    in_my_chunk = logical_and(binary(">=", target, zero), binary("<", target, binary("-", end, start)))
    take = logical_and(binary(">=", key_of(weight), prefix), Unary("not", found, "bool"))
    stmts.append(IfThen(logical_and(binary(">", temperature, zero), in_my_chunk), (
        over_chunk(IfThen(take, (
            Assign(running, binary("+", running, weight)),
            IfThen(binary(">", running, target), (Store(out, Const(0), i), Assign(found, Const(True, "bool")))),
        ))),
    )))
    return stmts


def _kernel(name, logits, history, params, out, work, body, threads, shared):
    return PrimFunc(name, (logits, history, params), (out, work), scalars_of(logits, history, params),
                    tuple(body), (threads, 1, 1), (arith.IntImm(1), arith.IntImm(1), arith.IntImm(1)),
                    scratch=shared, attrs={"rule": "sample-token", "scratch_outputs": 1})
