// runtime-js's tokenizer as a command for Python tests: `node tests/js/encode_texts.mjs TOKENIZER_JSON
// TEXTS_JSON [--text-specials]` prints the ids of each text (a JSON list of lists), encoded with no
// special tokens added. With --text-specials, special tokens in the text are text (llama.cpp's
// parse_special=false, Hugging Face's encode_special_tokens): the tokenizer is given only the added
// tokens that are not special, which are still matched whole.
import { readFileSync } from "node:fs";

import { Tokenizer } from "../../runtime-js/src/vendor/tokenizers.js";

const [tokenizerPath, textsPath, ...options] = process.argv.slice(2);
const json = JSON.parse(readFileSync(tokenizerPath, "utf8"));
if (options.includes("--text-specials")) json.added_tokens = json.added_tokens.filter((token) => !token.special);
const tokenizer = new Tokenizer(json, {});
const texts = JSON.parse(readFileSync(textsPath, "utf8"));
process.stdout.write(JSON.stringify(texts.map((text) => tokenizer.encode(text, { add_special_tokens: false }).ids)));
