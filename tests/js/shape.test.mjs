// Shape expressions as the executable writes them (tessera.arith syntax), evaluated as Python would.
import assert from "node:assert/strict";
import { test } from "node:test";

import { evalShape, parseShapeExpr } from "../../runtime-js/src/shape.js";

test("arithmetic, min/max and floor division agree with Python", () => {
  const heap = { n: 7, total: 300 };
  assert.equal(evalShape("n * 4 + 1", heap), 29);
  assert.equal(evalShape("min(max((n + 255) // 256, 1), 65535)", heap), 1);
  assert.equal(evalShape("T.min(total, 256) - n % 3", heap), 255);
  assert.equal(evalShape("-7 // 2", {}), -4);  // floors, as Python's //
  assert.equal(evalShape("-7 % 3", {}), 2);
  assert.equal(evalShape("(total - n) * 2", heap), 586);
});

test("bad text and unbound variables are errors that quote the expression", () => {
  assert.throws(() => parseShapeExpr("n +"), /not a shape expression: "n \+"/);
  assert.throws(() => parseShapeExpr("n $ 2"), /not a shape expression/);
  assert.throws(() => parseShapeExpr("min(n, 2"), /expected \)/);
  assert.throws(() => evalShape("m * 2", { n: 1 }), /shape variable m is not bound/);
});
