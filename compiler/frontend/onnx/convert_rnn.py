"""The recurrent networks (RNN, GRU, LSTM), composed of the IR's operators at import.

The sequence is unrolled: its length must be static (fix it with shapes=). The input's product with
the weights is one matmul over all time steps; each step then multiplies the hidden state by the
recurrence weights and applies the gates. ``sequence_lens`` masks the steps past each batch row's
length: the state stays as it was and the output is 0, which for the reverse direction also starts
each row at its own last step (the masked steps before it change nothing), as the spec asks.
Directions forward, reverse and bidirectional; layouts 0 and 1; the activations by name with their
alpha and beta; ``clip``; GRU's ``linear_before_reset``; LSTM's peepholes and ``input_forget``."""

from __future__ import annotations

import numpy as np

from ... import op as R
from ...ir.expr import Constant, ShapeExpr
from ...ir.struct_info import TensorStructInfo
from .convert_common import FLOATS, const
from .convert_loops import recursive_loop
from .registry import NodeContext, converter

RNN_ATTRS = ("activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size", "layout")

# name -> (takes alpha, takes beta, default alpha, default beta)
_ACTIVATIONS = {
    "relu": (False, False, None, None), "tanh": (False, False, None, None), "sigmoid": (False, False, None, None),
    "affine": (True, True, 1.0, 0.0), "leakyrelu": (True, False, 0.01, None),
    "thresholdedrelu": (True, False, 1.0, None), "scaledtanh": (True, True, 1.0, 1.0),
    "hardsigmoid": (True, True, 0.2, 0.5), "elu": (True, False, 1.0, None), "softsign": (False, False, None, None),
    "softplus": (False, False, None, None),
}


def _activations(ctx: NodeContext, defaults: tuple[str, ...], directions: int) -> list:
    """One function per gate activation and direction, from ``activations`` (names) and the
    ``activation_alpha``/``activation_beta`` lists they consume in order."""
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in ctx.attr("activations", ())] \
        or list(defaults) * directions
    if len(names) != len(defaults) * directions:
        raise ctx.error(f"activations lists {len(names)} functions; {len(defaults) * directions} are needed", "invalid")
    alphas, betas = list(ctx.attr("activation_alpha", ()) or ()), list(ctx.attr("activation_beta", ()) or ())
    functions = []
    for name in names:
        key = name.lower()
        if key not in _ACTIVATIONS:
            raise ctx.error(f"activation {name} is not supported")
        takes_alpha, takes_beta, alpha, beta = _ACTIVATIONS[key]
        if takes_alpha and alphas:
            alpha = float(alphas.pop(0))
        if takes_beta and betas:
            beta = float(betas.pop(0))
        functions.append(_activation(ctx, key, alpha, beta))
    return functions


def _activation(ctx: NodeContext, key: str, alpha, beta):
    dtype = ctx.dtype(0)

    def c(value):
        return const(value, dtype)

    table = {
        "relu": lambda x: R.nn.relu(x),
        "tanh": lambda x: R.tanh(x),
        "sigmoid": lambda x: R.sigmoid(x),
        "affine": lambda x: R.add(R.multiply(x, c(alpha)), c(beta)),
        "leakyrelu": lambda x: R.where(R.less(x, c(0)), R.multiply(x, c(alpha)), x),
        "thresholdedrelu": lambda x: R.where(R.greater(x, c(alpha)), x, c(0)),
        "scaledtanh": lambda x: R.multiply(R.tanh(R.multiply(x, c(beta))), c(alpha)),
        "hardsigmoid": lambda x: R.clip(R.add(R.multiply(x, c(alpha)), c(beta)), min=0.0, max=1.0),
        "elu": lambda x: R.where(R.less(x, c(0)), R.multiply(R.subtract(R.exp(x), c(1)), c(alpha)), x),
        "softsign": lambda x: R.divide(x, R.add(R.abs(x), c(1))),
        "softplus": lambda x: R.log(R.add(R.exp(x), c(1))),
    }
    return table[key]


class _Recurrence:
    """What the three ops share: the inputs read per direction, the steps, the outputs."""

    def __init__(self, ctx: NodeContext, gates: int, states: int):
        self.ctx = ctx
        self.cache = {}
        self.lengths = None
        if ctx.dtype(0) not in FLOATS:
            raise ctx.error(f"input 0 is {ctx.dtype(0)}; recurrent networks compute on floats")
        self.dtype = ctx.dtype(0)
        direction = ctx.attr("direction", b"forward")
        direction = direction.decode() if isinstance(direction, bytes) else str(direction)
        if direction not in ("forward", "reverse", "bidirectional"):
            raise ctx.error(f"direction {direction} is not one of forward, reverse, bidirectional", "invalid")
        self.reverse = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[direction]
        self.layout = int(ctx.attr("layout", 0))
        if self.layout not in (0, 1):
            raise ctx.error(f"layout {self.layout} is not 0 or 1", "invalid")
        if ctx.rank(0) != 3:
            raise ctx.error(f"input 0 has rank {ctx.rank(0)}, not 3", "invalid")
        dims = ctx.dims(0)
        self.length = dims[1 if self.layout else 0]
        self.steps = ctx.analyzer.as_int(self.length)  # None: symbolic, the steps a recursive function
        self.hidden = int(ctx.attr("hidden_size", 0)) or ctx.static_dims(2, "hidden_size")[-1]
        self.gates = gates
        self.clip = ctx.attr("clip")
        x = ctx.input(0)
        self.x = x if self.layout == 0 else ctx.emit(R.permute_dims(x, axes=[1, 0, 2]))  # (T, B, I)
        self.batch = ctx.dims(0)[0 if self.layout else 1]
        self.initial = [self._initial(index) for index in (5, 6)[:states]]
        self.mask = self._mask()

    # -- inputs ---------------------------------------------------------------------------------

    def weight(self, index: int, d: int):
        """Input ``index`` (W or R: (directions, gates * hidden, n)) of direction ``d``, transposed;
        made once, however many steps use it (a constant is not copied per step)."""
        key = ("weight", index, d)
        if key not in self.cache:
            self.cache[key] = self._weight(index, d)
        return self.cache[key]

    def _weight(self, index: int, d: int):
        value = self.ctx.input(index)
        if isinstance(value, Constant):
            return Constant(np.ascontiguousarray(value.data[d].T))
        return self.ctx.emit(R.permute_dims(R.take(value, const(d, "int64"), axis=0), axes=[1, 0]))

    def bias(self, d: int):
        """(input bias, recurrence bias) of direction ``d``, or zeros."""
        if ("bias", d) not in self.cache:
            self.cache["bias", d] = self._bias(d)
        return self.cache["bias", d]

    def _bias(self, d: int):
        ctx, size = self.ctx, self.gates * self.hidden
        if not ctx.has_input(3):
            zero = const(np.zeros(size), self.dtype)
            return zero, zero
        b = ctx.input(3)
        if isinstance(b, Constant):
            return Constant(b.data[d, :size]), Constant(b.data[d, size:])
        row = R.take(b, const(d, "int64"), axis=0)
        return (ctx.emit(R.strided_slice(row, axes=[0], begin=[0], end=[size])),
                ctx.emit(R.strided_slice(row, axes=[0], begin=[size], end=[2 * size])))

    def _initial(self, index: int):
        """initial_h or initial_c as (directions, B, H), or None (zeros)."""
        if not self.ctx.has_input(index):
            return None
        value = self.ctx.input(index)
        return value if self.layout == 0 else self.ctx.emit(R.permute_dims(value, axes=[1, 0, 2]))

    def initial_state(self, which: int, d: int):
        value = self.initial[which]
        if value is None:
            return R.zeros(ShapeExpr((self.batch, self.hidden)), dtype=self.dtype)
        return self.ctx.emit(R.take(value, const(d, "int64"), axis=0))

    def _mask(self):
        """Per step, (B, 1) booleans: the step is within each row's sequence_lens (None: all are)."""
        ctx = self.ctx
        if not ctx.has_input(4):
            return None
        lengths = ctx.input(4)
        if isinstance(lengths, Constant) and np.all(lengths.data == self.steps):
            return None
        self.lengths = ctx.emit(R.reshape(R.astype(lengths, dtype="int64"), [-1, 1]))
        if self.steps is None:
            return None
        return [ctx.emit(R.less(const(t, "int64"), self.lengths)) for t in range(self.steps)]

    # -- steps ----------------------------------------------------------------------------------

    def _unrolled(self, step, d, reverse, x_gates, states):
        ctx = self.ctx
        ys = [None] * self.steps
        for t in (range(self.steps - 1, -1, -1) if reverse else range(self.steps)):
            x_t = ctx.emit(R.take(x_gates, const(t, "int64"), axis=0))
            new = [ctx.emit(s) for s in step(d, x_t, states)]
            if self.mask is not None:
                keep = self.mask[t]
                ys[t] = ctx.emit(R.where(keep, new[0], const(0, self.dtype)))
                new = [ctx.emit(R.where(keep, n, s)) for n, s in zip(new, states)]
            else:
                ys[t] = new[0]
            states = new
        return ctx.emit(R.concat([R.expand_dims(y, axis=0) for y in ys], axis=0)), states  # (T, B, H)

    def _recursive(self, step, d, reverse, x_gates, states):
        """Over a symbolic length: one step per call of a recursive function (as Loop is), its
        outputs stacked in time order (a reverse direction's each after the later ones)."""
        ctx = self.ctx
        for index, what in ((2, "R"), (3, "B"), (7, "P")):
            if ctx.has_input(index) and not isinstance(ctx.input(index), Constant):
                raise ctx.error(f"over a symbolic sequence length, {what} must be a constant (an initializer)")
        states = [ctx.emit(s) if not isinstance(s, Constant) else s for s in states]
        count = ctx.emit(R.sum(R.ones(ShapeExpr((self.length,)), dtype="int64")))  # T, as a tensor
        fixed = [count, x_gates] + ([self.lengths] if self.lengths is not None else [])

        def body(bb, i, params_state, params_fixed):
            emit, ctx.emit = ctx.emit, bb.emit  # the step's bindings go into the function
            try:
                t = bb.emit(R.subtract(R.subtract(params_fixed[0], const(1, "int64")), i)) if reverse else i
                x_t = bb.emit(R.take(params_fixed[1], t, axis=0))
                new = [bb.emit(s) for s in step(d, x_t, params_state)]
                y = new[0]
                if self.lengths is not None:
                    keep = bb.emit(R.less(t, params_fixed[2]))
                    y = bb.emit(R.where(keep, new[0], const(0, self.dtype)))
                    new = [bb.emit(R.where(keep, n, s)) for n, s in zip(new, params_state)]
            finally:
                ctx.emit = emit
            return new, [y]

        results = recursive_loop(ctx, states, fixed, lambda i, state, fixed: R.less(i, fixed[0]), body, [0],
                                 [reverse])
        y = ctx.builder.match_cast(results[-1], TensorStructInfo((self.length, self.batch, self.hidden), self.dtype))
        return y, results[:-1]

    def pre(self, x):
        """A gate's input before its activation, clipped when ``clip`` is set."""
        if self.clip is None:
            return x
        return R.clip(x, min=-float(self.clip), max=float(self.clip))

    def split(self, value, count: int) -> list:
        h = self.hidden
        return [self.ctx.emit(R.strided_slice(value, axes=[1], begin=[k * h], end=[(k + 1) * h])) for k in range(count)]

    def run(self, step) -> list:
        """``step(d, x_gates, states) -> (new states)`` over every direction and step; the
        outputs Y, Y_h (and Y_c when there are two states)."""
        ctx = self.ctx
        outputs, finals = [], []
        for d, reverse in enumerate(self.reverse):
            w = self.weight(1, d)
            wb, _ = self.bias(d)
            x_gates = ctx.emit(R.add(R.matmul(self.x, w), wb))  # (T, B, gates * H): every step at once
            states = [self.initial_state(k, d) for k in range(len(self.initial))]
            run = self._unrolled if self.steps is not None else self._recursive
            y, states = run(step, d, reverse, x_gates, states)
            outputs.append(y)
            finals.append(states)
        y = R.concat([R.expand_dims(o, axis=1) for o in outputs], axis=1)  # (T, D, B, H)
        results = [y if self.layout == 0 else R.permute_dims(y, axes=[2, 0, 1, 3])]
        for k in range(len(finals[0])):
            final = R.concat([R.expand_dims(f[k], axis=0) for f in finals], axis=0)  # (D, B, H)
            results.append(final if self.layout == 0 else R.permute_dims(final, axes=[1, 0, 2]))
        return results


@converter("RNN", attrs=RNN_ATTRS)
def _rnn(ctx: NodeContext):
    """H = f(X W^T + H R^T + Wb + Rb)."""
    net = _Recurrence(ctx, 1, 1)
    functions = _activations(ctx, ("Tanh",), len(net.reverse))

    def step(d, x_t, states):
        r = net.weight(2, d)
        _, rb = net.bias(d)
        return [functions[d](net.pre(R.add(R.add(x_t, R.matmul(states[0], r)), rb)))]

    return net.run(step)


@converter("GRU", attrs=(*RNN_ATTRS, "linear_before_reset"))
def _gru(ctx: NodeContext):
    """z and r gates, then the candidate h (its recurrence after or before the reset), then
    H = (1 - z) h + z H."""
    net = _Recurrence(ctx, 3, 1)
    functions = _activations(ctx, ("Sigmoid", "Tanh"), len(net.reverse))
    before_reset = bool(ctx.attr("linear_before_reset", 0))
    one = const(1, net.dtype)

    def step(d, x_t, states):
        f, g = functions[2 * d], functions[2 * d + 1]
        h_prev = states[0]
        r_all = net.weight(2, d)  # (H, 3H)
        _, rb = net.bias(d)
        xz, xr, xh = net.split(x_t, 3)
        hz, hr, hh = net.split(ctx.emit(R.add(R.matmul(h_prev, r_all), rb)), 3)
        z = ctx.emit(f(net.pre(R.add(xz, hz))))
        r = ctx.emit(f(net.pre(R.add(xr, hr))))
        if before_reset:
            candidate = R.add(xh, R.multiply(r, hh))
        else:  # the reset gate applies to the state before its product with R_h
            r_h = _columns(ctx, r_all, 2 * net.hidden, 3 * net.hidden)
            rb_h = ctx.emit(R.strided_slice(rb, axes=[0], begin=[2 * net.hidden], end=[3 * net.hidden]))
            candidate = R.add(xh, R.add(R.matmul(R.multiply(r, h_prev), r_h), rb_h))
        h = ctx.emit(g(net.pre(candidate)))
        return [R.add(R.multiply(R.subtract(one, z), h), R.multiply(z, h_prev))]

    return net.run(step)


def _columns(ctx: NodeContext, matrix, begin: int, end: int):
    if isinstance(matrix, Constant):
        return Constant(np.ascontiguousarray(matrix.data[:, begin:end]))
    return ctx.emit(R.strided_slice(matrix, axes=[1], begin=[begin], end=[end]))


@converter("LSTM", attrs=(*RNN_ATTRS, "input_forget"))
def _lstm(ctx: NodeContext):
    """Gates i, o, f and the cell candidate c (that order in W, R and B), peepholes P (i, o, f),
    C = f C + i c, H = o h(C)."""
    net = _Recurrence(ctx, 4, 2)
    functions = _activations(ctx, ("Sigmoid", "Tanh", "Tanh"), len(net.reverse))
    coupled = bool(ctx.attr("input_forget", 0))
    one = const(1, net.dtype)

    def peephole(d, k):
        if not ctx.has_input(7):
            return None
        p = ctx.input(7)
        if isinstance(p, Constant):
            return Constant(p.data[d, k * net.hidden:(k + 1) * net.hidden])
        row = R.take(p, const(d, "int64"), axis=0)
        return ctx.emit(R.strided_slice(row, axes=[0], begin=[k * net.hidden], end=[(k + 1) * net.hidden]))

    def with_peephole(x, d, k, cell):
        p = peephole(d, k)
        return x if p is None else R.add(x, R.multiply(p, cell))

    def step(d, x_t, states):
        f, g, h = functions[3 * d], functions[3 * d + 1], functions[3 * d + 2]
        h_prev, c_prev = states
        _, rb = net.bias(d)
        gates = ctx.emit(R.add(R.add(x_t, R.matmul(h_prev, net.weight(2, d))), rb))
        gi, go, gf, gc = net.split(gates, 4)
        i = ctx.emit(f(net.pre(with_peephole(gi, d, 0, c_prev))))
        forget = R.subtract(one, i) if coupled else f(net.pre(with_peephole(gf, d, 2, c_prev)))
        cell = ctx.emit(R.add(R.multiply(forget, c_prev), R.multiply(i, g(net.pre(gc)))))
        o = f(net.pre(with_peephole(go, d, 1, cell)))
        return [R.multiply(o, h(cell)), cell]

    return net.run(step)
