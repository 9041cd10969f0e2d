// What the loader checks of a function's memory plan and launches beyond their cross-references
// (docs/format.md, "What a loader checks"). The Python loader (tessera/vm/plan_checks.py) and runtime-native
// (plan_checks.c) check the same, alike, so that the three refuse the same files.
//
// - At load: no two tensors of different storages of an arena share bytes while both are live. A plan that
//   breaks this runs and answers garbage, which no later check would notice.
// - Once the device is known: every storage's offset a multiple of the device's storage alignment, and
//   every launch's grid at the upper bounds within the device's workgroups per dimension. A device would
//   refuse either only inside the first launch that meets it (a GPUValidationError).
//
// When a tensor of a storage is live: from the first instruction that uses its register (an `arena`
// location), or a value that may hold it, to the last; a returned register is live past the end.
// `move`, `tuple` and `get` read no bytes, they pass a tensor on: the value they make is followed instead
// (a `get` of a register one `tuple` built takes that field alone), and so is a `call`'s result, which may
// be one of its arguments. Code that jumps back (a loop) is not bounded this way, and then every storage
// counts as live for the whole function, as it does when values pass each other on in more rounds than
// MAX_ALIAS_ROUNDS.

// Shared with the other runtimes (compiler/facts.json): MAX_ALIAS_ROUNDS, the rounds of following values passed
// on, from the last instruction to the first; WORD_BYTES, as every kernel reads and writes its tensors in 4-byte
// words, whatever its device.
import { MAX_ALIAS_ROUNDS, WEBGPU_DEFAULT_LIMITS, WORD_BYTES } from "./facts.js";
import { jsonPath } from "./schema.js";
import { parseShapeExpr } from "./shape.js";

/** A grid is passed to a kernel as 32-bit integers: what a device without a stated limit takes. */
export const MOST_WORKGROUPS = 2 ** 31 - 1;

/**
 * The value of a parsed shape expression with the variables of `env`, as a double (exact to 2^53, and past
 * it still of the right sign and size for a check to compare); an Error for a variable `env` lacks or a
 * division by zero.
 * @param {any} node @param {Record<string, number>} env @returns {number}
 */
export function evaluate(node, env) {
  if (node.kind === "num") return node.value;
  if (node.kind === "var") {
    if (!Object.hasOwn(env, node.name)) throw new Error(`symbolic variable '${node.name}' has no value`);
    return env[node.name];
  }
  const a = evaluate(node.a, env), b = evaluate(node.b, env);
  if ((node.op === "//" || node.op === "%") && b === 0) throw new Error("division by zero");
  switch (node.op) {
    case "+": return a + b;
    case "-": return a - b;
    case "*": return a * b;
    case "//": return Math.floor(a / b);
    case "%": return a - b * Math.floor(a / b);
    case "min": return Math.min(a, b);
    default: return Math.max(a, b);
  }
}

/**
 * [first, last] instruction at which each register's value is live, `code.length` for a result; registers
 * no instruction uses are left out. null when the code is not bounded this way.
 * @param {any} record @returns {Map<number, [number, number]> | null}
 */
export function registerSpans(record) {
  const code = record.code;
  const end = code.length;
  for (const [pc, op] of code.entries()) {
    if ((op.op === "goto" && op.target <= pc) || (op.op === "if" && op.else <= pc)) return null;
  }
  /** @type {Map<number, number>} */ const first = new Map();
  /** @type {Map<number, number>} */ const last = new Map();
  const use = (/** @type {number} */ reg, /** @type {number} */ pc) => {
    first.set(reg, Math.min(first.get(reg) ?? pc, pc));
    last.set(reg, Math.max(last.get(reg) ?? pc, pc));
  };
  /** @type {Map<number, number>} */ const writers = new Map();
  /** @type {Map<number, number[]>} */ const built = new Map();
  for (const op of code) {
    if (op.dst === undefined || op.dst === null) continue;
    writers.set(op.dst, (writers.get(op.dst) ?? 0) + 1);
    if (op.op === "tuple") built.set(op.dst, op.fields);
  }
  /** @type {[number, number][]} */ const passed = [];  // [source, value made from it], in program order
  for (const [pc, op] of code.entries()) {
    if (op.op === "move") passed.push([op.src, op.dst]);
    else if (op.op === "tuple") for (const field of op.fields) passed.push([field, op.dst]);
    else if (op.op === "get") {
      const fields = writers.get(op.src) === 1 ? built.get(op.src) : undefined;
      passed.push([fields !== undefined && op.index < fields.length ? fields[op.index] : op.src, op.dst]);
    } else {
      for (const key of ["reg", "dst", "src", "cond", "callee"]) if (op[key] !== undefined && op[key] !== null) use(op[key], pc);
      for (const key of ["args", "outs", "fields"]) for (const reg of op[key] ?? []) use(reg, pc);
      if (op.op === "call") for (const arg of op.args) passed.push([arg, op.dst]);
      else if (op.op === "ret") use(op.src, end);
    }
  }
  for (let round = 0; round < MAX_ALIAS_ROUNDS; round++) {
    let changed = false;
    for (let i = passed.length - 1; i >= 0; i--) {
      const [source, made] = passed[i];
      const madeFirst = first.get(made), madeLast = last.get(made);
      if (madeFirst === undefined || madeLast === undefined) continue;
      const low = Math.min(first.get(source) ?? madeFirst, madeFirst), high = Math.max(last.get(source) ?? madeLast, madeLast);
      if (low !== first.get(source) || high !== last.get(source)) {
        first.set(source, low);
        last.set(source, high);
        changed = true;
      }
    }
    if (!changed) return new Map([...first].map(([reg, low]) => [reg, [low, /** @type {number} */ (last.get(reg))]]));
  }
  return null;
}

/** Lexicographic order of number arrays. @param {number[]} a @param {number[]} b */
const lexicographic = (a, b) => {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i] - b[i];
  return 0;
};

/**
 * [first, last, storage, buffer, first byte, end byte] of each tensor of the arena while it is live, by its
 * storage's position in `memory.storages`, in the order they become live. A storage holds several tensors
 * one after another, each its own size (at the upper bounds) and lifetime; registers of one storage live at
 * once (a `get` that names its field's place) are one tensor, as large as the largest. Where the code is
 * not bounded, each storage is one tensor of its whole size, live throughout.
 * @param {any} record @returns {number[][]}
 */
export function arenaTensors(record) {
  const storages = record.memory.storages;
  const position = new Map(storages.map((/** @type {any} */ s, /** @type {number} */ i) => [s.index, i]));
  const spans = registerSpans(record);
  /** @type {number[][]} */
  const found = [];  // [storage, first, last, bytes]
  if (spans === null) {
    storages.forEach((/** @type {any} */ s, /** @type {number} */ i) => { if (s.buffer !== null) found.push([i, 0, record.code.length, s.static_size]); });
  } else {
    /** @type {Record<string, number>} */
    const bounds = Object.create(null);
    for (const [name, s] of Object.entries(record.symbols)) if (/** @type {any} */ (s).upper_bound !== null) bounds[name] = /** @type {any} */ (s).upper_bound;
    for (const [key, location] of Object.entries(record.locations)) {
      const span = spans.get(Number(key));
      if (/** @type {any} */ (location).kind !== "arena" || span === undefined) continue;
      const storage = /** @type {number} */ (position.get(/** @type {any} */ (location).token));
      let size = storages[storage].static_size;
      try {
        size = Math.min(size, evaluate(parseShapeExpr(record.tensors[key].bytes), bounds));
      } catch {
        // no bound: as large as its storage
      }
      found.push([storage, span[0], span[1], size]);
    }
  }
  /** @type {number[][]} */
  const merged = [];
  for (const [storage, low, high, size] of found.sort(lexicographic)) {
    const top = merged[merged.length - 1];
    if (top && top[0] === storage && low <= top[2]) [top[2], top[3]] = [Math.max(top[2], high), Math.max(top[3], size)];
    else merged.push([storage, low, high, size]);
  }
  return merged.filter(([, , , size]) => size > 0).map(([storage, low, high, size]) => {
    const { buffer, offset } = storages[storage];
    return [low, high, storage, buffer, offset, offset + size];
  }).sort(lexicographic);
}

/**
 * [storage, other storage, first byte, end byte, instruction] of the first tensor of the arena, in the
 * order they become live, that shares bytes of its buffer with a tensor of another storage while both are
 * live; null when there is none. A sweep over the instructions keeps the live tensors by place, where each
 * new one need only be compared with its two neighbours: tensors live at once share no byte, else the
 * sweep stops.
 * @param {any} record @returns {number[] | null}
 */
export function liveOverlap(record) {
  const tensors = arenaTensors(record);
  const byEnd = [...tensors].sort((a, b) => lexicographic([a[1], a[2], a[0]], [b[1], b[2], b[0]]));
  /** @type {number[][]} */ const live = [];  // ordered by (buffer, first byte)
  const place = (/** @type {number} */ buffer, /** @type {number} */ begin) => {
    let low = 0, high = live.length;
    while (low < high) {
      const mid = (low + high) >> 1;
      if (live[mid][3] < buffer || (live[mid][3] === buffer && live[mid][4] < begin)) low = mid + 1;
      else high = mid;
    }
    return low;
  };
  let ended = 0;
  for (const item of tensors) {
    const [start, , storage, buffer, begin, stop] = item;
    while (ended < byEnd.length && byEnd[ended][1] < start) {
      const gone = byEnd[ended++];
      live.splice(place(gone[3], gone[4]), 1);
    }
    const at = place(buffer, begin);
    for (const other of live.slice(Math.max(at - 1, 0), at + 1)) {
      if (other[3] === buffer && other[4] < stop && begin < other[5]) {
        return [storage, other[2], Math.max(begin, other[4]), Math.min(stop, other[5]), start];
      }
    }
    live.splice(at, 0, item);
  }
  return null;
}

/**
 * `bad(where, problem)` for two storages of the function `record` that share bytes while both are live.
 * @param {any} record @param {(where: (string|number)[], problem: string) => never} bad
 */
export function checkLiveStorages(record, bad) {
  const overlap = liveOverlap(record);
  if (overlap === null) return;
  const [storage, other, begin, end, pc] = overlap;
  bad(["memory", "storages", storage], `shares bytes ${begin} to ${end} of buffer ${record.memory.storages[storage].buffer} with storages[${other}] while both are live (at code[${pc}])`);
}

/**
 * @typedef {{storageAlignment: number, workgroups: number, name: string}} DeviceFit
 * What one device asks of a plan and its launches: minStorageBufferOffsetAlignment,
 * maxComputeWorkgroupsPerDimension, and its name for messages.
 */

/** A WebGPU device's fit, from its limits (the specification's defaults for any it leaves out).
 * @param {any} limits @returns {DeviceFit} */
export function webgpuFit(limits) {
  const limit = (/** @type {string} */ name) => limits?.[name] ?? WEBGPU_DEFAULT_LIMITS[name];
  return { storageAlignment: limit("minStorageBufferOffsetAlignment"), workgroups: limit("maxComputeWorkgroupsPerDimension"),
    name: "webgpu device" };
}

/** The WASM device's fit: words, and a grid of 32-bit integers. @type {DeviceFit} */
export const WASM_FIT = { storageAlignment: WORD_BYTES, workgroups: MOST_WORKGROUPS, name: "wasm device" };

/**
 * Throw `makeError(message)` naming the first storage offset of `exe` that is not a multiple of its
 * device's storage alignment, or the first kernel grid larger at the upper bounds of a launch than its
 * device takes along one dimension. `fits`: per device of the executable (one unless it is split).
 * @param {any} exe @param {DeviceFit[]} fits @param {string} what @param {(message: string) => Error} makeError
 */
export function checkDeviceFit(exe, fits, what, makeError) {
  const fit = (/** @type {any} */ device) => fits[Number.isInteger(device) && device < fits.length ? device : 0];
  /** @type {Map<string, any>} */
  const parsed = new Map();
  const value = (/** @type {string} */ text, /** @type {Record<string, number>} */ env) => {
    if (!parsed.has(text)) parsed.set(text, parseShapeExpr(text));
    try {
      return evaluate(parsed.get(text), env);
    } catch {
      return null;  // a symbol without a bound; what divides by 0 fails when run
    }
  };
  for (const [name, record] of Object.entries(exe.functions)) {
    const memory = /** @type {any} */ (record).memory;
    const placed = memory.buffer_devices ?? memory.buffers.map(() => 0);
    memory.storages.forEach((/** @type {any} */ s, /** @type {number} */ index) => {
      if (s.buffer === null) return;
      const device = fit(placed[s.buffer]);
      if (s.offset % device.storageAlignment) {
        const where = jsonPath(["functions", name, "memory", "storages", index, "offset"]);
        throw makeError(`${what} does not fit the ${device.name}: ${where} is ${s.offset}, not a multiple of ${device.storageAlignment}, the ${device.name}'s storage alignment (minStorageBufferOffsetAlignment)`);
      }
    });
    /** @type {Record<string, number>} */
    const bounds = Object.create(null);
    for (const [symbol, s] of Object.entries(/** @type {any} */ (record).symbols)) {
      if (/** @type {any} */ (s).upper_bound !== null) bounds[symbol] = /** @type {any} */ (s).upper_bound;
    }
    /** @type {any} */ (record).code.forEach((/** @type {any} */ op, /** @type {number} */ pc) => {
      if (op.op !== "launch") return;
      const kernel = exe.kernels[op.kernel];
      const scalars = op.scalars.map((/** @type {string} */ text) => value(text, bounds));
      if (scalars.includes(null)) return;
      /** @type {Record<string, number>} */
      const env = Object.create(null);
      kernel.abi.scalars.forEach((/** @type {any} */ s, /** @type {number} */ i) => { env[s.name] = scalars[i]; });
      const device = fit(kernel.device ?? 0);
      kernel.grid.forEach((/** @type {string} */ text, /** @type {number} */ axis) => {
        const count = value(text, env);
        if (count !== null && count > device.workgroups) {
          throw makeError(`${what} does not fit the ${device.name}: ${jsonPath(["kernels", op.kernel, "grid", axis])} is '${text}', ${count} workgroups at the upper bounds of ${jsonPath(["functions", name, "code", pc])}, more than the ${device.name}'s ${device.workgroups} (maxComputeWorkgroupsPerDimension)`);
        }
      });
    });
  }
}
