// The LLM program contract (docs/models.md, "The LLM program contract"): chat-config.json's program
// section names the functions of executable.json a chat calls, by role, the state tensors they share,
// and the layout of the sampler's float32 parameters. The engine calls the functions it names, never a
// name written here; the roles and the sampler layout are this runtime's side of the contract.

import { FormatError } from "./schema.js";

/** The version of the program section this runtime reads. */
export const PROGRAM_VERSION = 1;
/** The float32 params vector of the `sample` role, in order. */
export const SAMPLER_LAYOUT = Object.freeze(["temperature", "top_k", "top_p", "repetition_penalty", "random"]);
/** The roles a one-sequence chat calls: prompt chunks, one token at a time, and choosing the next token. */
export const ROLES = Object.freeze({ prefill: "prefill", decode: "decode", sample: "sample", sampleGreedy: "sample_greedy" });
/** The roles of a batched build (tessera compile --max-batch), which this runtime does not run. */
const BATCHED_ROLES = ["prefill_paged", "decode_batch"];

/** `["a", "b"]`, for messages. @param {any} list */
const listText = (list) => (Array.isArray(list) ? `[${list.map((item) => JSON.stringify(item)).join(", ")}]` : JSON.stringify(list));

/**
 * The program section of ``chatConfig`` (already checked against docs/chat-config.schema.json): the
 * function name of each role, the state tensors and the sampler layout; with ``executable``, each function
 * it names must be one of the executable's, and the step functions (prefill, decode) must take the state it
 * lists, in its order. A FormatError, one line, for a config without the section (a model compiled before it
 * existed), another version or sampler layout, a batched build, a function the executable lacks, or other state.
 * @param {any} chatConfig @param {any} [executable] @param {string} [what] the file, for messages
 * @returns {{functions: Record<string, string>, state: string[], sampler: string[]}} functions by role (ROLES' values)
 */
export function readProgram(chatConfig, executable, what = "chat-config.json") {
  const program = chatConfig?.program;
  if (program === undefined || program === null) {
    throw new FormatError(`${what} has no program section (it was compiled by an older Tessera): compile the model again with this compiler (tessera compile)`);
  }
  if (program.version !== PROGRAM_VERSION) {
    throw new FormatError(`${what}: program.version is ${JSON.stringify(program.version)}; this runtime knows version ${PROGRAM_VERSION}`);
  }
  if (listText(program.sampler) !== listText(SAMPLER_LAYOUT)) {
    throw new FormatError(`${what}'s program.sampler is ${listText(program.sampler)}; this runtime knows ${listText(SAMPLER_LAYOUT)}`);
  }
  const named = program.functions ?? {};
  if (BATCHED_ROLES.some((role) => Object.hasOwn(named, role))) {
    throw new FormatError(`${what}: program.functions names ${BATCHED_ROLES.join(" and ")}, a batched build (tessera compile --max-batch); ` +
      "this runtime runs one sequence: compile the model without --max-batch");
  }
  for (const role of Object.values(ROLES)) {
    if (typeof named[role] !== "string") throw new FormatError(`${what}: program.functions has no '${role}'`);
  }
  if (executable) {
    for (const [role, name] of Object.entries(named)) {
      if (!Object.hasOwn(executable.functions, name)) {
        throw new FormatError(`${what}: program.functions.${role} names '${name}', a function executable.json does not have`);
      }
    }
    // The state the step functions take, in order, is the program's (a KV cache shared by name).
    for (const role of [ROLES.prefill, ROLES.decode]) {
      const takes = (executable.functions[named[role]].params ?? []).filter((/** @type {any} */ p) => p.state).map((/** @type {any} */ p) => p.name);
      if (listText(takes) !== listText(program.state ?? [])) {
        throw new FormatError(`${what}: program.state is ${listText(program.state ?? [])}; function '${named[role]}' (${role}) takes the state ${listText(takes)}`);
      }
    }
  }
  return { functions: { ...named }, state: [...(program.state ?? [])], sampler: [...program.sampler] };
}

/** The sampler's params vector (SAMPLER_LAYOUT) of these values. @param {Record<string, number>} values by layout name */
export function samplerParams(values) {
  return Float32Array.from(SAMPLER_LAYOUT, (name) => {
    if (!Number.isFinite(values[name])) throw new Error(`the sampler parameter ${name} is ${values[name]}, not a number`);
    return values[name];
  });
}
