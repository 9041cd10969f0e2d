// Shape expressions of the executable format (docs/format.md): integer text such as
// "n * 4 + 1" or "min(total, 1024)", evaluated against the shape heap of a call.
// Division and modulo floor, as in Python, which wrote them.

/** @typedef {{kind: "num", value: number} | {kind: "var", name: string}
 *   | {kind: "op", op: string, a: ShapeNode, b: ShapeNode}} ShapeNode */

const TOKEN = /\s*(?:(\d+)|([A-Za-z_][A-Za-z_0-9.]*)|(\/\/|[-+*%(),]))/y;

/** @param {string} text @returns {ShapeNode} */
export function parseShapeExpr(text) {
  /** @type {string[]} */
  const tokens = [];
  TOKEN.lastIndex = 0;
  while (TOKEN.lastIndex < text.length) {
    const start = TOKEN.lastIndex;
    const match = TOKEN.exec(text);
    if (!match) {
      if (/^\s*$/.test(text.slice(start))) break;
      throw new Error(`not a shape expression: ${JSON.stringify(text)} (at ${JSON.stringify(text.slice(start))})`);
    }
    tokens.push(match[1] ?? match[2] ?? match[3]);
  }
  let at = 0;
  const peek = () => tokens[at];
  const take = (/** @type {string} */ want) => {
    if (tokens[at] !== want) throw new Error(`not a shape expression: ${JSON.stringify(text)} (expected ${want})`);
    at += 1;
  };
  /** @returns {ShapeNode} */
  const atom = () => {
    const token = tokens[at++];
    if (token === undefined) throw new Error(`not a shape expression: ${JSON.stringify(text)} (ends early)`);
    if (token === "(") {
      const inner = sum();
      take(")");
      return inner;
    }
    if (token === "-") return { kind: "op", op: "*", a: { kind: "num", value: -1 }, b: atom() };
    if (/^\d+$/.test(token)) return { kind: "num", value: Number(token) };
    if (/^[A-Za-z_]/.test(token)) {
      const name = token.replace(/^T\./, "");
      if ((name === "min" || name === "max") && peek() === "(") {
        take("(");
        const a = sum();
        take(",");
        const b = sum();
        take(")");
        return { kind: "op", op: name, a, b };
      }
      return { kind: "var", name: token };
    }
    throw new Error(`not a shape expression: ${JSON.stringify(text)} (unexpected ${token})`);
  };
  const product = () => {
    let node = atom();
    while (["*", "//", "%"].includes(peek())) node = { kind: "op", op: tokens[at++], a: node, b: atom() };
    return node;
  };
  const sum = () => {
    let node = product();
    while (peek() === "+" || peek() === "-") node = { kind: "op", op: tokens[at++], a: node, b: product() };
    return node;
  };
  const tree = sum();
  if (at !== tokens.length) throw new Error(`not a shape expression: ${JSON.stringify(text)} (trailing ${tokens[at]})`);
  return tree;
}

/** @param {ShapeNode} node @param {Record<string, number>} heap @returns {number} */
export function evaluateShape(node, heap) {
  if (node.kind === "num") return node.value;
  if (node.kind === "var") {
    const value = heap[node.name];
    if (value === undefined) throw new Error(`shape variable ${node.name} is not bound`);
    return value;
  }
  const a = evaluateShape(node.a, heap);
  const b = evaluateShape(node.b, heap);
  if ((node.op === "//" || node.op === "%") && b === 0) throw new Error("division by zero in a shape expression");
  let value;
  switch (node.op) {
    case "+": value = a + b; break;
    case "-": value = a - b; break;
    case "*": value = a * b; break;
    case "//": value = Math.floor(a / b); break;
    case "%": value = a - b * Math.floor(a / b); break;
    case "min": value = Math.min(a, b); break;
    case "max": value = Math.max(a, b); break;
    default: throw new Error(`unknown shape operator ${node.op}`);
  }
  // Past 2**53 a double is no longer exact, and the Python VM (exact integers) would disagree.
  if (!Number.isSafeInteger(value)) throw new Error(`a shape expression reaches ${value}, beyond 2**53`);
  return value;
}

/** The variables ``node`` uses, and whether it divides by a constant 0 (a file's expression, at load).
 * @param {ShapeNode} node @param {Set<string>} [into] @returns {{vars: Set<string>, dividesByZero: boolean}} */
export function shapeFacts(node, into = new Set()) {
  if (node.kind === "var") {
    into.add(node.name);
    return { vars: into, dividesByZero: false };
  }
  if (node.kind === "num") return { vars: into, dividesByZero: false };
  const a = shapeFacts(node.a, into), b = shapeFacts(node.b, into);
  let zero = false;
  if ((node.op === "//" || node.op === "%") && shapeFacts(node.b).vars.size === 0) {
    try {
      zero = evaluateShape(node.b, {}) === 0;  // a constant divisor: "n // 0", "n % (2 - 2)"
    } catch {
      zero = true;  // it divides by zero itself
    }
  }
  return { vars: into, dividesByZero: zero || a.dividesByZero || b.dividesByZero };
}

const parsed = new Map();

/** Evaluate shape-expression text, parsing each distinct text once.
 * @param {string} text @param {Record<string, number>} heap */
export function evalShape(text, heap) {
  let node = parsed.get(text);
  if (!node) {
    node = parseShapeExpr(String(text));
    parsed.set(text, node);
  }
  return evaluateShape(node, heap);
}
