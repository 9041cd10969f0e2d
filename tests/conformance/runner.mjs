// Reading a conformance case folder and judging a runtime's outputs: the JavaScript twin of
// caseio.py, with the same case.json and the same comparison rule (tests/conformance/README.md).
// It runs in Node and in a browser page alike: every file is read through a fetch function, and
// the runtime is imported by a relative URL that the test server serves as it lies on disk.
import { HostTensor, ShapeValue } from "../../runtime-js/src/tessera.js";

export const CASE_FORMAT = "tessera-conformance-case";
export const INDEX_FORMAT = "tessera-conformance-index";
export const VERSION = 1;
const GENERATE = "run `python tests/conformance/generate.py` (make test-python runs it) to build the conformance cases";

/** The library every adapter registers for cases that call a user library (tessera.test.*). */
export const TEST_LIBRARIES = {
  "tessera.test.double": (x, out) => {
    for (let i = 0; i < x.length; i++) out[i] = 2 * x[i];
  },
};

/** A shard store that keeps nothing: every case loads its weights as a first visit does. */
export const NO_CACHE = { kind: "none", get: async () => undefined, put: async () => undefined };

const TYPED = {
  float32: Float32Array, int32: Int32Array, uint32: Uint32Array, int64: BigInt64Array, bool: Uint8Array,
};

/** @param {string} url @param {(url: string) => Promise<Response>} fetchFn */
async function readJson(url, fetchFn) {
  let response;
  try {
    response = await fetchFn(url);
  } catch (error) {
    throw new Error(`cannot read ${url} (${error.message}): ${GENERATE}`);
  }
  if (!response.ok) throw new Error(`${url} is missing (HTTP ${response.status}): ${GENERATE}`);
  return response.json();
}

/** The index generate.py writes last: every target with its backend and cases. */
export async function readIndex(rootUrl, fetchFn) {
  const index = await readJson(rootUrl + "index.json", fetchFn);
  if (index.format !== INDEX_FORMAT || index.version !== VERSION) {
    throw new Error(`${rootUrl}index.json is not a version ${VERSION} conformance index: ${GENERATE}`);
  }
  return index;
}

/** [target, case] for every case of every target whose kernels the runtime's backend runs. */
export function casesFor(index, backend) {
  return Object.entries(index.targets).filter(([, t]) => t.backend === backend)
    .flatMap(([target, t]) => t.cases.map((name) => [target, name]));
}

/** @returns {Promise<{dtype: string, shape: number[], data: any}>} */
async function readArray(folderUrl, entry, fetchFn) {
  const response = await fetchFn(folderUrl + entry.data);
  if (!response.ok) throw new Error(`${folderUrl}${entry.data} is missing (HTTP ${response.status}): ${GENERATE}`);
  const Typed = TYPED[entry.dtype];
  if (!Typed) throw new Error(`case data of dtype ${entry.dtype} is not known to runner.mjs`);
  return { dtype: entry.dtype, shape: entry.shape, data: new Typed(await response.arrayBuffer()) };
}

/** An argument as runtime-js takes it: a HostTensor, a number, or an array (a tuple) of them. */
async function readArg(folderUrl, arg, fetchFn) {
  if ("value" in arg) return arg.value;
  if ("tuple" in arg) return Promise.all(arg.tuple.map((field) => readArg(folderUrl, field, fetchFn)));
  const array = await readArray(folderUrl, arg, fetchFn);
  return new HostTensor(array.data, array.shape, array.dtype);
}

/** A call's arguments. */
async function readArgs(folderUrl, call, fetchFn) {
  return Promise.all(call.args.map((arg) => readArg(folderUrl, arg, fetchFn)));
}

/** A result as its list of outputs, as caseio.py flattens it: tuples depth-first, a shape as its
 * integers, and an integer (a prim) as a 0-d int64 tensor. */
function flatten(result) {
  if (Array.isArray(result)) return result.flatMap(flatten);
  if (result instanceof ShapeValue) return result.values.flatMap(flatten);
  if (typeof result === "number" || typeof result === "bigint") return [{ shape: [], dtype: "int64", data: [result] }];
  return [result];
}

/** The one rule, as caseio.py states it too: same shape and dtype; integers and bools exactly
 * equal; floats with |got - expected| <= atol + rtol * |expected| for every element. */
export function compare(got, expected, entry) {
  if (!got || !got.shape || got.shape.length !== entry.shape.length || got.shape.some((d, i) => d !== entry.shape[i])) {
    return { passed: false, maxError: Infinity, message: `shape [${got?.shape}], expected [${entry.shape}]` };
  }
  if (got.dtype !== entry.dtype) return { passed: false, maxError: Infinity, message: `dtype ${got.dtype}, expected ${entry.dtype}` };
  let maxError = 0;
  let bad = 0;
  let first = -1;
  for (let i = 0; i < expected.data.length; i++) {
    const g = Number(got.data[i]);
    const w = Number(expected.data[i]);
    const error = Math.abs(g - w);
    if (error > maxError) maxError = error;
    const ok = entry.exact ? g === w : error <= entry.atol + entry.rtol * Math.abs(w);
    if (!ok) {
      bad += 1;
      if (first < 0) first = i;
    }
  }
  if (!bad) return { passed: true, maxError };
  const rule = entry.exact ? "exact" : `rtol ${entry.rtol}, atol ${entry.atol}`;
  return { passed: false, maxError, message: `${bad} of ${expected.data.length} elements differ (${rule}); first at ` +
    `flat index ${first}: got ${got.data[first]}, expected ${expected.data[first]}` };
}

/**
 * Run every call of the case in order on one runtime instance and compare each output.
 * @param {string} folderUrl the case folder, ending in "/"
 * @param {(url: string) => Promise<Response>} fetchFn
 * @param {(folderUrl: string) => Promise<{run: (name: string, args: any[]) => Promise<any>}>} openRuntime
 *   loads the folder's executable; state persists between its calls
 */
export async function checkCase(folderUrl, fetchFn, openRuntime) {
  const record = await readJson(folderUrl + "case.json", fetchFn);
  if (record.format !== CASE_FORMAT || record.version !== VERSION) {
    throw new Error(`${folderUrl}case.json is not a version ${VERSION} conformance case: ${GENERATE}`);
  }
  const report = { case: record.case, target: record.target, passed: true, maxError: 0, failures: [] };
  const fail = (message) => {
    report.passed = false;
    report.failures.push(message);
  };
  let runtime;
  try {
    runtime = await openRuntime(folderUrl);
  } catch (error) {
    fail(`loading: ${error.name}: ${error.message}`);
    return report;
  }
  for (const [index, call] of record.calls.entries()) {
    const where = `call ${index} (${call.function})`;
    if (call.error) {  // the call must fail with a message holding every fragment
      try {
        await runtime.run(call.function, await readArgs(folderUrl, call, fetchFn));
        fail(`${where}: no error, expected one saying ${call.error.map((f) => JSON.stringify(f)).join(", ")}`);
      } catch (error) {
        const missing = call.error.filter((fragment) => !String(error.message).includes(fragment));
        if (missing.length) fail(`${where}: the error "${error.message}" does not say ${missing.map((f) => JSON.stringify(f)).join(", ")}`);
      }
      continue;
    }
    let outputs;
    try {
      outputs = flatten(await runtime.run(call.function, await readArgs(folderUrl, call, fetchFn)));
    } catch (error) {
      fail(`${where}: ${error.name}: ${error.message}`);
      return report;
    }
    if (outputs.length !== call.outputs.length) {
      fail(`${where}: ${outputs.length} outputs, expected ${call.outputs.length}`);
      continue;
    }
    for (const [position, entry] of call.outputs.entries()) {
      const result = compare(outputs[position], await readArray(folderUrl, entry, fetchFn), entry);
      report.maxError = Math.max(report.maxError, result.maxError);
      if (!result.passed) fail(`${where} output ${position}: ${result.message}`);
    }
  }
  return report;
}

/** One line per case, as caseio.py's CaseReport.line writes it. */
export function reportLine(report) {
  const verdict = report.passed ? "pass" : "FAIL";
  return `${verdict} ${report.target}/${report.case}: max error ${report.maxError ? report.maxError.toExponential(2) : 0}` +
    report.failures.map((f) => `\n    ${f}`).join("");
}
