/* Loading a tokenizer.json: the BPE model (vocabulary, merges), added tokens, and the pipeline's
 * components, each checked; what this library does not implement is refused by name. */
#include <cjson/cJSON.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

#define GPT2_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

static void *pcre_alloc(size_t size, void *user) { return tsr_malloc(user, size); }
static void pcre_free(void *ptr, void *user) { tsr_free(user, ptr); }

static int bad(const char *what, const char *msg) {
    return tsr_error(TESSERA_ERROR_FORMAT, "tokenizer.json: %s: %s", what, msg);
}

static int unsupported(const char *kind, const char *type, const char *supported) {
    return tsr_error(TESSERA_ERROR_UNSUPPORTED, "tokenizer.json: %s \"%s\" is not supported (supported: %s)", kind,
                     type, supported);
}

static bool is_null(const cJSON *j) { return !j || cJSON_IsNull(j); }

static int get_bool(const cJSON *obj, const char *key, bool dflt, bool *out, const char *what) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (is_null(j)) {
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsBool(j)) return tsr_error(TESSERA_ERROR_FORMAT, "tokenizer.json: %s: '%s' is not a boolean", what, key);
    *out = cJSON_IsTrue(j);
    return 0;
}

static int get_string(const cJSON *obj, const char *key, const char **out, const char *what) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsString(j)) return tsr_error(TESSERA_ERROR_FORMAT, "tokenizer.json: %s: '%s' is not a string", what, key);
    *out = j->valuestring;
    return 0;
}

static int get_int(const cJSON *j, int64_t lo, int64_t hi, int64_t *out, const char *what) {
    if (!cJSON_IsNumber(j) || j->valuedouble != (double)(int64_t)j->valuedouble || j->valuedouble < (double)lo ||
        j->valuedouble > (double)hi)
        return bad(what, "not an integer in range");
    *out = (int64_t)j->valuedouble;
    return 0;
}

static char *dup_str(tsr_tokenizer *t, const char *s, size_t *len) {
    *len = strlen(s);
    return tsr_strdup(t->a, s);
}

static int type_of(const cJSON *j, const char *what, const char **type) {
    if (!cJSON_IsObject(j)) return bad(what, "not an object");
    return get_string(j, "type", type, what);
}

/* {"String": s} or {"Regex": r} */
static int compile_pattern(tsr_tokenizer *t, const cJSON *obj, tsr_regex *re, const char *what) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(obj, "pattern");
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(p, "String");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(p, "Regex");
    if (cJSON_IsString(s)) return tsr_regex_compile(t, s->valuestring, strlen(s->valuestring), true, re, what);
    if (cJSON_IsString(r)) return tsr_regex_compile(t, r->valuestring, strlen(r->valuestring), false, re, what);
    return bad(what, "'pattern' is neither {\"String\": ...} nor {\"Regex\": ...}");
}

static int parse_scheme(const cJSON *j, tsr_prepend_scheme *scheme, const char *what) {
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(j, "prepend_scheme");
    if (cJSON_IsString(ps)) {
        if (!strcmp(ps->valuestring, "always")) *scheme = TSR_PREPEND_ALWAYS;
        else if (!strcmp(ps->valuestring, "first")) *scheme = TSR_PREPEND_FIRST;
        else if (!strcmp(ps->valuestring, "never")) *scheme = TSR_PREPEND_NEVER;
        else return bad(what, "prepend_scheme is not always, first or never");
        return 0;
    }
    bool add = false;
    int rc = get_bool(j, "add_prefix_space", true, &add, what);
    *scheme = add ? TSR_PREPEND_ALWAYS : TSR_PREPEND_NEVER;
    return rc;
}

static int parse_replacement(const cJSON *j, char *rep, size_t *rep_len, const char *what) {
    const char *s = "\xE2\x96\x81";
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "replacement");
    if (cJSON_IsString(r)) s = r->valuestring;
    bool truncated;
    size_t n = strlen(s);
    if (n == 0 || n > 4 || tsr_utf8_step((const unsigned char *)s, n, &truncated) != (int)n)
        return bad(what, "replacement is not one character");
    memcpy(rep, s, n);
    *rep_len = n;
    return 0;
}

/* ---- normalizers ---- */

static int add_normalizer(tsr_tokenizer *t, const cJSON *j, size_t *cap) {
    const char *type = NULL;
    int rc = type_of(j, "normalizer", &type);
    if (rc) return rc;
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "normalizers"), *item;
        if (!cJSON_IsArray(list)) return bad("normalizer Sequence", "'normalizers' is not an array");
        cJSON_ArrayForEach(item, list) if ((rc = add_normalizer(t, item, cap))) return rc;
        return 0;
    }
    if (t->n_norm == *cap) {
        size_t c = *cap ? *cap * 2 : 4;
        tsr_norm *v = tsr_calloc(t->a, c, sizeof *v);
        if (!v) return TESSERA_ERROR_OUT_OF_MEMORY;
        if (t->n_norm) memcpy(v, t->norm, t->n_norm * sizeof *v);
        tsr_free(t->a, t->norm);
        t->norm = v;
        *cap = c;
    }
    tsr_norm *nm = &t->norm[t->n_norm];
    const char *s = NULL;
    if (!strcmp(type, "Prepend")) {
        nm->kind = TSR_NORM_PREPEND;
        if ((rc = get_string(j, "prepend", &s, "normalizer Prepend"))) return rc;
    } else if (!strcmp(type, "Replace")) {
        nm->kind = TSR_NORM_REPLACE;
        if ((rc = get_string(j, "content", &s, "normalizer Replace"))) return rc;
        if ((rc = compile_pattern(t, j, &nm->re, "normalizer Replace"))) return rc;
    } else {
        return unsupported("normalizer", type, "Sequence, Prepend, Replace");
    }
    t->n_norm++;
    if (!(nm->str = dup_str(t, s, &nm->str_len))) return TESSERA_ERROR_OUT_OF_MEMORY;
    return 0;
}

/* ---- pre-tokenizers ---- */

static int add_pretok(tsr_tokenizer *t, const cJSON *j, size_t *cap) {
    const char *type = NULL;
    int rc = type_of(j, "pre_tokenizer", &type);
    if (rc) return rc;
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "pretokenizers"), *item;
        if (!cJSON_IsArray(list)) return bad("pre_tokenizer Sequence", "'pretokenizers' is not an array");
        cJSON_ArrayForEach(item, list) if ((rc = add_pretok(t, item, cap))) return rc;
        return 0;
    }
    if (t->n_pre == *cap) {
        size_t c = *cap ? *cap * 2 : 4;
        tsr_pretok *v = tsr_calloc(t->a, c, sizeof *v);
        if (!v) return TESSERA_ERROR_OUT_OF_MEMORY;
        if (t->n_pre) memcpy(v, t->pre, t->n_pre * sizeof *v);
        tsr_free(t->a, t->pre);
        t->pre = v;
        *cap = c;
    }
    tsr_pretok *p = &t->pre[t->n_pre];
    if (!strcmp(type, "ByteLevel")) {
        p->kind = TSR_PRE_BYTELEVEL;
        if ((rc = get_bool(j, "add_prefix_space", true, &p->add_prefix_space, "pre_tokenizer ByteLevel")) ||
            (rc = get_bool(j, "use_regex", true, &p->has_regex, "pre_tokenizer ByteLevel")))
            return rc;
        p->behavior = TSR_SPLIT_ISOLATED;
        if (p->has_regex &&
            (rc = tsr_regex_compile(t, GPT2_PATTERN, strlen(GPT2_PATTERN), false, &p->re, "pre_tokenizer ByteLevel")))
            return rc;
    } else if (!strcmp(type, "Split")) {
        p->kind = TSR_PRE_SPLIT;
        p->has_regex = true;
        const char *behavior = NULL;
        if ((rc = get_string(j, "behavior", &behavior, "pre_tokenizer Split")) ||
            (rc = get_bool(j, "invert", false, &p->invert, "pre_tokenizer Split")))
            return rc;
        static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
        size_t k = 0;
        while (k < TSR_ARRAY_LEN(names) && strcmp(names[k], behavior)) k++;
        if (k == TSR_ARRAY_LEN(names)) return unsupported("Split behavior", behavior, "Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
        p->behavior = (tsr_split_behavior)k;
        if ((rc = compile_pattern(t, j, &p->re, "pre_tokenizer Split"))) return rc;
    } else if (!strcmp(type, "Digits")) {
        bool individual = false;
        if ((rc = get_bool(j, "individual_digits", false, &individual, "pre_tokenizer Digits"))) return rc;
        p->kind = TSR_PRE_SPLIT;
        p->has_regex = true;
        p->behavior = individual ? TSR_SPLIT_ISOLATED : TSR_SPLIT_CONTIGUOUS;
        if ((rc = tsr_regex_compile(t, "\\p{N}", 5, false, &p->re, "pre_tokenizer Digits"))) return rc;
    } else if (!strcmp(type, "Metaspace")) {
        p->kind = TSR_PRE_METASPACE;
        if ((rc = parse_replacement(j, p->replacement, &p->rep_len, "pre_tokenizer Metaspace")) ||
            (rc = parse_scheme(j, &p->scheme, "pre_tokenizer Metaspace")) ||
            (rc = get_bool(j, "split", true, &p->split, "pre_tokenizer Metaspace")))
            return rc;
        p->behavior = TSR_SPLIT_MERGED_NEXT;
        if (p->split &&
            (rc = tsr_regex_compile(t, p->replacement, p->rep_len, true, &p->re, "pre_tokenizer Metaspace")))
            return rc;
    } else {
        return unsupported("pre_tokenizer", type, "Sequence, ByteLevel, Split, Digits, Metaspace");
    }
    t->n_pre++;
    return 0;
}

/* ---- decoders ---- */

static int add_decoder(tsr_tokenizer *t, const cJSON *j, size_t *cap) {
    const char *type = NULL;
    int rc = type_of(j, "decoder", &type);
    if (rc) return rc;
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "decoders"), *item;
        if (!cJSON_IsArray(list)) return bad("decoder Sequence", "'decoders' is not an array");
        cJSON_ArrayForEach(item, list) if ((rc = add_decoder(t, item, cap))) return rc;
        return 0;
    }
    if (t->n_dec == *cap) {
        size_t c = *cap ? *cap * 2 : 4;
        tsr_dec *v = tsr_calloc(t->a, c, sizeof *v);
        if (!v) return TESSERA_ERROR_OUT_OF_MEMORY;
        if (t->n_dec) memcpy(v, t->dec, t->n_dec * sizeof *v);
        tsr_free(t->a, t->dec);
        t->dec = v;
        *cap = c;
    }
    tsr_dec *d = &t->dec[t->n_dec];
    if (!strcmp(type, "ByteLevel")) {
        d->kind = TSR_DEC_BYTELEVEL;
    } else if (!strcmp(type, "ByteFallback")) {
        d->kind = TSR_DEC_BYTEFALLBACK;
    } else if (!strcmp(type, "Fuse")) {
        d->kind = TSR_DEC_FUSE;
    } else if (!strcmp(type, "Replace")) {
        d->kind = TSR_DEC_REPLACE;
        const char *s = NULL;
        if ((rc = get_string(j, "content", &s, "decoder Replace")) ||
            (rc = compile_pattern(t, j, &d->re, "decoder Replace")))
            return rc;
        if (!(d->content = dup_str(t, s, &d->content_len))) return TESSERA_ERROR_OUT_OF_MEMORY;
    } else if (!strcmp(type, "Strip")) {
        d->kind = TSR_DEC_STRIP;
        const char *s = NULL;
        int64_t v = 0;
        bool truncated;
        if ((rc = get_string(j, "content", &s, "decoder Strip"))) return rc;
        int k = tsr_utf8_step((const unsigned char *)s, strlen(s), &truncated);
        if (!*s || k != (int)strlen(s)) return bad("decoder Strip", "content is not one character");
        d->strip_cp = tsr_utf8_cp((const unsigned char *)s, k);
        if ((rc = get_int(cJSON_GetObjectItemCaseSensitive(j, "start"), 0, 1 << 20, &v, "decoder Strip start"))) return rc;
        d->start = (int32_t)v;
        if ((rc = get_int(cJSON_GetObjectItemCaseSensitive(j, "stop"), 0, 1 << 20, &v, "decoder Strip stop"))) return rc;
        d->stop = (int32_t)v;
    } else if (!strcmp(type, "Metaspace")) {
        d->kind = TSR_DEC_METASPACE;
        if ((rc = parse_replacement(j, d->replacement, &d->rep_len, "decoder Metaspace")) ||
            (rc = parse_scheme(j, &d->scheme, "decoder Metaspace")))
            return rc;
    } else {
        return unsupported("decoder", type, "Sequence, ByteLevel, ByteFallback, Fuse, Replace, Strip, Metaspace");
    }
    t->n_dec++;
    return 0;
}

/* ---- post-processor: TemplateProcessing's single-sequence template ---- */

static int push_ids(tsr_tokenizer *t, int32_t **v, size_t *n, const cJSON *ids) {
    const cJSON *item;
    cJSON_ArrayForEach(item, ids) {
        int64_t id = 0;
        int rc = get_int(item, 0, INT32_MAX, &id, "post_processor TemplateProcessing special token id");
        if (rc) return rc;
        int32_t *w = tsr_malloc(t->a, (*n + 1) * sizeof *w);
        if (!w) return TESSERA_ERROR_OUT_OF_MEMORY;
        if (*n) memcpy(w, *v, *n * sizeof *w);
        tsr_free(t->a, *v);
        *v = w;
        (*v)[(*n)++] = (int32_t)id;
    }
    return 0;
}

static int parse_post(tsr_tokenizer *t, const cJSON *j) {
    if (is_null(j)) return 0;
    const char *type = NULL;
    int rc = type_of(j, "post_processor", &type);
    if (rc) return rc;
    if (!strcmp(type, "ByteLevel")) return 0; /* offsets only */
    if (!strcmp(type, "Sequence")) {
        const cJSON *item;
        cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(j, "processors")) if ((rc = parse_post(t, item))) return rc;
        return 0;
    }
    if (strcmp(type, "TemplateProcessing")) return unsupported("post_processor", type, "ByteLevel, TemplateProcessing, Sequence");
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(j, "single"), *specials = cJSON_GetObjectItemCaseSensitive(j, "special_tokens"), *item;
    if (!cJSON_IsArray(single)) return bad("post_processor TemplateProcessing", "'single' is not an array");
    bool seen_sequence = false;
    cJSON_ArrayForEach(item, single) {
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(item, "SpecialToken");
        if (cJSON_GetObjectItemCaseSensitive(item, "Sequence")) {
            seen_sequence = true;
            continue;
        }
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(sp, "id");
        if (!cJSON_IsString(name)) return bad("post_processor TemplateProcessing", "a piece is neither SpecialToken nor Sequence");
        const cJSON *entry = cJSON_GetObjectItemCaseSensitive(specials, name->valuestring);
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(entry, "ids");
        if (!cJSON_IsArray(ids)) return bad("post_processor TemplateProcessing", "a special token has no 'ids'");
        rc = seen_sequence ? push_ids(t, &t->post_after, &t->n_post_after, ids)
                           : push_ids(t, &t->post_before, &t->n_post_before, ids);
        if (rc) return rc;
    }
    return 0;
}

/* ---- added tokens ---- */

static int load_added(tsr_tokenizer *t, const cJSON *list, pcre2_match_data *md) {
    if (is_null(list)) return 0;
    if (!cJSON_IsArray(list)) return bad("added_tokens", "not an array");
    size_t n = (size_t)cJSON_GetArraySize(list);
    t->added = tsr_calloc(t->a, n ? n : 1, sizeof *t->added);
    if (!t->added) return TESSERA_ERROR_OUT_OF_MEMORY;
    const cJSON *item;
    int rc;
    cJSON_ArrayForEach(item, list) {
        tsr_added *at = &t->added[t->n_added];
        const char *content = NULL;
        int64_t id = 0;
        if ((rc = get_string(item, "content", &content, "added token")) ||
            (rc = get_int(cJSON_GetObjectItemCaseSensitive(item, "id"), 0, INT32_MAX - 1, &id, "added token id")))
            return rc;
        if (!*content) return bad("added token", "the content is empty");
        if (!(at->content = dup_str(t, content, &at->len))) return TESSERA_ERROR_OUT_OF_MEMORY;
        t->n_added++;
        at->id = (int32_t)id;
        if ((rc = get_bool(item, "special", false, &at->special, "added token")) ||
            (rc = get_bool(item, "normalized", !at->special, &at->normalized, "added token")) ||
            (rc = get_bool(item, "lstrip", false, &at->lstrip, "added token")) ||
            (rc = get_bool(item, "rstrip", false, &at->rstrip, "added token")) ||
            (rc = get_bool(item, "single_word", false, &at->single_word, "added token")))
            return rc;
        if (at->single_word) t->needs_wordchar = true;
        if (at->normalized && t->n_norm) { /* HF matches a normalized token by its normalized form */
            tsr_tkbuf nb;
            tsr_tkbuf_init(&nb, t->a);
            rc = tsr_normalize(t, md, at->content, at->len, &nb);
            if (!rc && nb.failed) rc = TESSERA_ERROR_OUT_OF_MEMORY;
            if (!rc) tsr_tkbuf_put(&nb, "", 1);
            if (rc || nb.failed) {
                tsr_tkbuf_free(&nb);
                return rc ? rc : TESSERA_ERROR_OUT_OF_MEMORY;
            }
            at->match = nb.p;
            at->match_len = nb.len - 1;
        } else {
            at->match = at->content;
            at->match_len = at->len;
        }
        if (at->id >= t->vocab_size) t->vocab_size = at->id + 1;
    }
    return 0;
}

static int load(tsr_tokenizer *t, const cJSON *root) {
    if (!cJSON_IsObject(root)) return bad("document", "not a JSON object");
    if (!is_null(cJSON_GetObjectItemCaseSensitive(root, "truncation")))
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "tokenizer.json: truncation is not supported (set it to null)");
    if (!is_null(cJSON_GetObjectItemCaseSensitive(root, "padding")))
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "tokenizer.json: padding is not supported (set it to null)");
    int rc = tsr_load_model(t, cJSON_GetObjectItemCaseSensitive(root, "model"));
    if (rc) return rc;
    t->vocab_size = t->n_ids;
    size_t cap = 0;
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (!is_null(j) && (rc = add_normalizer(t, j, &cap))) return rc;
    cap = 0;
    j = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (!is_null(j) && (rc = add_pretok(t, j, &cap))) return rc;
    cap = 0;
    j = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    t->has_decoder = !is_null(j);
    if (t->has_decoder && (rc = add_decoder(t, j, &cap))) return rc;
    if ((rc = parse_post(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor")))) return rc;
    pcre2_match_data *md = pcre2_match_data_create(1, t->gctx);
    if (!md) return TESSERA_ERROR_OUT_OF_MEMORY;
    rc = load_added(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), md);
    pcre2_match_data_free(md);
    if (rc) return rc;
    if (t->needs_wordchar && (rc = tsr_regex_compile(t, "[\\p{L}\\p{N}]", 12, false, &t->wordchar, "single_word")))
        return rc;
    return 0;
}

int tsr_tokenizer_load(tsr_alloc *a, const char *json, size_t size, tsr_tokenizer **out) {
    *out = NULL;
    if (!a || !json) return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "tsr_tokenizer_load: NULL argument");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, size, &end, 0);
    if (!root)
        return tsr_error(TESSERA_ERROR_FORMAT, "tokenizer.json is not valid JSON (at byte %zu)",
                         end && end >= json ? (size_t)(end - json) : (size_t)0);
    tsr_tokenizer *t = tsr_calloc(a, 1, sizeof *t);
    if (!t) {
        cJSON_Delete(root);
        return TESSERA_ERROR_OUT_OF_MEMORY;
    }
    t->a = a;
    t->unk_id = -1;
    t->gctx = pcre2_general_context_create(pcre_alloc, pcre_free, a);
    t->cctx = t->gctx ? pcre2_compile_context_create(t->gctx) : NULL;
    int rc = t->cctx ? load(t, root) : TESSERA_ERROR_OUT_OF_MEMORY;
    cJSON_Delete(root);
    if (rc) {
        tsr_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void tsr_tokenizer_free(tsr_tokenizer *t) {
    if (!t) return;
    tsr_alloc *a = t->a;
    for (size_t i = 0; i < t->n_norm; i++) {
        tsr_free(a, t->norm[i].str);
        tsr_regex_free(&t->norm[i].re);
    }
    for (size_t i = 0; i < t->n_pre; i++) tsr_regex_free(&t->pre[i].re);
    for (size_t i = 0; i < t->n_dec; i++) {
        tsr_regex_free(&t->dec[i].re);
        tsr_free(a, t->dec[i].content);
    }
    for (size_t i = 0; i < t->n_added; i++) {
        if (t->added[i].match != t->added[i].content) tsr_free(a, t->added[i].match);
        tsr_free(a, t->added[i].content);
    }
    tsr_regex_free(&t->wordchar);
    tsr_free(a, t->norm);
    tsr_free(a, t->pre);
    tsr_free(a, t->dec);
    tsr_free(a, t->added);
    tsr_free(a, t->post_before);
    tsr_free(a, t->post_after);
    tsr_free(a, t->arena);
    tsr_free(a, t->tok);
    tsr_free(a, t->tok_len);
    tsr_free(a, t->vmap);
    tsr_free(a, t->pair_key);
    tsr_free(a, t->pair_rank);
    tsr_free(a, t->pair_new);
    if (t->cctx) pcre2_compile_context_free(t->cctx);
    if (t->gctx) pcre2_general_context_free(t->gctx);
    tsr_free(a, t);
}

/* ---- lookups ---- */

static const tsr_added *added_by_id(const tsr_tokenizer *t, int32_t id) {
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].id == id) return &t->added[i];
    return NULL;
}

const char *tsr_tokenizer_token_str(const tsr_tokenizer *t, int32_t id) {
    const tsr_added *at = added_by_id(t, id);
    if (at) return at->match; /* as HF's id_to_token: a normalized token in its normalized form */
    return id >= 0 && id < t->n_ids ? t->tok[id] : NULL;
}

int32_t tsr_tokenizer_token_to_id(const tsr_tokenizer *t, const char *token, size_t len) {
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].len == len && memcmp(t->added[i].content, token, len) == 0) return t->added[i].id;
    return tsr_vocab_find(t, token, len);
}

int32_t tsr_tokenizer_vocab_size(const tsr_tokenizer *t) { return t->vocab_size; }

bool tsr_tokenizer_is_special(const tsr_tokenizer *t, int32_t id) {
    const tsr_added *at = added_by_id(t, id);
    return at && at->special;
}
