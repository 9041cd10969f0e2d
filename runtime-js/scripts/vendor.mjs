// Copy the runtime's two npm dependencies next to its sources (src/vendor/), so that the runtime is
// plain ES modules with relative imports: a page can import it from any folder, with no bundler
// and no import map. `make setup` runs it after `npm ci`.
import { copyFileSync, mkdirSync, writeFileSync } from "node:fs";
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
  render(context: Record<string, unknown>): string;
}
`);
