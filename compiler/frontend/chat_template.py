"""Chat templates rendered as transformers renders them (jinja2's immutable sandbox, trim_blocks and
lstrip_blocks), within a budget.

A chat template is Jinja code from a model file: its author's, not ours. The sandbox keeps it away from
Python's internals; the budget keeps it from taking the machine, so that a loop nested in a loop or
``'a' * 10**9`` ends in a clear error (TemplateBudgetError) rather than a hung chat or gigabytes of
memory. One rendering may take (TemplateBudget, whose figures runtime-js/src/chat-template.js shares
through compiler/facts.json):

- steps: loop iterations, calls (macros, functions, methods) and filters;
- chars: characters, in any one value the template makes (a string; a list, tuple or dict counts its
  items and what they hold, nested ones included), its output included;
- work: characters and items of all the values it makes, added up;

each grown by the conversation's own size (a long conversation renders long), so that the budget
limits what the template adds to what the user wrote. An operation that can make a value much
larger than its operands is checked before it runs (``*``, ``**``, ``%``, ``~``, widths, counts and
separators of filters and string methods), and every value an operation makes is checked after.
What one step costs without making a value (comparing two long lists, say) is bounded by the sizes
of the values, not counted.
"""

from __future__ import annotations

import functools
import inspect
import re
from contextvars import ContextVar
from dataclasses import dataclass

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, optimizeconst
from jinja2.runtime import markup_join, str_join
from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range
from jinja2.utils import Namespace

from .. import facts
from ..ir.errors import TesseraError


class ChatTemplateError(TesseraError):
    """A chat template that cannot lay out this conversation: it does not parse, or it fails."""


class TemplateRaised(ChatTemplateError):
    """The template called raise_exception: it refuses this conversation (an order of roles, say)."""


class TemplateBudgetError(ChatTemplateError):
    """The template ran past its budget."""

    # The steps the template had taken when it was stopped (set by render_chat_template): past a budget of
    # N steps, N + 1; stopped by a size, fewer. A figure that, unlike a time, a busy machine does not change.
    steps: int = 0


_BUDGET = facts.CHAT_TEMPLATE_BUDGET


@dataclass(frozen=True)
class TemplateBudget:
    steps: int = _BUDGET["steps"]
    chars: int = _BUDGET["chars"]
    work: int = _BUDGET["work"]
    # What a conversation adds: steps per message; chars and work per character of its text.
    steps_per_message: int = _BUDGET["steps_per_message"]
    chars_per_text: int = _BUDGET["chars_per_text"]
    work_per_text: int = _BUDGET["work_per_text"]


DEFAULT_BUDGET = TemplateBudget()
# Integers past this many bits are refused: a template has no use for them, and arithmetic on
# larger ones would cost a step more than its budget supposes.
MAX_INT_BITS = 4096
_LOOP_STEP = "tessera_loop_step"  # called at the start of every loop iteration (see _count_iterations)


def render_chat_template(template: str, messages: list[dict], add_generation_prompt: bool = True,
                         budget: TemplateBudget = DEFAULT_BUDGET, **variables) -> str:
    """The conversation as the template lays it out. ChatTemplateError when it does not parse or
    fails (TemplateRaised when it refuses the conversation); TemplateBudgetError past its budget."""
    compiled = _compiled_template(template)
    context = {**variables, "messages": messages, "add_generation_prompt": add_generation_prompt}
    meter = _Meter(budget, len(messages) if isinstance(messages, (list, tuple)) else 0, _text_chars(context))
    token = _METER.set(meter)
    try:
        pieces, length = [], 0
        for piece in compiled.generate(**context):
            length += len(piece)
            if length > meter.chars:
                raise TemplateBudgetError(f"the chat template's output passed its budget of {meter.chars:,} "
                                          "characters")
            pieces.append(piece)
        return "".join(pieces)
    except TemplateBudgetError as error:
        error.steps = meter.steps_taken
        raise
    except ChatTemplateError:
        raise
    except RecursionError:
        error = TemplateBudgetError("the chat template recursed too deeply (a macro that calls itself?)")
        error.steps = meter.steps_taken
        raise error from None
    except Exception as error:
        raise ChatTemplateError(f"the chat template failed: {type(error).__name__}: {error}") from None
    finally:
        _METER.reset(token)


def check_template_syntax(template: str) -> None:
    """ChatTemplateError if the template does not parse."""
    _compiled_template(template)


@functools.lru_cache(maxsize=8)
def _compiled(template: str):
    env = BoundedEnvironment()
    tree = env.parse(template)
    _count_iterations(tree)
    # jinja2 computes constant expressions while it compiles ({{ 'x' | center(10**9) }} too): within a
    # budget as well. One past it is left to run, and fail, when the template renders.
    token = _METER.set(_Meter(DEFAULT_BUDGET, 0, 0))
    try:
        return env.from_string(tree)
    finally:
        _METER.reset(token)


def _compiled_template(template: str):
    """Compiling a template costs about 100 renderings of it: `tessera compile` renders one ~250
    times to check its reduction (frontend/chat_format.py), a chat once per turn."""
    try:
        return _compiled(template)
    except Exception as error:  # jinja2's TemplateSyntaxError, or a template refused while compiling
        raise ChatTemplateError(f"the chat template does not parse: {error}") from None


def _count_iterations(tree) -> None:
    """Every loop's body starts with a call of tessera_loop_step, which BoundedEnvironment.call counts:
    recursive loops and loops with a filter too."""
    for loop in list(tree.find_all(nodes.For)):
        step = nodes.ExprStmt(nodes.Call(nodes.Name(_LOOP_STEP, "load"), [], [], None, None))
        loop.body.insert(0, step.set_lineno(loop.lineno))


# ---- the meter of one rendering -----------------------------------------------------------------------------

_METER: ContextVar[_Meter | None] = ContextVar("tessera_chat_template_meter", default=None)


class _Meter:
    def __init__(self, budget: TemplateBudget, n_messages: int, text: int):
        self.steps = budget.steps + budget.steps_per_message * n_messages
        self.chars = budget.chars + budget.chars_per_text * text
        self.work = budget.work + budget.work_per_text * text
        self.steps_taken = self.work_done = 0

    def step(self) -> None:
        self.steps_taken += 1
        if self.steps_taken > self.steps:
            raise TemplateBudgetError(f"the chat template ran past its budget of {self.steps:,} steps (loop "
                                      "iterations, calls and filters)")

    def expect(self, size: int, what: str) -> None:
        """Before an operation: it would make a value of ``size``."""
        if size > self.chars:
                raise TemplateBudgetError(f"the chat template would make {what} of {size:,} characters or items, past "
                                      f"its budget of {self.chars:,}")

    def made(self, value):
        """After an operation: ``value`` is within the budget; its size goes to the work done."""
        if isinstance(value, int) and not isinstance(value, bool):
            if value.bit_length() > MAX_INT_BITS:
                raise TemplateBudgetError(f"the chat template made a number of {value.bit_length():,} bits; the "
                                          f"most it may make is {MAX_INT_BITS:,}")
            return value
        if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)):
            size = value_size(value, self.chars)
            if size > self.chars:
                raise TemplateBudgetError(f"the chat template made a value of more than {self.chars:,} characters "
                                          "or items, its budget")
            self.work_done += size
            if self.work_done > self.work:
                raise TemplateBudgetError(f"the chat template made more than {self.work:,} characters or items in "
                                          "all, its budget")
        return value


def _meter() -> _Meter:
    meter = _METER.get()
    if meter is None:  # pragma: no cover - the compiled templates are this module's own
        raise RuntimeError("a chat template runs only inside render_chat_template")
    return meter


def value_size(value, limit: int) -> int:
    """Characters and items of ``value``, nested ones included, counted until past ``limit``: a string
    is its characters; a list, tuple or dict one per item (key and value) and what they hold. A list
    that holds one long string many times is that string many times over, as its text is."""
    size, stack = 0, [value]
    while stack and size <= limit:
        item = stack.pop()
        if isinstance(item, (str, bytes)):
            size += len(item)
        elif isinstance(item, dict):
            size += 2 * len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            size += len(item)
            stack.extend(item)
        elif isinstance(item, Namespace):
            stack.append(dict(item._Namespace__attrs))  # what its text shows
    return size


def _text_chars(value) -> int:
    """The characters of the strings in the conversation and variables (the user's, not the template's)."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return total


# ---- checks before operations that can make a value much larger than their operands -----------------------

_NUMBER = re.compile(r"\d+")
_NESTED_FIELD = re.compile(r"\{[^{}]*:[^{}]*\{")


def _expect_format(meter: _Meter, fmt: str, args) -> None:
    """``fmt % args`` or ``fmt.format(*args)``: every number in the format may be a width."""
    widths = sum(int(n) if len(n) < 16 else meter.chars + 1 for n in _NUMBER.findall(fmt))
    size = len(fmt) + widths + value_size(args, meter.chars)
    if "*" in fmt or _NESTED_FIELD.search(fmt):  # widths taken from the arguments
        size += sum(abs(a) for a in _flat(args) if isinstance(a, int) and not isinstance(a, bool))
    meter.expect(size, "a formatted string")


def _flat(args):
    if isinstance(args, dict):
        return list(args.values())
    return list(args) if isinstance(args, (list, tuple)) else [args]


def _expect_binop(meter: _Meter, operator: str, left, right) -> None:
    ints = all(isinstance(x, int) and not isinstance(x, bool) for x in (left, right))
    if operator == "*":
        if ints:
            if left.bit_length() + right.bit_length() > MAX_INT_BITS:
                raise TemplateBudgetError(f"the chat template would make a number of more than {MAX_INT_BITS:,} bits")
            return
        for sequence, count in ((left, right), (right, left)):
            if isinstance(sequence, (str, list, tuple)) and isinstance(count, int):
                meter.expect(value_size(sequence, meter.chars) * max(count, 0),
                             f"a {type(sequence).__name__} repeated {count:,} times")
    elif operator == "**" and ints and right > 0:
        if max(left.bit_length(), 1) * right > MAX_INT_BITS and abs(left) > 1:
            raise TemplateBudgetError(f"the chat template would make a number of more than {MAX_INT_BITS:,} bits "
                                      f"({left} ** {right})")
    elif operator == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
        meter.expect(value_size(left, meter.chars) + value_size(right, meter.chars), "a concatenation")
    elif operator == "%" and isinstance(left, str):
        _expect_format(meter, left, right)


def _expect_replace(meter: _Meter, s, old, new, count=None) -> None:
    if isinstance(s, str) and isinstance(old, str) and isinstance(new, str) and len(new) > len(old):
        times = s.count(old) if old else len(s) + 1
        if isinstance(count, int) and count >= 0:
            times = min(times, count)
        meter.expect(len(s) + times * (len(new) - len(old)), "a replacement")


def _expect_join(meter: _Meter, separator, items) -> None:
    meter.expect(sum(value_size(x, meter.chars) for x in items) + len(str(separator)) * max(len(items) - 1, 0),
                 "a join")


def _expect_width(meter: _Meter, text, width, what: str) -> None:
    if isinstance(width, int):
        meter.expect(len(str(text)) + width, what)


def _expect_indent(meter: _Meter, s, width) -> None:
    pad = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
    meter.expect(len(str(s)) + (str(s).count("\n") + 1) * pad, "an indented string")


def _expect_tojson(meter: _Meter, value, indent=None) -> None:
    size = value_size(value, meter.chars)
    if isinstance(indent, int) and indent > 0:
        size *= 1 + indent * _depth(value, meter.chars)
    meter.expect(size, "a JSON text")


def _depth(value, limit: int) -> int:
    deepest, stack, seen = 0, [(value, 0)], 0
    while stack and seen <= limit:
        item, depth = stack.pop()
        seen += 1
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, depth + 1) for v in item)
    return deepest


def _expect_count(meter: _Meter, count, what: str) -> None:
    if isinstance(count, int):
        meter.expect(count, what)


def _expect_sum(meter: _Meter, iterable, start) -> None:
    if not isinstance(start, (int, float)):  # adding lists or strings copies the running total each time
        meter.expect(value_size(iterable, meter.chars) * max(len(iterable), 1), "a sum of sequences")


# filter name -> check(meter, its arguments by name, defaults filled in); jinja2's parameter names
_FILTER_CHECKS = {
    "center": lambda m, a: _expect_width(m, a["value"], a["width"], "a centered string"),
    "indent": lambda m, a: _expect_indent(m, a["s"], a["width"]),
    "replace": lambda m, a: _expect_replace(m, a["s"], a["old"], a["new"], a["count"]),
    "join": lambda m, a: _expect_join(m, a["d"], a["value"]),
    "format": lambda m, a: _expect_format(m, str(a["value"]), a["kwargs"] or a["args"]),
    "wordwrap": lambda m, a: m.expect(len(str(a["s"])) * (1 + len(a["wrapstring"] or "\n")), "a wrapped string"),
    "tojson": lambda m, a: _expect_tojson(m, a["value"], a["indent"]),
    "pprint": lambda m, a: _expect_tojson(m, a["value"], 1),
    "string": lambda m, a: m.expect(value_size(a["value"], m.chars), "a string"),
    "batch": lambda m, a: _expect_count(m, a["linecount"], "batches of that many items"),
    "slice": lambda m, a: _expect_count(m, a["slices"], "that many slices"),
    "sum": lambda m, a: _expect_sum(m, a["iterable"], a["start"]),
}
# Filters that consume an iterable: it is made a list first, so that the check can read it.
_LISTED = {"join": "value", "sum": "iterable"}


def _bounded_filter(name: str, function):
    """``function`` counted as a step, its arguments checked first where it can grow a value, its result after."""
    check = _FILTER_CHECKS.get(name)
    signature = inspect.signature(function) if check is not None else None

    @functools.wraps(function)  # keeps jinja_pass_arg: the environment or context still comes first
    def bounded(*args, **kwargs):
        meter = _meter()
        meter.step()
        if check is not None:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            listed = _LISTED.get(name)
            if listed and not isinstance(bound.arguments[listed], (list, tuple, str)):
                bound.arguments[listed] = list(bound.arguments[listed])
            check(meter, bound.arguments)
            args, kwargs = bound.args, bound.kwargs
        return meter.made(function(*args, **kwargs))

    return bounded


# str methods -> check(meter, the string, *args)
_METHOD_CHECKS = {
    "replace": _expect_replace,
    "center": lambda m, s, width, *rest: _expect_width(m, s, width, "a centered string"),
    "ljust": lambda m, s, width, *rest: _expect_width(m, s, width, "a padded string"),
    "rjust": lambda m, s, width, *rest: _expect_width(m, s, width, "a padded string"),
    "zfill": lambda m, s, width: _expect_width(m, s, width, "a padded string"),
    "expandtabs": lambda m, s, tabsize=8: _expect_width(m, s, len(s) * tabsize if isinstance(tabsize, int) else 0,
                                                        "a string with its tabs expanded"),
    "join": lambda m, s, items: _expect_join(m, s, items),
    "format": lambda m, s, *args, **kwargs: _expect_format(m, s, [*args, *kwargs.values()]),
    "format_map": lambda m, s, mapping: _expect_format(m, s, mapping),
}


class BoundedCodeGenerator(CodeGenerator):
    """The code jinja2 writes, with ``~`` and the literals that make lists, tuples and dicts
    going through the environment, which checks what they make."""

    @optimizeconst
    def visit_Concat(self, node, frame):
        mode = "volatile" if frame.eval_ctx.volatile else "markup" if frame.eval_ctx.autoescape else "str"
        self.write(f"environment.checked_concat({mode!r}, context.eval_ctx, (")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")

    def _made(self, visit, node, frame):
        if getattr(node, "ctx", "load") != "load":
            return visit(node, frame)
        self.write("environment.checked_value(")
        visit(node, frame)
        self.write(")")

    def visit_List(self, node, frame):
        self._made(super().visit_List, node, frame)

    def visit_Tuple(self, node, frame):
        self._made(super().visit_Tuple, node, frame)

    def visit_Dict(self, node, frame):
        self._made(super().visit_Dict, node, frame)


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    code_generator_class = BoundedCodeGenerator
    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def __init__(self):
        super().__init__(trim_blocks=True, lstrip_blocks=True, finalize=_checked_output)
        del self.globals["lipsum"]  # paragraphs of lorem ipsum, as many as asked for
        self.globals["raise_exception"] = _raise_exception
        self.globals["range"] = _bounded_range
        self.globals[_LOOP_STEP] = _loop_step
        self.filters = {name: _bounded_filter(name, f) for name, f in self.filters.items()}

    def call(self, context, obj, /, *args, **kwargs):
        meter = _meter()
        meter.step()
        method = getattr(obj, "__wrapped__", obj)  # str.format comes wrapped by the sandbox
        owner = getattr(method, "__self__", None)
        check = _METHOD_CHECKS.get(getattr(method, "__name__", "")) if isinstance(owner, str) else None
        if check is not None:
            if getattr(method, "__name__", "") == "join" and args and not isinstance(args[0], (list, tuple, str)):
                args = (list(args[0]), *args[1:])
            check(meter, owner, *args, **kwargs)
        return meter.made(super().call(context, obj, *args, **kwargs))

    def call_binop(self, context, operator, left, right):
        meter = _meter()
        _expect_binop(meter, operator, left, right)
        return meter.made(super().call_binop(context, operator, left, right))

    def getitem(self, obj, argument):
        value = super().getitem(obj, argument)
        return _meter().made(value) if isinstance(argument, slice) else value

    def checked_concat(self, mode, eval_ctx, parts):
        meter = _meter()
        meter.expect(sum(value_size(p, meter.chars) for p in parts), "a concatenation (~)")
        join = markup_join if mode == "markup" or (mode == "volatile" and eval_ctx.volatile) else str_join
        return meter.made(join(parts))

    def checked_value(self, value):
        return _meter().made(value)


def _checked_output(value):
    """What ``{{ ... }}`` prints is its text: a list printed is its items' text."""
    if not isinstance(value, str):
        meter = _meter()
        meter.expect(value_size(value, meter.chars), "printed text")
    return value


def _bounded_range(*args):
    _meter().expect(len(range(*args)), "a range")
    return safe_range(*args)  # the sandbox's own: at most MAX_RANGE numbers


def _loop_step():
    return ""  # BoundedEnvironment.call counted the step


def _raise_exception(message):
    raise TemplateRaised(f"the chat template refuses this conversation: {message}")
