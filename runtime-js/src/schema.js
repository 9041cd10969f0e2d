// Checking a document against one of the formats' JSON Schemas (docs/*.schema.json, vendored as
// vendor/schemas.js): the keywords those schemas use, of JSON Schema 2020-12, and no others (a schema
// that uses another is an error here, so that this reader cannot silently accept what Python's
// jsonschema refuses). The first violation found is reported as one sentence that names the field,
// in the words of the Python loader (tessera/vm/schema.py):
//   functions.main.code[3] lacks the field 'dst'

import { pathProblem } from "./paths.js";
import { SCHEMAS } from "./vendor/schemas.js";

/** A file that is not what it claims to be; the message names the file, the field and the problem. */
export class FormatError extends Error {
  name = "FormatError";
}

const ANNOTATIONS = new Set(["$schema", "$id", "$defs", "title", "description"]);
const KEYWORDS = new Set(["$ref", "type", "enum", "const", "required", "properties", "additionalProperties",
  "propertyNames", "items", "minItems", "maxItems", "minLength", "maxLength", "minimum", "maximum", "minProperties",
  "maxProperties", "pattern", "allOf", "anyOf", "oneOf", "if", "then", "else"]);

/** Every schema by its $id, for references between them (bundle.json's paths are executable-3.json's). */
const BY_ID = new Map(Object.values(SCHEMAS).map((schema) => [schema.$id, schema]));
/** @type {Map<string, RegExp>} */
const PATTERNS = new Map();
/** What ``check`` returns in quiet mode for a value that fails. */
const FAILS = "fails";
/** Schema objects whose keywords were checked once. */
const KNOWN = new WeakSet();

/** A value for a message, cut short: a file may hold anything. @param {any} value @returns {string} */
export function show(value) {
  if (Array.isArray(value)) return `an array of ${value.length} items`;
  if (value !== null && typeof value === "object") return "an object";
  if (typeof value === "string") {
    const text = `'${value.replace(/[\\']/g, (c) => `\\${c}`).replace(/[\x00-\x1f\x7f]/g,
      (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, "0")}`)}'`;
    return text.length <= 80 ? text : text.slice(0, 77) + "...";
  }
  return JSON.stringify(value) ?? String(value);
}

/** `functions.main.code[3].dst` for the path ["functions", "main", "code", 3, "dst"]. @param {(string|number)[]} path */
export function jsonPath(path) {
  let text = "";
  for (const part of path) {
    if (typeof part === "number") text += `[${part}]`;
    else if (/^[A-Za-z_][A-Za-z0-9_]*$/.test(part)) text += text ? `.${part}` : part;
    else text += `[${show(part)}]`;
  }
  return text;
}

/** A JSON value's type in the schema's words: "integer" for a number without a fraction. @param {any} value */
function typeOf(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "number") return Number.isInteger(value) ? "integer" : "number";
  return typeof value;  // "string", "boolean", "object"
}

const TYPE_NAMES = /** @type {Record<string, string>} */ ({ integer: "an integer", string: "a string", object: "an object",
  array: "an array", boolean: "true or false", null: "null", number: "a number" });

/** JSON equality, for enum and const. @param {any} a @param {any} b @returns {boolean} */
function same(a, b) {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a), kb = Object.keys(b);
  return ka.length === kb.length && ka.every((k) => Object.hasOwn(b, k) && same(a[k], b[k]));
}

/** Characters as JSON Schema counts them: code points, not UTF-16 units. @param {string} s */
const length = (s) => s.length - (s.match(/[\uDC00-\uDFFF]/g)?.length ?? 0);

/**
 * The first place where ``value`` breaks ``schema``, as a sentence, or null. In quiet mode (an ``if``, a
 * branch of ``anyOf``: only whether matters) a failure is FAILS, and no message is made.
 * @param {any} value @param {any} schema @param {any} root the document ``schema`` belongs to (for $ref)
 * @param {(string|number)[]} path where ``value`` is in the document (a stack: each level pushes, then pops)
 * @param {boolean} quiet
 * @returns {string|null}
 */
function check(value, schema, root, path, quiet) {
  if (schema === true) return null;
  if (schema === false) return quiet ? FAILS : `${at(path)} is not allowed there`;
  if (!KNOWN.has(schema)) {
    for (const key of Object.keys(schema)) {
      if (!KEYWORDS.has(key) && !ANNOTATIONS.has(key)) throw new Error(`schema keyword ${key} is not supported by runtime-js/src/schema.js`);
    }
    KNOWN.add(schema);
  }
  let problem = null;
  if (schema.$ref !== undefined) {
    const { resolved, target } = reference(schema, root);
    if ((problem = check(value, resolved, target, path, quiet))) return problem;
  }
  const type = typeOf(value);
  if (!quiet && typeof schema.pattern === "string" && schema.pattern.includes("#:") && pathProblem(value) !== null) {
    // A path's schema (docs/format.md's rule): its length or its pattern, said as the rule says it.
    if (check(value, schema, root, path, true) !== null) {
      return `${at(path)} ${show(value)} is not a relative path inside the folder: ${pathProblem(value)}`;
    }
  }
  if (schema.type !== undefined) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (!types.includes(type) && !(type === "integer" && types.includes("number"))) {
      return quiet ? FAILS : `${at(path)} is ${show(value)}, not ${types.map((t) => TYPE_NAMES[t] ?? t).join(" or ")}`;
    }
  }
  if (schema.enum !== undefined && !schema.enum.some((/** @type {any} */ v) => same(v, value))) {
    return quiet ? FAILS : `${at(path)} is ${show(value)}, not one of ${schema.enum.map(show).join(", ")}`;
  }
  if (schema.const !== undefined && !same(schema.const, value)) {
    return quiet ? FAILS : `${at(path)} is ${show(value)}, not ${show(schema.const)}`;
  }
  if (type === "integer" || type === "number") {
    if (schema.minimum !== undefined && value < schema.minimum) {
      return quiet ? FAILS : `${at(path)} is ${value}, less than the minimum ${schema.minimum}`;
    }
    if (schema.maximum !== undefined && value > schema.maximum) {
      return quiet ? FAILS : `${at(path)} is ${value}, more than the maximum ${schema.maximum}`;
    }
  } else if (type === "string") {
    if (schema.minLength !== undefined || schema.maxLength !== undefined) {
      const n = length(value);
      if (n < (schema.minLength ?? 0)) return quiet ? FAILS : `${at(path)} has ${n} characters, fewer than ${schema.minLength}`;
      if (n > (schema.maxLength ?? Infinity)) return quiet ? FAILS : `${at(path)} has ${n} characters, more than ${schema.maxLength}`;
    }
    if (schema.pattern !== undefined) {
      let regex = PATTERNS.get(schema.pattern);
      if (!regex) PATTERNS.set(schema.pattern, regex = new RegExp(schema.pattern, "u"));
      if (!regex.test(value)) return quiet ? FAILS : `${at(path)} is ${show(value)}, not ${schema.title ?? `of the form ${schema.pattern}`}`;
    }
  } else if (type === "array") {
    if (schema.minItems !== undefined && value.length < schema.minItems) {
      return quiet ? FAILS : `${at(path)} has ${value.length} items, fewer than ${schema.minItems}`;
    }
    if (schema.maxItems !== undefined && value.length > schema.maxItems) {
      return quiet ? FAILS : `${at(path)} has ${value.length} items, more than ${schema.maxItems}`;
    }
    if (schema.items !== undefined) {
      for (let i = 0; i < value.length; i++) {
        path.push(i);
        problem = check(value[i], schema.items, root, path, quiet);
        path.pop();
        if (problem) return problem;
      }
    }
  } else if (type === "object") {
    if (schema.required) {
      const missing = schema.required.find((/** @type {string} */ k) => !Object.hasOwn(value, k));
      if (missing !== undefined) return quiet ? FAILS : `${at(path)} lacks the field '${missing}'`;
    }
    const keys = Object.keys(value);
    if (schema.minProperties !== undefined && keys.length < schema.minProperties) {
      return quiet ? FAILS : `${at(path)} has ${keys.length} members, fewer than ${schema.minProperties}`;
    }
    if (schema.maxProperties !== undefined && keys.length > schema.maxProperties) {
      return quiet ? FAILS : `${at(path)} has ${keys.length} members, more than ${schema.maxProperties}`;
    }
    for (const key of keys) {
      if (schema.propertyNames !== undefined && (problem = check(key, schema.propertyNames, root, path, quiet))) return problem;
      const own = schema.properties !== undefined && Object.hasOwn(schema.properties, key);
      if (!own && schema.additionalProperties === false) {
        return quiet ? FAILS : `${at(path)} has a field the format does not have: '${key}'`;
      }
      const sub = own ? schema.properties[key] : schema.additionalProperties;
      if (sub !== undefined) {
        path.push(key);
        problem = check(value[key], sub, root, path, quiet);
        path.pop();
        if (problem) return problem;
      }
    }
  }
  for (const sub of schema.allOf ?? []) {
    if ((problem = check(value, sub, root, path, quiet))) return problem;
  }
  if (schema.anyOf && !schema.anyOf.some((/** @type {any} */ sub) => check(value, sub, root, path, true) === null)) {
    return quiet ? FAILS : noneOf(value, schema.anyOf, root, path);
  }
  if (schema.oneOf && schema.oneOf.filter((/** @type {any} */ sub) => check(value, sub, root, path, true) === null).length !== 1) {
    return quiet ? FAILS : noneOf(value, schema.oneOf, root, path);
  }
  if (schema.if !== undefined) {
    const branch = check(value, schema.if, root, path, true) === null ? schema.then : schema.else;
    if (branch !== undefined && (problem = check(value, branch, root, path, quiet))) return problem;
  }
  return null;
}

/** @param {(string|number)[]} path */
const at = (path) => jsonPath(path) || "the document";

/** The JSON types a schema allows, when it says so with ``type``, ``const`` or a ``$ref`` to one that does.
 * @param {any} schema @param {any} root @returns {string[]} */
function typesOf(schema, root) {
  if (schema === null || typeof schema !== "object") return [];
  if (schema.type !== undefined) return Array.isArray(schema.type) ? schema.type : [schema.type];
  if (schema.const !== undefined) return [typeOf(schema.const)];
  if (schema.$ref !== undefined) {
    const { resolved, target } = reference(schema, root);
    return typesOf(resolved, target);
  }
  return [];
}

/** Why ``value`` is none of ``branches``: the branch of its type says, else the types allowed do.
 * @param {any} value @param {any[]} branches @param {any} root @param {(string|number)[]} path */
function noneOf(value, branches, root, path) {
  const type = typeOf(value);
  const typed = branches.filter((branch) => typesOf(branch, root).some((t) => t === type || (t === "number" && type === "integer")));
  if (typed.length === 1) {
    const inner = check(value, typed[0], root, path, false);
    if (inner) return inner;
  }
  const names = branches.map((branch) => typesOf(branch, root).map((t) => TYPE_NAMES[t] ?? t).join(" or "));
  if (names.every((n) => n)) return `${at(path)} is ${show(value)}, not ${names.join(" or ")}`;
  return `${at(path)} is ${show(value)}, which is none of the forms the format allows there`;
}

/** @type {WeakMap<object, {resolved: any, target: any}>} */
const REFERENCES = new WeakMap();

/** What ``schema.$ref`` names (``target``: the schema document it is in), found once.
 * @param {any} schema @param {any} root @returns {{resolved: any, target: any}} */
function reference(schema, root) {
  let found = REFERENCES.get(schema);
  if (!found) {
    const [id, pointer] = schema.$ref.split("#");
    const target = id ? BY_ID.get(new URL(id, root.$id).href) : root;
    if (!target) throw new Error(`schema reference ${schema.$ref} names no known schema`);
    const resolved = pointer.split("/").slice(1).reduce((/** @type {any} */ node, /** @type {string} */ part) => node[part], target);
    REFERENCES.set(schema, found = { resolved, target });
  }
  return found;
}

/**
 * Why ``doc`` is not a document of the format ``name`` ("executable", "tensor-cache", "chat-config",
 * "bundle"), as a sentence that names the field, or null when it is one.
 * @param {any} doc @param {string} name @returns {string|null}
 */
export function schemaProblem(doc, name) {
  const schema = SCHEMAS[name];
  if (!schema) throw new Error(`no schema for the format ${name}`);
  return check(doc, schema, schema, [], false);
}
