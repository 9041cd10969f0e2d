// The path rules of docs/format.md ("Paths and files"): every name a bundle's JSON gives is a relative
// path inside its folder. The same rules as the Python loader (tessera/vm/files.py) and runtime-native
// (src/files.c), with the same reasons; the loader also checks each URL it resolves (insideUrl).

import { MAX_PATH_CHARS } from "./facts.js";

/**
 * Why ``path`` is not a relative path inside a folder, or null if it is one.
 * @param {any} path @returns {string|null}
 */
export function pathProblem(path) {
  if (typeof path !== "string") return `it is ${path === null ? "null" : `a ${Array.isArray(path) ? "list" : typeof path}`}, not a string`;
  if (!path) return "it is empty";
  if (path.length > MAX_PATH_CHARS) return `it is longer than ${MAX_PATH_CHARS} characters`;
  if (path.startsWith("/")) return "it starts with '/'";
  // URL parsing strips spaces at either end: " /etc/passwd" would become an absolute path.
  if (path.startsWith(" ") || path.endsWith(" ")) return "it starts or ends with a space";
  // A browser fetches the name as a URL: '%' would be decoded, '?' and '#' end the path, ':' makes a
  // scheme, '\' is '/', and tabs and newlines are dropped (so "..\t" would become "..").
  const bad = /[\\\x00-\x1f\x7f%?#:]/.exec(path);
  if (bad) {
    return bad[0] === "\\" ? "it contains a backslash" : /[%?#:]/.test(bad[0]) ? "it contains '%', '?', '#' or ':'"
      : "it contains a control character";
  }
  const parts = path.split("/");
  if (parts.includes("")) return "it has an empty part";
  if (parts.includes(".") || parts.includes("..")) return "it has a '.' or '..' part";
  return null;
}

/** Whether ``path`` names a file inside the folder (pathProblem finds nothing). @param {any} path */
export function isInsidePath(path) {
  return pathProblem(path) === null;
}
