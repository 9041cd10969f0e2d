// What the loader checks in executable.json and tensor-cache.json after their JSON Schemas
// (docs/format.md, "What a loader checks"): the facts a schema cannot state, because they relate one
// value to another. The Python loader checks the same (tessera/vm/format_checks.py), in the same words.

import { DTYPE_BYTES, MAX_BUFFER_BYTES, MAX_EXPRESSION_NESTING, MAX_SINFO_NESTING } from "./facts.js";
import { checkLiveStorages, evaluate } from "./plan-checks.js";
import { FormatError, jsonPath } from "./schema.js";
import { parseShapeExpr, shapeFacts } from "./shape.js";

/** Names every JavaScript object already has: a shape variable named so would read the prototype's. */
const OBJECT_MEMBERS = new Set(Object.getOwnPropertyNames(Object.prototype));

/** @param {string} what @param {(string|number)[]} where @param {string} problem @returns {never} */
function fail(what, where, problem) {
  throw new FormatError(`${what} is malformed: ${jsonPath(where)} ${problem}`);
}

/** @param {string} what @param {any[]} names @param {(string|number)[]} where @param {string} kind */
function unique(what, names, where, kind) {
  const seen = new Set();
  names.forEach((name, i) => {
    if (seen.has(name)) fail(what, [...where, i], `names the ${kind} '${name}' a second time`);
    seen.add(name);
  });
}

/** The parsed expression ``text``, which may use only ``names``.
 * @param {string} what @param {string} text @param {(string|number)[]} where @param {Set<string>} names @param {string} kind */
function expr(what, text, where, names, kind = "a variable of the function") {
  let depth = 0, deepest = 0;
  for (const c of text) {
    depth += c === "(" ? 1 : c === ")" ? -1 : 0;
    deepest = Math.max(deepest, depth);
  }
  if (deepest > MAX_EXPRESSION_NESTING) fail(what, where, `nests parentheses deeper than ${MAX_EXPRESSION_NESTING}`);
  let node;
  try {
    node = parseShapeExpr(text);
  } catch {
    fail(what, where, `is '${text}', not a shape expression`);
  }
  const { vars, dividesByZero } = shapeFacts(node);
  for (const name of vars) if (!names.has(name)) fail(what, where, `uses '${name}', which is not ${kind}`);
  if (dividesByZero) fail(what, where, `is '${text}', which divides by zero`);
  return node;
}

/**
 * Throw a FormatError naming the first cross-reference of ``doc`` (which matches the schema) that is wrong.
 * @param {any} doc @param {string} what
 */
export function checkExecutable(doc, what) {
  const modules = doc.modules.map((/** @type {any} */ m) => m.path);
  unique(what, modules, ["modules"], "module");
  unique(what, doc.constants, ["constants"], "constant");
  unique(what, doc.libraries, ["libraries"], "library function");
  const known = new Set(modules);
  doc.kernels.forEach((/** @type {any} */ kernel, /** @type {number} */ k) => {
    if (!known.has(kernel.module)) fail(what, ["kernels", k, "module"], `is '${kernel.module}', which the executable's modules do not list`);
    kernel.abi.bindings.forEach((/** @type {any} */ b, /** @type {number} */ i) => {
      if (b.index !== i) fail(what, ["kernels", k, "abi", "bindings", i, "index"], `is ${b.index}, not ${i}`);
    });
    const scalars = kernel.abi.scalars.map((/** @type {any} */ s) => s.name);
    unique(what, scalars, ["kernels", k, "abi", "scalars"], "scalar");
    kernel.grid.forEach((/** @type {string} */ text, /** @type {number} */ axis) =>
      expr(what, text, ["kernels", k, "grid", axis], new Set(scalars), "one of the kernel's scalars"));
  });
  checkDevices(doc, what);
  for (const [name, record] of Object.entries(doc.functions)) checkFunction(doc, what, name, record);
}

/**
 * Version 4 (a build split across devices) lists its devices, version 3 none; every `device` of a kernel
 * or a function names one of them, and every weight of `constant_devices` is a constant placed on them.
 * @param {any} doc @param {string} what
 */
function checkDevices(doc, what) {
  const count = doc.devices?.length ?? 0;
  if ((doc.version === 4) !== (count > 0)) fail(what, ["devices"], "must list the devices of a version 4 executable, and only of one");
  const most = Math.max(count, 1);
  /** @param {(string|number)[]} where @param {any} device */
  const check = (where, device) => {
    if (Number.isInteger(device) && device >= most) fail(what, where, `is ${device}, but the executable has ${most} device(s)`);
  };
  // Where the schema lets a "device" stand: kernels, parameters, tensors, storages, instructions.
  doc.kernels.forEach((/** @type {any} */ kernel, /** @type {number} */ k) => check(["kernels", k, "device"], kernel.device));
  for (const [name, record] of Object.entries(doc.functions)) {
    const { params, tensors, memory, code } = /** @type {any} */ (record);
    params.forEach((/** @type {any} */ p, /** @type {number} */ i) => check(["functions", name, "params", i, "device"], p.device));
    for (const [reg, tensor] of Object.entries(tensors)) check(["functions", name, "tensors", reg, "device"], /** @type {any} */ (tensor).device);
    memory.storages.forEach((/** @type {any} */ s, /** @type {number} */ i) => check(["functions", name, "memory", "storages", i, "device"], s.device));
    code.forEach((/** @type {any} */ op, /** @type {number} */ pc) => check(["functions", name, "code", pc, "device"], op.device));
  }
  // Each arena buffer's device too.
  for (const [name, record] of Object.entries(doc.functions)) {
    const { buffers, buffer_devices: devices } = /** @type {any} */ (record).memory;
    if (devices === undefined) continue;
    const where = ["functions", name, "memory", "buffer_devices"];
    if (devices.length !== buffers.length) fail(what, where, `lists ${devices.length} devices for ${buffers.length} buffers`);
    devices.forEach((/** @type {number} */ d, /** @type {number} */ i) => check([...where, i], d));
  }
  for (const [name, devices] of Object.entries(doc.constant_devices ?? {})) {
    if (!doc.constants.includes(name) || /** @type {number[]} */ (devices).some((d) => d >= count)) {
      fail(what, ["constant_devices", name], "names a weight or device the executable does not have");
    }
  }
}

/** @param {any} doc @param {string} what @param {string} name @param {any} record */
function checkFunction(doc, what, name, record) {
  const base = ["functions", name];
  const bad = (/** @type {(string|number)[]} */ where, /** @type {string} */ problem) => fail(what, [...base, ...where], problem);
  const registers = record.registers;
  const symbols = new Set(Object.keys(record.symbols));
  const register = (/** @type {number} */ reg, /** @type {(string|number)[]} */ where) => {
    if (reg >= registers) bad(where, `is register ${reg}, but the function has ${registers} registers`);
  };
  const shape = (/** @type {string} */ text, /** @type {(string|number)[]} */ where) => expr(what, text, [...base, ...where], symbols);
  /** @type {Record<string, number>} */
  const upperBounds = Object.create(null);
  for (const [k, v] of Object.entries(record.symbols)) if (/** @type {any} */ (v).upper_bound !== null) upperBounds[k] = /** @type {any} */ (v).upper_bound;
  /** A tensor's dimension: a shape expression, not negative (where its symbols have upper bounds, at them).
   * @param {string} text @param {(string|number)[]} where */
  const dimension = (text, where) => {
    const node = shape(text, where);
    let value;
    try {
      value = evaluate(node, upperBounds);
    } catch {
      return;  // a symbol without a bound; what divides by 0 fails when run
    }
    if (value < 0) bad(where, `is '${text}'${shapeFacts(node).vars.size ? `, ${value} at the upper bounds` : ""}: a negative dimension`);
  };
  /** A struct info and its fields, ``depth`` tuples below the top (which a refusal names).
   * @param {any} info @param {(string|number)[]} where @param {number} [depth] */
  const sinfo = (info, where, depth = 0) => {
    if (depth > MAX_SINFO_NESTING) bad(where.slice(0, where.length - 2 * depth), `is struct info nested deeper than ${MAX_SINFO_NESTING} levels`);
    for (const key of ["shape", "values"]) {
      (info[key] ?? []).forEach((/** @type {string} */ t, /** @type {number} */ i) =>
        (key === "shape" && info.kind === "tensor" ? dimension : shape)(t, [...where, key, i]));
    }
    if (info.value !== undefined && info.value !== null) shape(info.value, [...where, "value"]);
    (info.fields ?? []).forEach((/** @type {any} */ f, /** @type {number} */ i) => sinfo(f, [...where, "fields", i], depth + 1));
  };
  for (const symbol of symbols) {
    if (OBJECT_MEMBERS.has(symbol)) bad(["symbols", symbol], "is a name every JavaScript object already has");
  }
  const bounds = Object.fromEntries(Object.entries(record.symbols).map(([k, v]) => [k, /** @type {any} */ (v).upper_bound]));
  record.unbounded_symbols.forEach((/** @type {string} */ s, /** @type {number} */ i) => {
    if (!Object.hasOwn(bounds, s) || bounds[s] !== null) bad(["unbounded_symbols", i], `is '${s}', which is not a symbol without an upper bound`);
  });
  if (Object.values(bounds).filter((b) => b === null).length !== new Set(record.unbounded_symbols).size) {
    bad(["unbounded_symbols"], "does not list every symbol whose upper_bound is null");
  }
  record.params.forEach((/** @type {any} */ p, /** @type {number} */ i) => {
    register(p.register, ["params", i, "register"]);
    sinfo(p.sinfo, ["params", i, "sinfo"]);
    if (p.state && !Object.hasOwn(record.tensors, String(p.register))) {
      bad(["params", i], "is state without an entry in 'tensors' (a state tensor has a known shape)");
    }
  });
  unique(what, record.params.map((/** @type {any} */ p) => p.register), [...base, "params"], "register");
  sinfo(record.result, ["result"]);
  if (record.result_names !== undefined) {  // one distinct name per value of the result, tuples flattened
    /** @type {(info: any) => number} */
    const leaves = (info) => info.kind === "tuple" ? info.fields.reduce((n, /** @type {any} */ f) => n + leaves(f), 0) : 1;
    unique(what, record.result_names, [...base, "result_names"], "result");
    if (record.result_names.length !== leaves(record.result)) {
      bad(["result_names"], `has ${record.result_names.length} names for a result of ${leaves(record.result)} values`);
    }
  }
  // The plan: storages by token, each inside its buffer.
  const buffers = record.memory.buffers;
  /** @type {Map<number, any>} */
  const storages = new Map();
  record.memory.storages.forEach((/** @type {any} */ s, /** @type {number} */ i) => {
    const where = ["memory", "storages", i];
    if (storages.has(s.index)) bad([...where, "index"], `is ${s.index}, the token of an earlier storage too`);
    storages.set(s.index, s);
    shape(s.size, [...where, "size"]);
    if (s.buffer === null) return;
    if (s.buffer >= buffers.length) bad([...where, "buffer"], `is ${s.buffer}, but the plan has ${buffers.length} buffers`);
    if (s.offset === null || s.static_size === null) bad(where, "is placed in a buffer without an offset and a static_size");
    if (s.offset + s.static_size > buffers[s.buffer]) {
      bad(where, `lies outside its buffer: bytes ${s.offset} to ${s.offset + s.static_size} of ${buffers[s.buffer]}`);
    }
  });
  buffers.forEach((/** @type {number} */ size, /** @type {number} */ i) => {
    if (size > MAX_BUFFER_BYTES) bad(["memory", "buffers", i], `is ${size} bytes, more than any device holds`);
  });
  for (const [key, tensor] of Object.entries(record.tensors)) {
    register(Number(key), ["tensors", key]);
    /** @type {any} */ (tensor).shape.forEach((/** @type {string} */ t, /** @type {number} */ i) => dimension(t, ["tensors", key, "shape", i]));
    shape(/** @type {any} */ (tensor).bytes, ["tensors", key, "bytes"]);
  }
  const bounded = Object.values(bounds).every((b) => b !== null);
  for (const [key, location] of Object.entries(record.locations)) {
    const where = ["locations", key];
    register(Number(key), where);
    const tensor = record.tensors[key];
    if (!Object.hasOwn(record.tensors, key)) bad(where, "gives a place to a register without an entry in 'tensors'");
    const loc = /** @type {any} */ (location);
    if (loc.kind === "param") {
      if (loc.index >= record.params.length || record.params[loc.index].register !== Number(key)) {
        bad([...where, "index"], `is ${loc.index}, which is not the parameter in register ${key}`);
      }
    } else if (loc.kind === "constant") {
      if (!doc.constants.includes(loc.name)) bad([...where, "name"], `is '${loc.name}', which the executable's constants do not list`);
    } else if (loc.kind === "arena") {
      const storage = storages.get(loc.token);
      if (!storage || storage.buffer === null) bad([...where, "token"], `is ${loc.token}, which is not a storage the plan places in its arena`);
      if (bounded) {
        let nbytes;
        try {
          nbytes = evaluate(shape(tensor.bytes, ["tensors", key, "bytes"]), bounds);
        } catch (error) {
          bad(["tensors", key, "bytes"], `cannot be evaluated at the upper bounds: ${/** @type {Error} */ (error).message}`);
        }
        if (!(nbytes >= 0 && nbytes <= MAX_BUFFER_BYTES)) bad(["tensors", key, "bytes"], `is ${nbytes} bytes at the upper bounds`);
        if (nbytes > storage.static_size) {
          bad(where, `puts ${nbytes} bytes (tensors['${key}'].bytes at the upper bounds) in storage ${loc.token} of ${storage.static_size} bytes`);
        }
      }
    } else if (loc.kind === "storage") {
      register(loc.register, [...where, "register"]);
    }
  }
  record.runtime_allocations.forEach((/** @type {any} */ a, /** @type {number} */ i) => {
    register(a.register, ["runtime_allocations", i, "register"]);
    shape(a.size, ["runtime_allocations", i, "size"]);
  });
  checkCode(doc, record, base, bad, register, shape, sinfo, dimension);
  // Last: it follows registers and jumps, which the checks above found in range.
  checkLiveStorages(record, bad);
}

/**
 * @param {any} doc @param {any} record @param {(string|number)[]} base
 * @param {(where: (string|number)[], problem: string) => never} bad
 * @param {(reg: number, where: (string|number)[]) => void} register
 * @param {(text: string, where: (string|number)[]) => any} shape
 * @param {(sinfo: any, where: (string|number)[]) => void} sinfo
 * @param {(text: string, where: (string|number)[]) => void} dimension
 */
function checkCode(doc, record, base, bad, register, shape, sinfo, dimension) {
  const code = record.code;
  const last = code[code.length - 1];
  if (last.op !== "ret" && last.op !== "goto") {
    bad(["code", code.length - 1], "is the last instruction but not a ret or goto: the code would run past its end");
  }
  /** @type {Map<number, number[]>} */
  const tuples = new Map();
  code.forEach((/** @type {any} */ op, /** @type {number} */ pc) => {
    const where = ["code", pc];
    for (const key of ["reg", "dst", "src", "cond", "callee"]) {
      if (op[key] !== undefined && op[key] !== null) register(op[key], [...where, key]);
    }
    for (const key of ["args", "outs", "fields"]) (op[key] ?? []).forEach((/** @type {number} */ r, /** @type {number} */ i) => register(r, [...where, key, i]));
    for (const key of ["scalars", "shape", "values"]) {
      // alloc_tensor's shape is a tensor's
      (op[key] ?? []).forEach((/** @type {string} */ t, /** @type {number} */ i) => (key === "shape" ? dimension : shape)(t, [...where, key, i]));
    }
    for (const key of ["size", "value"]) if (typeof op[key] === "string") shape(op[key], [...where, key]);
    for (const key of ["else", "target"]) {
      if (op[key] !== undefined && op[key] >= code.length) bad([...where, key], `is ${op[key]}, past the function's ${code.length} instructions`);
    }
    if (op.op === "match") sinfo(op.sinfo, [...where, "sinfo"]);
    else if (op.op === "launch") {
      if (op.kernel >= doc.kernels.length) bad([...where, "kernel"], `is ${op.kernel}, but the executable has ${doc.kernels.length} kernels`);
      const abi = doc.kernels[op.kernel].abi;
      const bound = op.args.length + op.outs.length;
      if (bound !== abi.bindings.length) bad(where, `binds ${bound} tensors to kernel ${op.kernel}, whose ABI lists ${abi.bindings.length}`);
      if (op.scalars.length !== abi.scalars.length) {
        bad([...where, "scalars"], `has ${op.scalars.length} scalars for kernel ${op.kernel}, whose ABI lists ${abi.scalars.length}`);
      }
      // A kernel reads and writes only the memory of its own device (a split build's tensors name theirs).
      const device = doc.kernels[op.kernel].device ?? 0;
      for (const reg of [...op.args, ...op.outs]) {
        const on = record.tensors[String(reg)]?.device ?? device;
        if (on !== device) bad(where, `binds register ${reg}, on device ${on}, to kernel ${op.kernel}, which runs on device ${device}`);
      }
    } else if (op.op === "to_device") {
      if ((record.tensors[String(op.dst)]?.device ?? op.device) !== op.device) bad([...where, "dst"], `is not a tensor on device ${op.device}`);
    } else if (op.op === "call_builtin") {
      if (!doc.libraries.includes(op.name)) bad([...where, "name"], `is '${op.name}', which the executable's libraries do not list`);
    } else if (op.op === "call" || op.op === "func") {
      const callee = op.op === "call" ? op.func : op.name;
      if (callee !== undefined && !Object.hasOwn(doc.functions, callee)) {
        bad([...where, op.op === "call" ? "func" : "name"], `is '${callee}', which is not a function of the executable`);
      }
    } else if (op.op === "tuple" && !tuples.has(op.dst)) {
      tuples.set(op.dst, op.fields);
    }
  });
  // No tuple holds itself, directly or through others: a runtime follows tuples to a result's tensors.
  /** @type {Set<number>} */
  const done = new Set();
  for (const start of tuples.keys()) {
    const path = new Set([start]);
    const stack = [{ reg: start, at: 0 }];
    while (stack.length) {
      const top = stack[stack.length - 1];
      const fields = /** @type {number[]} */ (tuples.get(top.reg));
      if (top.at === fields.length) {
        stack.pop();
        path.delete(top.reg);
        done.add(top.reg);
        continue;
      }
      const field = fields[top.at++];
      if (path.has(field)) bad(["code"], `builds a tuple in register ${field} that holds itself`);
      if (tuples.has(field) && !done.has(field)) {
        path.add(field);
        stack.push({ reg: field, at: 0 });
      }
    }
  }
}

/**
 * Throw a FormatError naming the first record of ``doc`` (which matches the schema) that lies outside its
 * shard, is misaligned, overlaps another record, disagrees with its shape, or repeats a name.
 * @param {any} doc @param {string} what
 */
export function checkTensorCache(doc, what) {
  const names = new Set(), paths = new Set();
  doc.records.forEach((/** @type {any} */ shard, /** @type {number} */ s) => {
    if (paths.has(shard.dataPath)) fail(what, ["records", s, "dataPath"], `is '${shard.dataPath}', the path of an earlier shard too`);
    paths.add(shard.dataPath);
    /** @type {[number, number, number][]} */
    const ranges = [];
    shard.records.forEach((/** @type {any} */ record, /** @type {number} */ r) => {
      const where = ["records", s, "records", r];
      if (names.has(record.name)) fail(what, [...where, "name"], `is '${record.name}', the name of an earlier record too`);
      names.add(record.name);
      const item = DTYPE_BYTES[record.dtype]?.host;
      const count = record.shape.reduce((/** @type {number} */ n, /** @type {number} */ d) => n * d, 1);
      if (count * item !== record.nbytes) {
        fail(what, [...where, "nbytes"], `is ${record.nbytes}, but a ${record.dtype} tensor of shape [${record.shape.join(", ")}] has ${count * item} bytes`);
      }
      const begin = record.byteOffset, end = record.byteOffset + record.nbytes;
      if (begin % item) fail(what, [...where, "byteOffset"], `is ${begin}, not a multiple of ${item}, the size of a ${record.dtype} element (misaligned)`);
      if (end > shard.nbytes) fail(what, where, `lies outside its shard: bytes ${begin} to ${end} of ${shard.nbytes}`);
      ranges.push([begin, end, r]);
    });
    // Records may name the very same bytes (a bundle shares them between names), never part of another's.
    /** @type {[number, number, number] | null} */
    let widest = null;
    for (const [begin, end, r] of ranges.filter(([b, e]) => e > b).sort((x, y) => x[0] - y[0] || x[1] - y[1] || x[2] - y[2])) {
      if (widest && begin < widest[1] && !(begin === widest[0] && end === widest[1])) {
        fail(what, ["records", s, "records", r], `overlaps records[${s}].records[${widest[2]}]: bytes ${begin} to ${end} and ${widest[0]} to ${widest[1]}`);
      }
      if (!widest || end > widest[1]) widest = [begin, end, r];
    }
  });
}
