/* Tokenizers from a Hugging Face tokenizer.json, behaving as the `tokenizers` library does for the
 * shapes Tessera writes and the common LLM ones:
 *   - byte-level BPE (SmolLM2, Qwen2, Llama 3): pre-tokenizer ByteLevel (GPT-2 regex), or Sequence of
 *     Split(regex) / Digits / ByteLevel(use_regex=false); decoder ByteLevel;
 *   - SentencePiece-style BPE (Llama 2, TinyLlama): normalizer Prepend("▁") + Replace(" ", "▁") or a
 *     Metaspace pre-tokenizer; BPE with byte_fallback and an unk token; decoder Replace, ByteFallback,
 *     Fuse, Strip (or Metaspace).
 * Added tokens are matched before pre-tokenization. Anything else is refused at load with an error
 * that names the component. The tokenizer owns everything it uses (no global state); every
 * allocation goes through the tsr_alloc given at load. Like a model, a tokenizer may be used by one
 * thread at a time (its allocator counts allocations).
 *
 * Counts are int32_t: encode and decode return the number of ids / bytes the whole result needs
 * (writing at most the capacity given, so a caller may ask once with 0 to size a buffer), or a
 * negative tessera_status with the last error set. */
#ifndef TSR_TOKENIZER_H
#define TSR_TOKENIZER_H

#include "common.h"

typedef struct tsr_tokenizer tsr_tokenizer;

/* encode flags */
enum {
    /* Match special added tokens ("<|im_start|>") in the text; without it they are plain text
     * (HF: split_special_tokens=True). Non-special added tokens are always matched. */
    TSR_TOKENIZE_PARSE_SPECIAL = 1,
    /* Apply the post-processor's template (e.g. Llama 2's leading <s>); HF: add_special_tokens. */
    TSR_TOKENIZE_ADD_SPECIAL = 2,
};

/* Parses a tokenizer.json document (`size` bytes, need not be NUL-terminated). The allocator must
 * outlive the tokenizer. 0, or a negative tessera_status (FORMAT: bad JSON or a field of the wrong
 * kind; UNSUPPORTED: a component this library does not implement, named in the error). */
int tsr_tokenizer_load(tsr_alloc *a, const char *json, size_t size, tsr_tokenizer **out);
void tsr_tokenizer_free(tsr_tokenizer *t);

/* Token ids of text (UTF-8, `len` bytes). Writes up to max_ids ids; returns how many there are. */
int32_t tsr_tokenizer_encode(const tsr_tokenizer *t, const char *text, size_t len, unsigned flags,
                             int32_t *ids, int32_t max_ids);

/* The text of ids, as HF decode(ids, skip_special_tokens) gives it (valid UTF-8: invalid byte
 * sequences become U+FFFD). Unknown ids are left out. Writes up to `size` bytes (no NUL);
 * returns how many bytes the text has. */
int32_t tsr_tokenizer_decode(const tsr_tokenizer *t, const int32_t *ids, int32_t n, int skip_special,
                             char *buf, int32_t size);

/* For streaming: decodes like tsr_tokenizer_decode, except that an incomplete UTF-8 sequence at the
 * very end (bytes the next tokens may complete) is held back rather than becoming U+FFFD. Returns
 * the number of bytes of complete text; a chat emits text[already_emitted .. returned). */
int32_t tsr_tokenizer_decode_stream(const tsr_tokenizer *t, const int32_t *ids, int32_t n, int skip_special,
                                    char *buf, int32_t size);

/* The bytes one token stands for (byte-level and <0xXX> tokens mapped back to their bytes, "▁" to a
 * space; no stripping), which may be part of a UTF-8 character. Returns the byte count, or a
 * negative status for an unknown id. */
int32_t tsr_tokenizer_token_to_piece(const tsr_tokenizer *t, int32_t id, char *buf, int32_t size);

/* The token's string as the vocabulary spells it ("Ġthe", "<|im_end|>"; an added token with
 * normalized=true in its normalized form, as HF's id_to_token), or NULL for an unknown id. */
const char *tsr_tokenizer_token_str(const tsr_tokenizer *t, int32_t id);
/* The id of a token string (added tokens first, then the model's vocabulary), or -1. */
int32_t tsr_tokenizer_token_to_id(const tsr_tokenizer *t, const char *token, size_t len);
/* One more than the largest id (the model's vocabulary and the added tokens). */
int32_t tsr_tokenizer_vocab_size(const tsr_tokenizer *t);
/* Whether id is a special added token (e.g. an end-of-turn marker). */
bool tsr_tokenizer_is_special(const tsr_tokenizer *t, int32_t id);

/* The length of the longest prefix of s that does not end inside an incomplete UTF-8 sequence. */
size_t tsr_utf8_complete_prefix(const char *s, size_t len);

#endif
