/* The tokenizer's internals, shared by its files: growable buffers, the parsed pipeline
 * (normalizers, pre-tokenizers, BPE model, decoders) and UTF-8 / byte-level helpers. */
#ifndef TSR_TOK_INTERNAL_H
#define TSR_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <cjson/cJSON.h>

#include "tokenizer/tokenizer.h"

/* ---- growable buffers (errors are sticky: `failed` is set and later appends do nothing) ---- */

typedef struct tsr_tkbuf {
    tsr_alloc *a;
    char *p;
    size_t len, cap;
    bool failed;
} tsr_tkbuf;

/* A piece of a buffer: bytes [off, off+len); id >= 0 marks an added token already resolved. */
typedef struct tsr_span {
    size_t off, len;
    int32_t id;
    bool first; /* starts at the beginning of the input (Metaspace prepend_scheme "first") */
} tsr_span;

typedef struct tsr_spans {
    tsr_alloc *a;
    tsr_span *v;
    size_t n, cap;
    bool failed;
} tsr_spans;

void tsr_tkbuf_init(tsr_tkbuf *b, tsr_alloc *a);
void tsr_tkbuf_free(tsr_tkbuf *b);
bool tsr_tkbuf_reserve(tsr_tkbuf *b, size_t extra);
void tsr_tkbuf_put(tsr_tkbuf *b, const void *data, size_t n);
void tsr_tkbuf_put_cp(tsr_tkbuf *b, uint32_t cp);
void tsr_spans_init(tsr_spans *s, tsr_alloc *a);
void tsr_spans_free(tsr_spans *s);
void tsr_spans_push(tsr_spans *s, size_t off, size_t len, int32_t id, bool first);

/* ---- UTF-8 ---- */

/* At s[0..n): > 0, the length of a valid character; < 0, -k where s[0..k) is one invalid unit to
 * replace with one U+FFFD (the maximal valid prefix, as Rust's from_utf8_lossy); *truncated set when
 * that unit is a valid prefix cut short by the end of the input. */
int tsr_utf8_step(const unsigned char *s, size_t n, bool *truncated);
/* The code point of the valid character at s (length from tsr_utf8_step). */
uint32_t tsr_utf8_cp(const unsigned char *s, int len);
/* Appends src as valid UTF-8 (invalid units -> U+FFFD). With keep_tail, a truncated sequence at
 * the very end is copied raw and its length stored in *tail (else replaced). */
void tsr_utf8_lossy(tsr_tkbuf *out, const char *src, size_t n, bool keep_tail, size_t *tail);
bool tsr_unicode_is_whitespace(uint32_t cp);

/* GPT-2's bytes_to_unicode: the code point that stands for byte b, and back (-1: not a byte char). */
uint32_t tsr_byte_to_cp(uint8_t b);
int tsr_cp_to_byte(uint32_t cp);

/* ---- regular expressions (PCRE2, UTF + UCP, with \s as Unicode White_Space like Oniguruma) ---- */

typedef struct tsr_regex {
    pcre2_code *code;
} tsr_regex;

/* literal: the pattern is a plain string. */
int tsr_regex_compile(struct tsr_tokenizer *t, const char *pattern, size_t len, bool literal, tsr_regex *out,
                      const char *what);
void tsr_regex_free(tsr_regex *re);
/* Finds the matches in s[0..n) as HF's find_matches does: alternating spans (match or not) that cover
 * s; empty matches produce empty spans that callers drop. Appends (off, len, is_match) to out as
 * spans whose id is 1 for a match, 0 otherwise. Returns 0 or a status. */
int tsr_regex_find_all(const struct tsr_tokenizer *t, const tsr_regex *re, pcre2_match_data *md, const char *s,
                       size_t n, tsr_spans *out);

/* ---- the pipeline ---- */

typedef enum { TSR_NORM_PREPEND, TSR_NORM_REPLACE } tsr_norm_kind;
typedef struct tsr_norm {
    tsr_norm_kind kind;
    char *str; /* Prepend's string or Replace's content */
    size_t str_len;
    tsr_regex re; /* Replace's pattern */
} tsr_norm;

typedef enum { TSR_SPLIT_REMOVED, TSR_SPLIT_ISOLATED, TSR_SPLIT_MERGED_PREV, TSR_SPLIT_MERGED_NEXT,
               TSR_SPLIT_CONTIGUOUS } tsr_split_behavior;
typedef enum { TSR_PREPEND_ALWAYS, TSR_PREPEND_FIRST, TSR_PREPEND_NEVER } tsr_prepend_scheme;

typedef enum { TSR_PRE_BYTELEVEL, TSR_PRE_SPLIT, TSR_PRE_METASPACE } tsr_pre_kind;
typedef struct tsr_pretok {
    tsr_pre_kind kind;
    bool add_prefix_space; /* ByteLevel */
    bool has_regex;        /* ByteLevel use_regex, or always for Split / Digits */
    tsr_regex re;
    tsr_split_behavior behavior;
    bool invert;
    char replacement[8]; /* Metaspace */
    size_t rep_len;
    tsr_prepend_scheme scheme;
    bool split;
} tsr_pretok;

typedef enum { TSR_DEC_BYTELEVEL, TSR_DEC_REPLACE, TSR_DEC_BYTEFALLBACK, TSR_DEC_FUSE, TSR_DEC_STRIP,
               TSR_DEC_METASPACE } tsr_dec_kind;
typedef struct tsr_dec {
    tsr_dec_kind kind;
    tsr_regex re; /* Replace */
    char *content; /* Replace's content */
    size_t content_len;
    uint32_t strip_cp; /* Strip */
    int32_t start, stop;
    char replacement[8]; /* Metaspace */
    size_t rep_len;
    tsr_prepend_scheme scheme;
} tsr_dec;

typedef struct tsr_added {
    char *content;
    size_t len;
    char *match; /* what is matched: the content, normalized when `normalized` */
    size_t match_len;
    int32_t id;
    bool special, normalized, lstrip, rstrip, single_word;
} tsr_added;

struct tsr_tokenizer {
    tsr_alloc *a;
    pcre2_general_context *gctx;
    pcre2_compile_context *cctx;
    char *arena; /* the vocabulary's strings, NUL-terminated */
    /* the model's vocabulary: id -> string, and a hash table of ids */
    int32_t n_ids;
    const char **tok;
    uint32_t *tok_len;
    int32_t *vmap;
    size_t vmap_cap;
    /* merges: (left id, right id) -> rank and merged id, open addressing on the pair */
    uint64_t *pair_key;
    int32_t *pair_rank, *pair_new;
    size_t pair_cap;
    int32_t unk_id;
    bool fuse_unk, byte_fallback, ignore_merges;
    int32_t byte_id[256]; /* <0xXX> tokens, -1 when absent */
    tsr_added *added;
    size_t n_added;
    tsr_norm *norm;
    size_t n_norm;
    tsr_pretok *pre;
    size_t n_pre;
    tsr_dec *dec;
    size_t n_dec;
    bool has_decoder;
    int32_t *post_before, *post_after; /* TemplateProcessing's ids around the sequence */
    size_t n_post_before, n_post_after;
    int32_t vocab_size;
    bool needs_wordchar; /* some added token is single_word */
    tsr_regex wordchar;
};

int32_t tsr_vocab_find(const struct tsr_tokenizer *t, const char *s, size_t len);
int tsr_vocab_build(struct tsr_tokenizer *t);
int tsr_merges_insert(struct tsr_tokenizer *t, int32_t left, int32_t right, int32_t rank, int32_t merged);
bool tsr_merges_find(const struct tsr_tokenizer *t, int32_t left, int32_t right, int32_t *rank, int32_t *merged);

/* Scratch for BPE over one encode call. */
typedef struct tsr_bpe_scratch {
    tsr_alloc *a;
    void *sym;
    size_t sym_cap;
    void *heap;
    size_t heap_cap;
    bool failed;
} tsr_bpe_scratch;

/* Appends the ids of one pre-tokenized word to ids (via push). Returns 0 or a status. */
typedef struct tsr_idvec {
    int32_t *out;
    int32_t cap, n;
} tsr_idvec;
int tsr_bpe_word(const struct tsr_tokenizer *t, tsr_bpe_scratch *sc, const char *w, size_t n, tsr_idvec *ids);
void tsr_bpe_scratch_free(tsr_bpe_scratch *sc);

static inline bool is_null_json(const cJSON *j) { return !j || cJSON_IsNull(j); }
int tsr_load_model(struct tsr_tokenizer *t, const cJSON *model);

/* The normalizers applied to s[0..n), appended to out. */
int tsr_normalize(const struct tsr_tokenizer *t, pcre2_match_data *md, const char *s, size_t n, tsr_tkbuf *out);

static inline void tsr_idvec_push(tsr_idvec *v, int32_t id) {
    if (v->n < v->cap) v->out[v->n] = id;
    v->n++;
}

#endif
