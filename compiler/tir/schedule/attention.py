"""attention rules: causal attention in one kernel, keys walked in tiles with an online softmax.

tessera.op.attention states the operator. One workgroup takes one KV head, ``positions`` query
positions and one share (split) of the keys; its rows are those positions times the ``group``
query heads that read the KV head, so each key and value row is read once for all of them. Per
row it keeps the running maximum m, the running sum l of exp(score - m) and the unnormalized
output; each tile of keys rescales them once (by exp(m_old - m_new)). No score outlives its tile.

The causal bound and the sequence offset are inside the kernel: row i (position total - n + i)
reads keys below min(share end, total - n + i + 1), and the tile loop stops at the workgroup's
last position. A kernel with one share writes out / l; with several it writes the share's output,
m and l for ``attention-merge``.

Three shapes of the same loop nest:
- GPUs (threads that run together): the workgroup stages its rows of q, then each tile of K and
  of V, in workgroup memory; scores are spread over the threads, each row's statistics taken by
  one thread, and the output elements spread over the threads again.
- C and WASM kernels (``serial_threads``, ``cpu_adapter``): one thread per workgroup walks the
  rows in plain loops whose inner loops run along the head size, which the C compiler vectorizes
  (the dot products in ``DOT_LANES`` independent lanes, so no reassociation is needed).
- GPU languages on a CPU (``cpu_adapter``: llvmpipe, lavapipe, PoCL, SwiftShader): one query
  position and the query heads of one KV head per invocation (each key loaded once for all of
  them), eight invocations a workgroup, which the driver runs as the lanes of its SIMD registers;
  q and the output in registers, keys walked eight at a time (``_lanes``).
  On llvmpipe (1,024 queries over 1,024 keys, 9 query and 3 KV heads of 64) it takes 0.35 s
  where the GPU shape, whose barriers and workgroup memory llvmpipe emulates, takes 3.5 s, and
  1.7 ms against 9.4 ms for one query (bench/attention.py). (The one-thread shape is no faster
  there: its arrays are indexed at run time, which llvmpipe keeps in memory, and it overruns the
  loop budget below.)

Mesa's CPU drivers stop all of an invocation's loops, silently, once it has run 65,535 loop
iterations in all (``Target.loop_budget``): the lanes shape runs one per eight keys of its share,
within the budget up to half a million keys, and refuses a longer cache by name.
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
    Store,
    TExpr,
    binary,
    cast,
    from_prim,
    intrinsic,
    maximum,
    minimum,
    select,
)
from .common import ceil_div, global_thread_id, grid_for, scalars_of
from .kv_cache import pool_row

F32 = "f32"
# A float32 far below any score, never -inf: exp(NEG - m) is 0 and NEG - NEG is not NaN (the
# operator's reference, tessera.op.attention, uses the same).
NEG = -3.0e38
LID = Builtin("local_id", 0)
DOT_LANES = 8
LANE_ROWS = 8  # query rows per workgroup of the lanes rule: llvmpipe's SIMD lanes in 256-bit registers
LANE_KEYS = 8  # keys per step of the lanes rule's loop
LANE_VALUES = 256  # at most this many values of q (and as many of the output) an invocation of the lanes rule
GPU_THREADS = 128
GPU_ROWS = 16  # query rows (positions x group) per GPU workgroup, at most


def _f(value: float) -> Const:
    return Const(float(value), F32)


class _Layout:
    """The kernel's sizes and the index math every flavor shares."""

    def __init__(self, defn: OpaqueDef, positions: int, tile: int):
        self.q, self.keys, self.values = defn.inputs[:3]
        # nn.paged_attention (op/paged.py): each row's position and its sequence's pages.
        self.page_size = defn.params.get("page_size")
        self.paged_inputs = defn.inputs[3:5] if self.page_size else ()
        self.out = defn.output
        analyzer = arith.Analyzer()
        self.heads, self.d = analyzer.as_int(self.q.shape[1]), analyzer.as_int(self.q.shape[2])
        self.kv_heads = analyzer.as_int(self.keys.shape[1])
        self.group = self.heads // self.kv_heads
        self.splits = int(defn.params["splits"])
        self.scale = float(defn.params["scale"])
        self.total = defn.params["total"]
        self.positions, self.tile = positions, tile
        self.rows = positions * self.group
        self.n, self.capacity = from_prim(self.q.shape[0]), from_prim(self.keys.shape[0])
        self.capacity_dim = self.keys.shape[0]

    def grid(self) -> tuple:
        tiles = ceil_div(self.q.shape[0], self.positions)
        return (arith.IntImm(self.kv_heads), arith.simplify(tiles * self.splits), arith.IntImm(1))

    def scalars(self) -> tuple[str, ...]:
        names = scalars_of(self.q, self.keys, self.values, self.out, *self.paged_inputs)
        if self.total is None:
            return names
        return tuple(dict.fromkeys(names + tuple(v.name for v in arith.free_vars(self.total))))

    def row_total(self, i: TExpr) -> TExpr:
        """Paged: the keys query row ``i`` sees, its own among them (position + 1)."""
        return binary("+", maximum(Load(self.paged_inputs[0], i), Const(0)), Const(1))

    def sequence(self, i: TExpr) -> TExpr:
        """Paged: the page-table row of query row ``i`` (min(i, s - 1): one sequence, or one per row)."""
        return minimum(i, binary("-", from_prim(self.paged_inputs[1].shape[0]), Const(1)))

    def prologue(self) -> tuple[list, dict]:
        """The workgroup's KV head, first position, share of the keys and the stop of its tile loop."""
        kvh, tile, share, first = Local("kvh"), Local("tile"), Local("share"), Local("first")
        total, start, lo, hi, stop = Local("total"), Local("start"), Local("lo"), Local("hi"), Local("stop")
        wy = Builtin("workgroup_id", 1)
        chunk = binary("/", binary("+", total, Const(self.splits - 1)), Const(self.splits))
        stmts = [Declare(kvh, Builtin("workgroup_id", 0)),
                 Declare(tile, binary("/", wy, Const(self.splits))),
                 Declare(share, binary("%", wy, Const(self.splits))),
                 Declare(first, binary("*", tile, Const(self.positions))),
                 *self._sequence_bounds(first, total, start),
                 Declare(lo, binary("*", share, chunk)),
                 Declare(hi, minimum(binary("+", lo, chunk), total)),
                 # No row of this workgroup reads past its last position.
                 Declare(stop, minimum(hi, binary("+", start, minimum(binary("+", first, Const(self.positions)),
                                                                       self.n))))]
        names = {"kvh": kvh, "share": share, "first": first, "total": total, "start": start, "lo": lo, "hi": hi,
                 "stop": stop}
        if self.page_size:
            names["seq"] = Local("seq")
            stmts.insert(4, Declare(names["seq"], self.sequence(first)))  # after ``first``
        return stmts, names

    def _sequence_bounds(self, first: Local, total: Local, start: Local) -> list:
        """``total`` (keys the workgroup's sequence holds, as far as its rows read) and ``start`` (the
        position of query row 0). Unpaged: the op's total, and total - n. Paged: from the position
        of the workgroup's first row; its rows are consecutive positions of one sequence (a prefill
        chunk, one page-table row) or a single row (a decode batch: see ``positions_per_workgroup``)."""
        if not self.page_size:
            return [Declare(total, from_prim(self.total)), Declare(start, binary("-", total, self.n))]
        return [Declare(start, binary("-", binary("-", self.row_total(first), Const(1)), first)),
                Declare(total, binary("+", start, minimum(binary("+", first, Const(self.positions)), self.n)))]

    def row_position(self, v: dict, row: TExpr) -> TExpr:
        """The query index (0 .. n - 1 when in range) of a row."""
        return binary("+", v["first"], binary("/", row, Const(self.group)))

    def head(self, v: dict, row: TExpr) -> TExpr:
        return binary("+", binary("*", v["kvh"], Const(self.group)), binary("%", row, Const(self.group)))

    def limit(self, v: dict, row: TExpr) -> TExpr:
        """Keys below this are the row's: its share, up to and including its own position."""
        return minimum(v["hi"], binary("+", binary("+", v["start"], self.row_position(v, row)), Const(1)))

    def q_at(self, v: dict, row: TExpr, dd: TExpr) -> TExpr:
        i = minimum(self.row_position(v, row), binary("-", self.n, Const(1)))
        index = binary("+", binary("*", binary("+", binary("*", i, Const(self.heads)), self.head(v, row)),
                                   Const(self.d)), dd)
        return binary("*", cast(Load(self.q, index), F32), _f(self.scale))

    def kv_row(self, v: dict, key: TExpr) -> TExpr:
        """The flat index of element 0 of ``key``'s row for this KV head. A tile's keys past the
        sequence read its last row instead: rows past ``total`` are never read, whatever they hold
        (a weight of 0 times a NaN would still be NaN)."""
        last = minimum(binary("-", v["total"], Const(1)), binary("-", self.capacity, Const(1)))
        row = maximum(minimum(key, last), Const(0))
        if self.page_size:  # the position's row in the pool, through the sequence's page table
            row = pool_row(self.paged_inputs[1], v["seq"], row, self.page_size, self.keys)
        return binary("*", binary("+", binary("*", row, Const(self.kv_heads)), v["kvh"]), Const(self.d))

    def write(self, v: dict, row: TExpr, dd: TExpr, acc: TExpr, top: TExpr, mass: TExpr) -> list:
        """Store one output element of a row (and, for a share, the row's m and l with element 0)."""
        i = Local("i_out")
        h = self.head(v, row)
        stmts: list = []
        if self.splits == 1:
            index = binary("+", binary("*", binary("+", binary("*", i, Const(self.heads)), h), Const(self.d)), dd)
            stmts.append(Store(self.out, index, cast(binary("/", acc, mass), self.out.dtype)))
        else:
            width = self.d + 2
            rows = binary("+", binary("*", binary("+", binary("*", v["share"], self.n), i), Const(self.heads)), h)
            base = binary("*", rows, Const(width))
            stmts.append(Store(self.out, binary("+", base, dd), acc))
            statistics = (Store(self.out, binary("+", base, Const(self.d)), top),
                          Store(self.out, binary("+", base, Const(self.d + 1)), mass))
            stmts.append(IfThen(binary("==", dd, Const(0)), statistics))
        return [Declare(i, self.row_position(v, row)), IfThen(binary("<", i, self.n), tuple(stmts))]


def schedule_attention(defn: OpaqueDef, target, name: str) -> PrimFunc:
    if target.cpu_adapter and target.serial_threads:
        return _serial(defn, target, name)
    # Keys of a length known only at run time (attention over the prompt itself, no cache) cannot be
    # held to a loop budget by the lanes rule; the GPU rule's invocations loop over tiles of them.
    unbounded = arith.Analyzer().as_int(defn.inputs[1].shape[0]) is None
    if target.cpu_adapter and not (target.loop_budget and unbounded):
        return _lanes(defn, target, name)
    return _workgroup(defn, target, name)


def positions_per_workgroup(defn: OpaqueDef, wanted: int) -> int:
    """``wanted`` query positions a workgroup, or one where its rows could be several sequences' (a
    paged decode batch, whose page table has a row per query row) or there is one position."""
    analyzer = arith.Analyzer()
    if analyzer.as_int(defn.inputs[0].shape[0]) == 1:
        return 1
    if defn.params.get("page_size") and analyzer.as_int(defn.inputs[4].shape[0]) != 1:
        return 1
    return max(1, wanted)


def lanes_loop_iterations(keys: int) -> int:
    """At most how many loop iterations one invocation of the lanes rule runs over a share of ``keys``
    keys, all loops together, as Mesa counts them (each entry into a loop counts one more): its
    other loops are unrolled. What a loop budget (Target.loop_budget) bounds."""
    return -(-keys // LANE_KEYS) + 1


def _serial(defn: OpaqueDef, target, name: str) -> PrimFunc:
    """One thread per workgroup, in loops (see the module's docstring)."""
    lay = _Layout(defn, positions=positions_per_workgroup(defn, 4), tile=64)
    d, rows, tile = lay.d, lay.rows, lay.tile
    lanes = DOT_LANES if d % DOT_LANES == 0 else 1
    qs = Buffer("qs", F32, (arith.IntImm(rows * d),), "private")
    acc = Buffer("acc", F32, (arith.IntImm(rows * d),), "private")
    m_row = Buffer("m_row", F32, (arith.IntImm(rows),), "private")
    l_row = Buffer("l_row", F32, (arith.IntImm(rows),), "private")
    scores = Buffer("scores", F32, (arith.IntImm(tile),), "private")
    part = Buffer("part", F32, (arith.IntImm(lanes),), "private")
    stmts, v = lay.prologue()
    r, dd, j0, jj, d0, lane = Local("r"), Local("dd"), Local("j0"), Local("jj"), Local("d0"), Local("lane")
    at = binary("+", binary("*", r, Const(d)), dd)
    stmts.append(For(r, Const(0), Const(rows), (
        For(dd, Const(0), Const(d), (Store(qs, at, lay.q_at(v, r, dd)), Store(acc, at, _f(0)))),
        Store(m_row, r, _f(NEG)), Store(l_row, r, _f(0)))))

    count, limit, key, base, dot, top = (Local("count"), Local("limit"), Local("key"), Local("base"),
                                         Local("dot", F32), Local("top", F32))
    m_new, alpha, total_p, p = Local("m_new", F32), Local("alpha", F32), Local("sum_p", F32), Local("p", F32)
    lane_at = binary("+", binary("*", d0, Const(lanes)), lane)
    dot_loop = [For(lane, Const(0), Const(lanes), (Store(part, lane, _f(0)),)),
                For(d0, Const(0), Const(d // lanes), (For(lane, Const(0), Const(lanes), (
                    Store(part, lane, binary("+", Load(part, lane),
                                             binary("*", Load(qs, binary("+", binary("*", r, Const(d)), lane_at)),
                                                    cast(Load(lay.keys, binary("+", base, lane_at)), F32)))),)),)),
                Declare(dot, Load(part, Const(0))),
                For(lane, Const(1), Const(lanes), (Assign(dot, binary("+", dot, Load(part, lane))),))]
    per_row = (
        Declare(limit, lay.limit(v, r)),
        Declare(top, _f(NEG)),
        For(jj, Const(0), count, (
            Declare(key, binary("+", j0, jj)),
            Declare(base, lay.kv_row(v, key)),
            *dot_loop,
            Store(scores, jj, select(binary("<", key, limit), dot, _f(NEG))),
            Assign(top, maximum(top, Load(scores, jj))))),
        Declare(m_new, maximum(Load(m_row, r), top)),
        Declare(alpha, intrinsic("exp", binary("-", Load(m_row, r), m_new))),
        Declare(total_p, _f(0)),
        For(jj, Const(0), count, (
            Declare(p, select(binary("<", binary("+", j0, jj), limit),
                              intrinsic("exp", binary("-", Load(scores, jj), m_new)), _f(0))),
            Store(scores, jj, p),
            Assign(total_p, binary("+", total_p, p)))),
        Store(l_row, r, binary("+", binary("*", Load(l_row, r), alpha), total_p)),
        Store(m_row, r, m_new),
        For(dd, Const(0), Const(d), (Store(acc, at, binary("*", Load(acc, at), alpha)),)),
        For(jj, Const(0), count, (
            Declare(p, Load(scores, jj)),
            Declare(base, lay.kv_row(v, binary("+", j0, jj))),
            For(dd, Const(0), Const(d), (
                Store(acc, at, binary("+", Load(acc, at),
                                      binary("*", p, cast(Load(lay.values, binary("+", base, dd)), F32)))),)))),
    )
    stmts.append(For(j0, v["lo"], v["stop"], (
        Declare(count, minimum(Const(tile), binary("-", v["stop"], j0))),
        For(r, Const(0), Const(rows), per_row)), step=tile))
    stmts.append(For(r, Const(0), Const(rows), (
        For(dd, Const(0), Const(d), tuple(lay.write(v, r, dd, Load(acc, at), Load(m_row, r), Load(l_row, r)))),)))
    return PrimFunc(name, defn.inputs, (defn.output,), lay.scalars(), tuple(stmts), (1, 1, 1), lay.grid(),
                    scratch=(qs, acc, m_row, l_row, scores, part), attrs={"rule": "attention-rows"})


def heads_per_lane(group: int, d: int) -> int:
    """How many of a KV head's ``group`` query heads one invocation of the lanes rule takes: the
    most that divide the group and keep its rows of q and of the output within ``LANE_VALUES``."""
    return max(g for g in range(1, group + 1) if group % g == 0 and (g == 1 or g * d <= LANE_VALUES))


def _lanes(defn: OpaqueDef, target, name: str) -> PrimFunc:
    """One query position and ``g`` query heads of one KV head per invocation (``heads_per_lane``:
    all the heads that read a KV head, where they fit), ``LANE_ROWS`` invocations a workgroup: a
    CPU that runs a workgroup's invocations as the lanes of its SIMD registers (llvmpipe, lavapipe)
    computes eight of them at once. Each key and value element is loaded once for the ``g`` heads:
    on llvmpipe a load costs as much as a dozen arithmetic instructions, so grouped-query attention
    reads its cache ``g`` times less than one head per invocation would. Each invocation keeps its
    rows of q and of the output in registers (private arrays indexed only by constants once the
    head-size loops are unrolled: a CPU driver keeps an array indexed at run time in memory, a
    gather and scatter per access) and walks its keys ``LANE_KEYS`` at a time, one online-softmax
    rescale per step, so its loops run about keys / ``LANE_KEYS`` iterations: far within a loop
    budget."""
    lay = _Layout(defn, positions=1, tile=LANE_KEYS)
    d, heads, group, keys_per_step = lay.d, lay.heads, lay.group, lay.tile
    g = heads_per_lane(group, d)
    lane_groups = heads // g  # invocations per position
    capacity = arith.Analyzer().as_int(lay.capacity_dim)
    if target.loop_budget and lanes_loop_iterations(-(-capacity // lay.splits)) > target.loop_budget:
        raise ValueError(f"kernel {name}: attention over a cache of {capacity} keys in {lay.splits} "
                         f"share(s) would run past the driver's loop budget of {target.loop_budget} iterations "
                         "an invocation (Target.loop_budget): compile with a shorter --context")
    qv = Buffer("qv", F32, (arith.IntImm(g * d),), "private")
    acc = Buffer("acc", F32, (arith.IntImm(g * d),), "private")
    score = Buffer("score", F32, (arith.IntImm(g * keys_per_step),), "private")
    row, i, h0, share, total, lo, hi, limit = (Local("row"), Local("i"), Local("h0"), Local("share"), Local("total"),
                                               Local("lo"), Local("hi"), Local("limit"))
    kvh, t, j0, d0, lane = Local("kvh"), Local("t"), Local("j0"), Local("d0"), Local("lane")
    heads_of_lane = range(g)
    m = [Local(f"m{u}", F32) for u in heads_of_lane]
    mass = [Local(f"l{u}", F32) for u in heads_of_lane]
    m_new = [Local(f"m_new{u}", F32) for u in heads_of_lane]
    alpha = [Local(f"alpha{u}", F32) for u in heads_of_lane]
    p = [Local(f"p{u}", F32) for u in heads_of_lane]
    dot = [Local(f"dot{u}", F32) for u in heads_of_lane]
    element = Local("element", F32)
    seq, key_row = Local("seq"), Local("key_row")
    chunk = binary("/", binary("+", total, Const(lay.splits - 1)), Const(lay.splits))
    v = {"total": total, "kvh": kvh, "seq": seq}
    lanes = DOT_LANES if d % DOT_LANES == 0 else 1

    def at(u: int, dd: TExpr) -> TExpr:
        """Element dd of head u's row in qv and acc."""
        return binary("+", Const(u * d), dd)

    def kv_at(source: Buffer, dd) -> TExpr:
        """Element dd of key j0 + t's row of K or V (``key_row``, declared once a key)."""
        return cast(Load(source, binary("+", key_row, dd)), F32)

    def head_loop(body) -> For:
        """``body(dd)`` for each element dd of the head, unrolled (in two loops: unroll_loops expands
        at most MAX_UNROLL iterations a loop), so that dd is a constant in every array index."""
        each = tuple(body(binary("+", binary("*", d0, Const(lanes)), lane)))
        return For(d0, Const(0), Const(d // lanes), (For(lane, Const(0), Const(lanes), each, unroll=True),),
                   unroll=True)

    def key_loop(*body) -> For:
        return For(t, Const(0), Const(keys_per_step), (Declare(key_row, lay.kv_row(v, binary("+", j0, t))),) + body,
                   unroll=True)

    def score_at(u: int) -> TExpr:
        """Where key j0 + t's score for head u is kept in ``score``."""
        return binary("+", Const(u * keys_per_step), t)

    def scored(u: int) -> TExpr:
        return Load(score, score_at(u))

    valid = binary("<", binary("+", j0, t), limit)
    step = (
        *[Declare(m_new[u], m[u]) for u in heads_of_lane],
        key_loop(*[Declare(dot[u], _f(0)) for u in heads_of_lane],
                 head_loop(lambda dd: [Declare(element, kv_at(lay.keys, dd))] + [
                     Assign(dot[u], binary("+", dot[u], binary("*", Load(qv, at(u, dd)), element)))
                     for u in heads_of_lane]),
                 *[x for u in heads_of_lane for x in (
                     Store(score, score_at(u), select(valid, dot[u], _f(NEG))),
                     Assign(m_new[u], maximum(m_new[u], scored(u))))]),
        *[x for u in heads_of_lane for x in (
            Declare(alpha[u], intrinsic("exp", binary("-", m[u], m_new[u]))),
            Assign(mass[u], binary("*", mass[u], alpha[u])))],
        head_loop(lambda dd: [Store(acc, at(u, dd), binary("*", Load(acc, at(u, dd)), alpha[u]))
                              for u in heads_of_lane]),
        key_loop(*[x for u in heads_of_lane for x in (
                     Declare(p[u], select(valid, intrinsic("exp", binary("-", scored(u), m_new[u])), _f(0))),
                     Assign(mass[u], binary("+", mass[u], p[u])))],
                 head_loop(lambda dd: [Declare(element, kv_at(lay.values, dd))] + [
                     Store(acc, at(u, dd), binary("+", Load(acc, at(u, dd)), binary("*", p[u], element)))
                     for u in heads_of_lane])),
        *[Assign(m[u], m_new[u]) for u in heads_of_lane],
    )

    def q_index(u: int, dd):  # also the output's, with one share
        h = binary("+", h0, Const(u))
        return binary("+", binary("*", binary("+", binary("*", i, Const(heads)), h), Const(d)), dd)

    # Paged: the row's own sequence and length; else the op's total, shared by every row.
    row_bounds = [Declare(total, lay.row_total(i)), Declare(seq, lay.sequence(i))] if lay.page_size else \
        [Declare(total, from_prim(lay.total))]
    if lay.splits == 1:
        results = [head_loop(lambda dd: [Store(lay.out, q_index(u, dd), cast(binary("/", Load(acc, at(u, dd)), mass[u]),
                                                                              lay.out.dtype))
                                         for u in heads_of_lane])]
    else:
        def out_base(u: int) -> TExpr:
            out_row = binary("+", binary("*", binary("+", binary("*", share, lay.n), i), Const(heads)),
                             binary("+", h0, Const(u)))
            return binary("*", out_row, Const(d + 2))

        results = [head_loop(lambda dd: [Store(lay.out, binary("+", out_base(u), dd), Load(acc, at(u, dd)))
                                         for u in heads_of_lane])]
        results += [x for u in heads_of_lane for x in (
            Store(lay.out, binary("+", out_base(u), Const(d)), m[u]),
            Store(lay.out, binary("+", out_base(u), Const(d + 1)), mass[u]))]
    body = (
        Declare(h0, binary("*", binary("%", row, Const(lane_groups)), Const(g))),
        Declare(kvh, binary("/", h0, Const(group))),
        *row_bounds,
        Declare(lo, binary("*", share, chunk)),
        Declare(hi, minimum(binary("+", lo, chunk), total)),
        # Keys below this are the row's: its share, up to and including its own position.
        Declare(limit, minimum(hi, binary("+", binary("-", total, lay.n), binary("+", i, Const(1))) if not
                               lay.page_size else total)),
        head_loop(lambda dd: [x for u in heads_of_lane for x in (
            Store(qv, at(u, dd), binary("*", cast(Load(lay.q, q_index(u, dd)), F32), _f(lay.scale))),
            Store(acc, at(u, dd), _f(0)))]),
        *[x for u in heads_of_lane for x in (Declare(m[u], _f(NEG)), Declare(mass[u], _f(0)))],
        For(j0, lo, limit, step, step=keys_per_step),
        *results,
    )
    # The invocations are numbered share by share, so that a decode query's few invocations per
    # share (3 for SmolLM2) fill a workgroup's lanes with other shares' instead of idling beside them.
    flat, per_share = Local("flat"), Local("per_share")
    stmts = [Declare(flat, binary("+", binary("*", Builtin("workgroup_id", 0), Const(LANE_ROWS)), LID)),
             Declare(per_share, binary("*", lay.n, Const(lane_groups))),
             Declare(share, binary("/", flat, per_share)),
             Declare(row, binary("%", flat, per_share)),
             Declare(i, binary("/", row, Const(lane_groups))),
             IfThen(binary("<", share, Const(lay.splits)), body)]
    invocations = arith.as_expr(defn.inputs[0].shape[0]) * (lane_groups * lay.splits)
    grid = (ceil_div(invocations, LANE_ROWS), arith.IntImm(1), arith.IntImm(1))
    return PrimFunc(name, defn.inputs, (defn.output,), lay.scalars(), tuple(stmts), (LANE_ROWS, 1, 1), grid,
                    scratch=(qv, acc, score), attrs={"rule": "attention-lanes"})


def _workgroup_plan(target, d: int, group: int, rows_wanted: int) -> tuple[int, int]:
    """(positions, tile): as many rows as asked (at least one position), and the longest key tile
    that fits the workgroup's memory beside them."""
    budget = target.limit("maxComputeWorkgroupStorageSize") // 4
    for positions in range(max(1, rows_wanted // group), 0, -1):
        rows = positions * group
        for tile in (32, 16, 8):
            if rows * d + tile * d + rows * tile + 3 * rows <= budget:
                return positions, tile
    raise ValueError(f"attention with head size {d} and {group} query heads per KV head does not fit "
                     f"{budget * 4} bytes of workgroup memory")


def _workgroup(defn: OpaqueDef, target, name: str) -> PrimFunc:
    """Threads of a workgroup together, staging tiles in workgroup memory (see the module's docstring)."""
    q = defn.inputs[0]
    analyzer = arith.Analyzer()
    d = analyzer.as_int(q.shape[2])
    group = analyzer.as_int(q.shape[1]) // analyzer.as_int(defn.inputs[1].shape[1])
    try:
        positions, tile = _workgroup_plan(target, d, group, group * positions_per_workgroup(defn, GPU_ROWS // group))
    except ValueError as error:
        raise ValueError(f"kernel {name}: {error}") from None
    lay = _Layout(defn, positions, tile)
    rows = lay.rows
    threads = min(GPU_THREADS, target.limit("maxComputeInvocationsPerWorkgroup"))
    per_thread = -(-rows * d // threads)
    qs = Buffer("qs", F32, (arith.IntImm(rows * d),), "workgroup")
    kv = Buffer("kv", F32, (arith.IntImm(tile * d),), "workgroup")  # a tile of K, then of V
    sc = Buffer("sc", F32, (arith.IntImm(rows * tile),), "workgroup")
    m_row = Buffer("m_row", F32, (arith.IntImm(rows),), "workgroup")
    l_row = Buffer("l_row", F32, (arith.IntImm(rows),), "workgroup")
    a_row = Buffer("a_row", F32, (arith.IntImm(rows),), "workgroup")
    acc = Buffer("acc", F32, (arith.IntImm(per_thread),), "private")
    stmts, v = lay.prologue()
    e, r, dd, j0, jj, k = Local("e"), Local("r"), Local("dd"), Local("j0"), Local("jj"), Local("k")

    def over(extent: int, *body) -> For:
        """Every element 0 .. extent - 1, spread over the threads."""
        return For(e, LID, Const(extent), tuple(body), step=threads)

    stmts += [over(rows * d, Declare(r, binary("/", e, Const(d))), Declare(dd, binary("%", e, Const(d))),
                   Store(qs, e, lay.q_at(v, r, dd))),
              For(r, LID, Const(rows), (Store(m_row, r, _f(NEG)), Store(l_row, r, _f(0))), step=threads),
              For(k, Const(0), Const(per_thread), (Store(acc, k, _f(0)),)),
              Barrier()]

    def stage(source: Buffer) -> For:
        key = binary("/", e, Const(d))
        return over(tile * d, Store(kv, e, cast(Load(source, binary("+", lay.kv_row(v, binary("+", j0, key)),
                                                                          binary("%", e, Const(d)))), F32)))

    dot, x, limit, top, m_new, alpha, total_p, p = (Local("dot", F32), Local("x"), Local("limit"), Local("top", F32),
                                                    Local("m_new", F32), Local("alpha", F32), Local("sum_p", F32),
                                                    Local("p", F32))
    valid = binary("<", binary("+", j0, jj), limit)
    scores = over(rows * tile,
                  Declare(r, binary("/", e, Const(tile))), Declare(jj, binary("%", e, Const(tile))),
                  Declare(dot, _f(0)),
                  For(x, Const(0), Const(d), (Assign(dot, binary("+", dot, binary(
                      "*", Load(qs, binary("+", binary("*", r, Const(d)), x)),
                      Load(kv, binary("+", binary("*", jj, Const(d)), x))))),)),
                  Declare(limit, lay.limit(v, r)),
                  Store(sc, e, select(valid, dot, _f(NEG))))
    at = binary("+", binary("*", r, Const(tile)), jj)
    statistics = For(r, LID, Const(rows), (
        Declare(limit, lay.limit(v, r)),
        Declare(top, _f(NEG)),
        For(jj, Const(0), Const(tile), (Assign(top, maximum(top, Load(sc, at))),)),
        Declare(m_new, maximum(Load(m_row, r), top)),
        Declare(alpha, intrinsic("exp", binary("-", Load(m_row, r), m_new))),
        Declare(total_p, _f(0)),
        For(jj, Const(0), Const(tile), (
            Declare(p, select(valid, intrinsic("exp", binary("-", Load(sc, at), m_new)), _f(0))),
            Store(sc, at, p),
            Assign(total_p, binary("+", total_p, p)))),
        Store(l_row, r, binary("+", binary("*", Load(l_row, r), alpha), total_p)),
        Store(m_row, r, m_new),
        Store(a_row, r, alpha)), step=threads)
    mine = binary("+", LID, binary("*", k, Const(threads)))
    value = Local("value", F32)
    accumulate = For(k, Const(0), Const(per_thread), (
        Declare(e, minimum(mine, Const(rows * d - 1))),
        Declare(r, binary("/", e, Const(d))), Declare(dd, binary("%", e, Const(d))),
        Declare(value, binary("*", Load(acc, k), Load(a_row, r))),
        For(jj, Const(0), Const(tile), (Assign(value, binary("+", value, binary(
            "*", Load(sc, at), Load(kv, binary("+", binary("*", jj, Const(d)), dd))))),)),
        Store(acc, k, value)))
    phases = (stage(lay.keys), scores, statistics, stage(lay.values), accumulate)
    if not lay.page_size:
        stmts.append(For(j0, v["lo"], v["stop"], tuple(x for phase in phases for x in (phase, Barrier())), step=tile))
    else:
        # Paged, the keys a workgroup reads come from a storage buffer (its rows' positions), which
        # WGSL's uniformity analysis holds non-uniform: no barrier may sit in a loop they bound. The
        # tiles run to the page table's end, a constant, each doing its work only below the stop.
        within = binary("<", j0, v["stop"])
        end = arith.simplify(lay.paged_inputs[1].shape[1] * lay.page_size)
        stmts.append(For(j0, Const(0), minimum(from_prim(end), lay.capacity),
                         tuple(x for phase in phases for x in (IfThen(within, (phase,)), Barrier())), step=tile))
    stmts.append(For(k, Const(0), Const(per_thread), (
        Declare(e, mine),
        IfThen(binary("<", e, Const(rows * d)), (
            Declare(r, binary("/", e, Const(d))), Declare(dd, binary("%", e, Const(d))),
            *lay.write(v, r, dd, Load(acc, k), Load(m_row, r), Load(l_row, r)))))))
    return PrimFunc(name, defn.inputs, (defn.output,), lay.scalars(), tuple(stmts), (threads, 1, 1), lay.grid(),
                    scratch=(qs, kv, sc, m_row, l_row, a_row, acc), attrs={"rule": "attention"})


def schedule_attention_merge(defn: OpaqueDef, target, name: str) -> PrimFunc:
    """One thread per output element: the shares rescaled to their common maximum and summed."""
    (partial,), out = defn.inputs, defn.output
    analyzer = arith.Analyzer()
    splits, width = analyzer.as_int(partial.shape[0]), analyzer.as_int(partial.shape[3])
    d = width - 2
    threads = min(256, target.limit("maxComputeInvocationsPerWorkgroup"))
    count = arith.simplify(out.size)
    rows = from_prim(arith.simplify(partial.shape[1] * partial.shape[2]))  # n x heads
    gid, row, dd, s, top, weight, total, value = (Local("gid"), Local("row"), Local("dd"), Local("s"),
                                                  Local("top", F32), Local("weight", F32), Local("total", F32),
                                                  Local("value", F32))
    base = binary("*", binary("+", binary("*", s, rows), row), Const(width))

    def share(field: TExpr) -> TExpr:
        return Load(partial, binary("+", base, field))

    body = (Declare(gid, global_thread_id(threads)),
            IfThen(binary("<", gid, from_prim(count)), (
                Declare(row, binary("/", gid, Const(d))), Declare(dd, binary("%", gid, Const(d))),
                Declare(top, _f(NEG)),
                For(s, Const(0), Const(splits), (Assign(top, maximum(top, share(Const(d)))),)),
                Declare(total, _f(0)), Declare(value, _f(0)),
                For(s, Const(0), Const(splits), (
                    Declare(weight, intrinsic("exp", binary("-", share(Const(d)), top))),
                    Assign(total, binary("+", total, binary("*", weight, share(Const(d + 1))))),
                    Assign(value, binary("+", value, binary("*", weight, share(dd)))))),
                Store(out, gid, cast(binary("/", value, total), out.dtype)))))
    grid = grid_for(ceil_div(count, threads), target)
    return PrimFunc(name, defn.inputs, (out,), scalars_of(partial, out), body, (threads, 1, 1), grid,
                    attrs={"rule": "attention-merge"})
