// Chat templates rendered within a budget: the runtime's side of compiler/frontend/chat_template.py,
// with the same figures (compiler/facts.json) and the same messages.
//
// A chat template is Jinja code from a model file: its author's, not ours. @huggingface/jinja runs
// it with no way into JavaScript's own objects, but a loop nested in a loop, or a string doubled
// forty times, would hang the page or take its memory. One rendering may take (TEMPLATE_BUDGET):
//   steps: loop iterations (blocks run), calls and filters;
//   chars: characters, in any one value the template makes (a string; an array or object counts its
//          items and what they hold, nested ones included), its output included;
//   work:  characters and items of all the values it makes, added up;
// each grown by the conversation's own size (a long conversation renders long). An operation that can
// make a value much larger than its operands is checked before it runs (range, a block's text, the
// width of indent, join's separator, replace, tojson's indent), every value made is checked after.
// The interpreter is the library's, extended (BoundedInterpreter); the library itself is not changed
// beyond the exports its vendoring adds (scripts/vendor.mjs).

import {
  ArrayValue, BooleanValue, BreakControl, ContinueControl, Environment, FloatValue, FunctionValue, IntegerValue,
  Interpreter, ObjectValue, StringValue, Template, UndefinedValue, setupGlobals,
} from "./vendor/jinja.js";
import { CHAT_TEMPLATE_BUDGET } from "./facts.js";

// What a conversation adds: stepsPerMessage, and charsPerText and workPerText per character of its text.
export const TEMPLATE_BUDGET = CHAT_TEMPLATE_BUDGET;

export class ChatTemplateError extends Error {
  name = "ChatTemplateError";
}

/** The template called raise_exception: it refuses this conversation (an order of roles, say). */
export class TemplateRaised extends ChatTemplateError {
  name = "TemplateRaised";
}

export class TemplateBudgetError extends ChatTemplateError {
  name = "TemplateBudgetError";
  /** The steps the template had taken when it was stopped (set by renderChatTemplate): past a budget of
   * N steps, N + 1; stopped by a size, fewer. A figure that, unlike a time, a busy machine does not change. */
  steps = 0;
}

const number = (/** @type {number} */ n) => n.toLocaleString("en-US");

class Meter {
  /** @param {typeof TEMPLATE_BUDGET} budget @param {number} messages @param {number} text */
  constructor(budget, messages, text) {
    this.steps = budget.steps + budget.stepsPerMessage * messages;
    this.chars = budget.chars + budget.charsPerText * text;
    this.work = budget.work + budget.workPerText * text;
    this.stepsTaken = 0;
    this.workDone = 0;
  }

  step() {
    this.stepsTaken += 1;
    if (this.stepsTaken > this.steps) {
      throw new TemplateBudgetError(`the chat template ran past its budget of ${number(this.steps)} steps (loop ` +
        "iterations, calls and filters)");
    }
  }

  /** Before an operation: it would make a value of ``size``. @param {number} size @param {string} what */
  expect(size, what) {
    if (size > this.chars) {
      throw new TemplateBudgetError(`the chat template would make ${what} of ${number(size)} characters or items, ` +
        `past its budget of ${number(this.chars)}`);
    }
  }

  /** After an operation: ``value`` is within the budget; its size goes to the work done. @param {any} value */
  made(value) {
    const size = valueSize(value, this.chars);
    if (size > this.chars) {
      throw new TemplateBudgetError(`the chat template made a value of more than ${number(this.chars)} characters ` +
        "or items, its budget");
    }
    this.workDone += size;
    if (this.workDone > this.work) {
      throw new TemplateBudgetError(`the chat template made more than ${number(this.work)} characters or items in ` +
        "all, its budget");
    }
    return value;
  }
}

/**
 * Characters and items of a template value, nested ones included, counted until past ``limit``: a
 * string is its characters; an array one per item, an object two per entry, and what they hold.
 * With ``perItem`` > 1 it estimates the text the value prints as (quotes, commas, brackets).
 * @param {any} value @param {number} limit @param {number} [perItem]
 */
export function valueSize(value, limit, perItem = 1) {
  let size = 0;
  const stack = [value];
  while (stack.length && size <= limit) {
    const item = stack.pop();
    if (item?.type === "StringValue") {
      size += item.value.length;
    } else if (Array.isArray(item?.value)) {  // ArrayValue, TupleValue
      size += perItem * item.value.length;
      if (size > limit) break;
      for (const child of item.value) stack.push(child);
    } else if (item?.value instanceof Map) {  // ObjectValue, KeywordArgumentsValue, NamespaceValue
      size += 2 * perItem * item.value.size;
      for (const [key, entry] of item.value) {
        size += String(key).length;
        stack.push(entry);
      }
    } else if (perItem > 1) {
      size += 24;  // a number's digits
    }
  }
  return size;
}

/** The characters of the strings in the conversation and variables (the user's, not the template's). @param {any} value */
function textChars(value) {
  let total = 0;
  const stack = [value];
  while (stack.length) {
    const item = stack.pop();
    if (typeof item === "string") total += item.length;
    else if (item && typeof item === "object") for (const child of Object.values(item)) stack.push(child);
  }
  return total;
}

/** The deepest nesting of arrays and objects in ``value``, looking at no more than ``limit`` values. @param {any} value @param {number} limit */
function depth(value, limit) {
  let deepest = 0, seen = 0;
  const stack = [[value, 0]];
  while (stack.length && seen <= limit) {
    const [item, level] = stack.pop();
    seen += 1;
    deepest = Math.max(deepest, level);
    const children = Array.isArray(item?.value) ? item.value : item?.value instanceof Map ? [...item.value.values()] : [];
    for (const child of children) stack.push([child, level + 1]);
  }
  return deepest;
}

const TEXT = 4;  // valueSize's perItem for the text a value prints as

/** @param {Meter} meter @param {string} s @param {any[]} args @param {Map<string, any>} kwargs */
function expectReplace(meter, s, args, kwargs) {
  const [old, replacement, count] = [args[0] ?? kwargs.get("old"), args[1] ?? kwargs.get("new"), args[2] ?? kwargs.get("count")];
  if (old?.type !== "StringValue" || replacement?.type !== "StringValue") return;
  const grow = replacement.value.length - old.value.length;
  if (grow <= 0) return;
  let times = old.value ? s.split(old.value).length - 1 : s.length + 1;
  if (count?.type === "IntegerValue" && count.value >= 0) times = Math.min(times, count.value);
  meter.expect(s.length + times * grow, "a replacement");
}

/** Filters that can make a value much larger than their operand: check(meter, operand, args, kwargs). */
const FILTER_CHECKS = /** @type {Record<string, (meter: Meter, operand: any, args: any[], kwargs: Map<string, any>) => void>} */ ({
  indent(meter, operand, args, kwargs) {
    const width = args[0] ?? kwargs.get("width");
    const pad = width?.type === "IntegerValue" ? width.value : 4;
    if (operand?.type === "StringValue") {
      meter.expect(operand.value.length + operand.value.split("\n").length * Math.max(pad, 0), "an indented string");
    }
  },
  join(meter, operand, args, kwargs) {
    const separator = args[0] ?? kwargs.get("separator");
    const items = operand?.type === "StringValue" ? operand.value.length : Array.isArray(operand?.value) ? operand.value.length : 0;
    const gaps = separator?.type === "StringValue" ? separator.value.length * Math.max(items - 1, 0) : 0;
    meter.expect(valueSize(operand, meter.chars, TEXT) + gaps, "a join");
  },
  replace(meter, operand, args, kwargs) {
    if (operand?.type === "StringValue") expectReplace(meter, operand.value, args, kwargs);
  },
  tojson(meter, operand, args, kwargs) {
    const indent = kwargs.get("indent");
    const size = valueSize(operand, meter.chars, TEXT);
    const pad = indent?.type === "IntegerValue" && indent.value > 0 ? indent.value * depth(operand, meter.chars) : 0;
    meter.expect(size * (1 + pad), "a JSON text");
  },
  string(meter, operand) {
    meter.expect(valueSize(operand, meter.chars, TEXT), "a string");
  },
});

/** Values shared wherever they are made (loops, blocks): the library never changes a value but a namespace. */
const TRUE = new BooleanValue(true), FALSE = new BooleanValue(false), UNDEFINED = new UndefinedValue();
const EMPTY = new StringValue("");

/** Values that are already made (a name's, an item's): looking them up makes nothing. */
const LOOKUPS = new Set(["Identifier", "MemberExpression"]);
/** A node that stands for a value this interpreter already has (see evaluateCallExpression). */
const EVALUATED = "TesseraEvaluated";

/** The library's interpreter, counting steps and checking sizes (see the top of this file). */
class BoundedInterpreter extends Interpreter {
  /** @param {Environment} env @param {Meter} meter */
  constructor(env, meter) {
    super(env);
    this.meter = meter;
    /** A check of the arguments of the call or filter being evaluated: taken by the next evaluateArguments.
     * @type {((args: any[], kwargs: Map<string, any>) => void) | null} */
    this.pending = null;
    /** IntegerValue(k) at [k], made once for all the loops and ranges of this rendering (see evaluateFor).
     * @type {IntegerValue[]} */
    this.integers = [];
  }

  /** @param {number} k */
  integer(k) {
    return k >= 0 ? (this.integers[k] ??= new IntegerValue(k)) : new IntegerValue(k);
  }

  /** The library's range (see boundedRange), its integers shared as the loops' are. @param {any[]} args */
  range(args) {
    const numbers = boundedRange(this.meter, ...args.map((arg) => arg.value));
    return new ArrayValue(numbers.map((n) => (Number.isInteger(n) ? this.integer(n) : new FloatValue(n))));
  }

  /** @param {any} statement @param {Environment} environment */
  evaluate(statement, environment) {
    if (statement?.type === EVALUATED) return statement.value;
    const value = super.evaluate(statement, environment);
    const lookup = LOOKUPS.has(statement?.type) && statement.property?.type !== "SliceExpression";
    return lookup ? value : this.meter.made(value);
  }

  /** The library's, with a step counted and each statement's text checked before it is added.
   * @param {any[]} statements @param {Environment} environment */
  evaluateBlock(statements, environment) {
    this.meter.step();
    let result = "";
    for (const statement of statements) {
      const value = this.evaluate(statement, environment);
      if (value.type !== "NullValue" && value.type !== "UndefinedValue") {
        this.meter.expect(result.length + valueSize(value, this.meter.chars, TEXT), "a block's text");
        result += value.toString();
      }
    }
    return this.meter.made(result ? new StringValue(result) : EMPTY);
  }

  /**
   * The library's for loop, made cheap enough to count its iterations as the budget's steps. The
   * library's makes, before the first iteration, a scope and a closure for every item, and then in each
   * iteration ten values for `loop`, each of which costs a few hundred nanoseconds in V8 (the base class
   * of values sets a field that every subclass sets again): about 5 us an iteration, so a loop nested in a
   * loop took a second (ten on a busy machine) to reach its budget. This one binds the loop variable when
   * an iteration starts, checking every item's unpacking first as the library does, and shares what it
   * can between iterations, loops and ranges: true, false, undefined, the empty string and each integer
   * are made once. The output is the library's (tests/js/chat-template.test.mjs compares them).
   * @param {any} node @param {Environment} environment
   */
  evaluateFor(node, environment) {
    const scope = new Environment(environment);
    const select = node.iterable.type === "SelectExpression" ? node.iterable : null;  // for x in xs if test
    let iterable = this.evaluate(select ? select.lhs : node.iterable, scope);
    if (!(iterable instanceof ArrayValue || iterable instanceof ObjectValue)) {
      throw new Error(`Expected iterable or object type in for loop: got ${iterable.type}`);
    }
    if (iterable instanceof ObjectValue) iterable = iterable.keys();
    const [check, bind] = loopBinding(node.loopvar);
    const items = iterable.value.filter((item) => {  // all before the first iteration, in the library's order
      check(item);
      if (!select) return true;
      const itemScope = new Environment(scope);
      bind(itemScope, item);
      return this.evaluate(select.test, itemScope).__bool__().value;
    });
    const n = items.length;
    let result = "";
    let iterated = false;
    for (let i = 0; i < n; ++i) {
      scope.setVariable("loop", new ObjectValue(new Map([
        ["index", this.integer(i + 1)],
        ["index0", this.integer(i)],
        ["revindex", this.integer(n - i)],
        ["revindex0", this.integer(n - i - 1)],
        ["first", i === 0 ? TRUE : FALSE],
        ["last", i === n - 1 ? TRUE : FALSE],
        ["length", this.integer(n)],
        ["previtem", i > 0 ? items[i - 1] : UNDEFINED],
        ["nextitem", i < n - 1 ? items[i + 1] : UNDEFINED],
      ])));
      bind(scope, items[i]);
      try {
        result += this.evaluateBlock(node.body, scope).value;
      } catch (error) {
        if (error instanceof ContinueControl) continue;
        if (error instanceof BreakControl) break;
        throw error;
      }
      iterated = true;
    }
    if (!iterated) result += this.evaluateBlock(node.defaultBlock, scope).value;
    return new StringValue(result);
  }

  /** @param {any} expr @param {Environment} environment */
  evaluateCallExpression(expr, environment) {
    this.meter.step();
    const callee = expr.callee;
    if (callee?.type === "MemberExpression" && !callee.computed && callee.property?.value === "replace") {
      // str.replace: the string is evaluated here, once, so that its arguments can be checked against it.
      const object = this.evaluate(callee.object, environment);
      if (object?.type === "StringValue") {
        this.pending = (args, kwargs) => expectReplace(this.meter, object.value, args, kwargs);
      }
      expr = { ...expr, callee: { ...callee, object: { type: EVALUATED, value: object } } };
    }
    try {
      return super.evaluateCallExpression(expr, environment);
    } finally {
      this.pending = null;
    }
  }

  /** @param {any[]} args @param {Environment} environment @returns {[any[], Map<string, any>]} */
  evaluateArguments(args, environment) {
    const pending = this.pending;
    this.pending = null;  // not for the calls and filters among the arguments
    const evaluated = super.evaluateArguments(args, environment);
    pending?.(evaluated[0], evaluated[1]);
    return evaluated;
  }

  /** @param {any} operand @param {any} filterNode @param {Environment} environment */
  applyFilter(operand, filterNode, environment) {
    this.meter.step();
    const called = filterNode?.type === "CallExpression";
    const check = FILTER_CHECKS[called ? filterNode.callee?.value : filterNode?.value];
    const saved = this.pending;
    if (check && called) this.pending = (args, kwargs) => check(this.meter, operand, args, kwargs);
    else if (check) check(this.meter, operand, [], new Map());
    try {
      return super.applyFilter(operand, filterNode, environment);
    } finally {
      this.pending = saved;
    }
  }
}

/**
 * How a loop binds its variable(s): [check(item), bind(scope, item)]. The loop checks every item before
 * its first iteration, so that an item a tuple cannot unpack is refused then, as the library refuses it.
 * @param {any} loopvar
 * @returns {[(item: any) => void, (scope: Environment, item: any) => void]}
 */
function loopBinding(loopvar) {
  if (loopvar.type === "Identifier") return [() => {}, (scope, item) => scope.setVariable(loopvar.value, item)];
  if (loopvar.type !== "TupleLiteral") throw new Error(`Invalid loop variable(s): ${loopvar.type}`);
  const names = loopvar.value;
  const check = (/** @type {any} */ item) => {
    if (item.type !== "ArrayValue") throw new Error(`Cannot unpack non-iterable type: ${item.type}`);
    if (names.length !== item.value.length) {
      throw new Error(`Too ${names.length > item.value.length ? "few" : "many"} items to unpack`);
    }
  };
  return [check, (scope, item) => {
    for (let j = 0; j < names.length; ++j) {
      if (names[j].type !== "Identifier") throw new Error(`Cannot unpack non-identifier type: ${names[j].type}`);
      scope.setVariable(names[j].value, item.value[j]);
    }
  }];
}

/** The library's range, with its length checked first. @param {Meter} meter @param {number[]} args */
function boundedRange(meter, ...args) {
  let [start, stop, step = 1] = args;
  if (stop === undefined) [start, stop] = [0, start];
  if (step === 0) throw new Error("range() step must not be zero");
  meter.expect(Math.max(0, Math.ceil((stop - start) / step)), "a range");
  const result = [];
  for (let i = start; step > 0 ? i < stop : i > stop; i += step) result.push(i);
  return result;
}

/** @type {Map<string, Template>} */
const parsed = new Map();

/** @param {string} source */
function parseTemplate(source) {
  let template = parsed.get(source);
  if (!template) {
    try {
      template = new Template(source);
    } catch (error) {
      throw new ChatTemplateError(`the chat template does not parse: ${/** @type {Error} */ (error).message}`);
    }
    if (parsed.size >= 8) parsed.delete(parsed.keys().next().value);
    parsed.set(source, template);
  }
  return template;
}

/**
 * The conversation as the template lays it out. ChatTemplateError when it does not parse or fails
 * (TemplateRaised when it refuses the conversation); TemplateBudgetError past its budget.
 * @param {string} source the template
 * @param {{messages: any[], [name: string]: unknown}} variables messages, add_generation_prompt, bos_token ...
 * @param {typeof TEMPLATE_BUDGET} [budget]
 * @returns {string}
 */
export function renderChatTemplate(source, variables, budget = TEMPLATE_BUDGET) {
  const template = parseTemplate(source);
  const messages = variables.messages;
  const meter = new Meter(budget, Array.isArray(messages) ? messages.length : 0, textChars(variables));
  const globals = new Environment();
  setupGlobals(globals);  // true, none, strftime_now ... as the library's Template.render has them
  const env = new Environment(globals);
  const interpreter = new BoundedInterpreter(env, meter);
  env.setVariable("range", new FunctionValue((/** @type {any[]} */ args) => interpreter.range(args)));
  env.set("raise_exception", (/** @type {unknown} */ message) => {
    throw new TemplateRaised(`the chat template refuses this conversation: ${message}`);
  });
  for (const [name, value] of Object.entries(variables)) env.set(name, value);
  try {
    return interpreter.run(template.parsed).value;
  } catch (error) {
    if (error instanceof ChatTemplateError) throw withSteps(error, meter);
    const message = /** @type {Error} */ (error)?.message ?? String(error);
    if (error instanceof RangeError && /call stack/i.test(message)) {
      throw withSteps(new TemplateBudgetError("the chat template recursed too deeply (a macro that calls itself?)"), meter);
    }
    if (error instanceof RangeError && /string length/i.test(message)) {
      throw withSteps(new TemplateBudgetError("the chat template made a string longer than this browser allows"), meter);
    }
    throw new ChatTemplateError(`the chat template failed: ${/** @type {Error} */ (error)?.name ?? "Error"}: ${message}`);
  }
}

/** A budget error with the steps taken when it was stopped. @param {ChatTemplateError} error @param {Meter} meter */
function withSteps(error, meter) {
  if (error instanceof TemplateBudgetError) error.steps = meter.stepsTaken;
  return error;
}
