// Copy the runtime's two npm dependencies next to its sources (src/vendor/), so that the runtime is
// plain ES modules with relative imports: a page can import it from any folder, with no bundler
// and no import map. `make setup` runs it after `npm ci`. It also writes src/vendor/schemas.js, the
// JSON Schemas of docs/*.schema.json as a module, which format.js checks every file against: the
// Python loader reads the same files.
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
// npm workspaces hoist dependencies to the repository's node_modules.
const modules = join(here, "..", "..", "node_modules");
const vendor = join(here, "..", "src", "vendor");
mkdirSync(vendor, { recursive: true });
const packages = {
  "tokenizers.js": ["@huggingface/tokenizers", "dist/tokenizers.mjs"],
  "jinja.js": ["@huggingface/jinja", "dist/index.js"],
};
for (const [target, [name, file]] of Object.entries(packages)) {
  const root = join(modules, name);
  copyFileSync(join(root, file), join(vendor, target));
  copyFileSync(join(root, "LICENSE"), join(vendor, `${target.replace(".js", "")}.LICENSE`));
}

// @huggingface/jinja exports its Interpreter and Environment, which the runtime extends to render a chat
// template within a budget (src/chat-template.js), but not what that needs besides: the globals a template
// starts with (setupGlobals: range, strftime_now, ...), the classes of the values a for loop and range
// make and iterate, and the two exceptions of break and continue (chat-template.js has its own for loop
// and range, see BoundedInterpreter.evaluateFor). They are added to its exports; a version without them stops this
// script rather than the chat.
const jinja = join(vendor, "jinja.js");
const source = readFileSync(jinja, "utf8");
const added = ["setupGlobals", "StringValue", "IntegerValue", "FloatValue", "BooleanValue", "UndefinedValue",
  "ArrayValue", "ObjectValue", "FunctionValue", "BreakControl", "ContinueControl"];
for (const name of added) {
  const declaration = name === "setupGlobals" ? "function setupGlobals(env)" : `var ${name} = class`;
  if (!source.includes(declaration)) {
    throw new Error(`${jinja}: no "${declaration}" in this version of @huggingface/jinja (src/chat-template.js uses it)`);
  }
}
writeFileSync(jinja, `${source}export { ${added.join(", ")} };\n`);

// The parts of their APIs the runtime uses, for `tsc --checkJs` (make lint): the type checker reads
// these instead of the bundled JavaScript.
writeFileSync(join(vendor, "tokenizers.d.ts"), `export class Tokenizer {
  constructor(tokenizerJson: object, tokenizerConfig: object);
  encode(text: string): { ids: number[] };
  decode(ids: number[], options?: { skip_special_tokens?: boolean }): string;
}
`);
writeFileSync(join(vendor, "jinja.d.ts"), `export class Template {
  constructor(template: string);
  parsed: any;
  render(context: Record<string, unknown>): string;
}
export class Environment {
  constructor(parent?: Environment);
  set(name: string, value: unknown): any;
  setVariable(name: string, value: RuntimeValue): RuntimeValue;
}
export class Interpreter {
  constructor(env?: Environment);
  run(program: any): any;
  evaluate(statement: any, environment: Environment): any;
  evaluateBlock(statements: any[], environment: Environment): any;
  evaluateCallExpression(expr: any, environment: Environment): any;
  evaluateArguments(args: any[], environment: Environment): [any[], Map<string, any>];
  applyFilter(operand: any, filterNode: any, environment: Environment): any;
}
// A type only: the library does not export the base class of its values.
declare class RuntimeValue {
  constructor(value?: any);
  type: string;
  value: any;
  __bool__(): BooleanValue;
}
export class StringValue extends RuntimeValue {
  constructor(value: string);
  value: string;
}
export class IntegerValue extends RuntimeValue {
  constructor(value: number);
  value: number;
}
export class FloatValue extends RuntimeValue {
  constructor(value: number);
  value: number;
}
export class BooleanValue extends RuntimeValue {
  constructor(value: boolean);
  value: boolean;
}
export class UndefinedValue extends RuntimeValue {}
export class ArrayValue extends RuntimeValue {
  constructor(value: RuntimeValue[]);
  value: RuntimeValue[];
}
export class ObjectValue extends RuntimeValue {
  constructor(value: Map<string, RuntimeValue>);
  value: Map<string, RuntimeValue>;
  keys(): ArrayValue;
}
export class FunctionValue extends RuntimeValue {
  constructor(value: (args: any[], scope: Environment) => any);
}
export class BreakControl extends Error {}
export class ContinueControl extends Error {}
export function setupGlobals(env: Environment): void;
`);

// The formats' JSON Schemas, by format name (as tessera/vm/schema.py names them).
const docs = join(here, "..", "..", "docs");
const schemas = Object.fromEntries(["executable", "tensor-cache", "chat-config", "bundle"].map(
  (name) => [name, JSON.parse(readFileSync(join(docs, `${name}.schema.json`), "utf8"))]));
writeFileSync(join(vendor, "schemas.js"), `// Written by runtime-js/scripts/vendor.mjs from docs/*.schema.json: do not edit.
export const SCHEMAS = ${JSON.stringify(schemas)};
`);
writeFileSync(join(vendor, "schemas.d.ts"), `export const SCHEMAS: Record<string, any>;
`);
