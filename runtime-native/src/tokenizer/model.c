/* Loading the BPE model of a tokenizer.json: the vocabulary into one arena of strings, the merges
 * (as "a b" strings or ["a", "b"] pairs) into the pair table, and the model's options. Merges that
 * name a token the vocabulary lacks are refused, as HF refuses them ("Token `c` out of vocabulary"). */
#include <cjson/cJSON.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

static int model_error(const char *msg, const char *detail) {
    return tsr_error(TESSERA_ERROR_FORMAT, "tokenizer.json: model: %s%s", msg, detail ? detail : "");
}

static int load_vocab(tsr_tokenizer *t, const cJSON *vocab) {
    if (!cJSON_IsObject(vocab)) return model_error("'vocab' is not an object", NULL);
    size_t total = 0;
    int64_t max_id = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= INT32_MAX / 2 ||
            e->valuedouble != (double)(int64_t)e->valuedouble)
            return model_error("a vocabulary id is not a non-negative integer: ", e->string);
        int64_t id = (int64_t)e->valuedouble;
        if (id > max_id) max_id = id;
        total += strlen(e->string) + 1;
    }
    t->n_ids = (int32_t)(max_id + 1);
    t->arena = tsr_malloc(t->a, total);
    t->tok = tsr_calloc(t->a, (size_t)t->n_ids + 1, sizeof *t->tok);
    t->tok_len = tsr_calloc(t->a, (size_t)t->n_ids + 1, sizeof *t->tok_len);
    if (!t->arena || !t->tok || !t->tok_len) return TESSERA_ERROR_OUT_OF_MEMORY;
    size_t at = 0;
    cJSON_ArrayForEach(e, vocab) {
        int32_t id = (int32_t)e->valuedouble;
        size_t n = strlen(e->string);
        if (t->tok[id])
            return tsr_error(TESSERA_ERROR_FORMAT, "tokenizer.json: model: id %d is given to both \"%s\" and \"%s\"",
                             (int)id, t->tok[id], e->string);
        memcpy(t->arena + at, e->string, n + 1);
        t->tok[id] = t->arena + at;
        t->tok_len[id] = (uint32_t)n;
        at += n + 1;
    }
    return tsr_vocab_build(t);
}

static int merge_side(const tsr_tokenizer *t, const char *s, size_t n, int32_t *id) {
    *id = tsr_vocab_find(t, s, n);
    if (*id < 0)
        return tsr_error(TESSERA_ERROR_FORMAT, "tokenizer.json: model: a merge names \"%.*s\", which is not in the vocabulary",
                         (int)n, s);
    return 0;
}

static int load_merges(tsr_tokenizer *t, const cJSON *merges) {
    if (is_null_json(merges)) return 0;
    if (!cJSON_IsArray(merges)) return model_error("'merges' is not an array", NULL);
    size_t count = (size_t)cJSON_GetArraySize(merges);
    size_t cap = 16;
    while (cap < count * 2 + 1) cap *= 2;
    t->pair_cap = cap;
    t->pair_key = tsr_malloc(t->a, cap * sizeof *t->pair_key);
    t->pair_rank = tsr_malloc(t->a, cap * sizeof *t->pair_rank);
    t->pair_new = tsr_malloc(t->a, cap * sizeof *t->pair_new);
    if (!t->pair_key || !t->pair_rank || !t->pair_new) return TESSERA_ERROR_OUT_OF_MEMORY;
    memset(t->pair_key, 0xFF, cap * sizeof *t->pair_key);
    tsr_tkbuf joined;
    tsr_tkbuf_init(&joined, t->a);
    int32_t rank = 0;
    int rc = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        const char *l, *r;
        size_t ln, rn;
        if (cJSON_IsString(m)) {
            l = m->valuestring;
            const char *sp = strchr(l, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                rc = tsr_error(TESSERA_ERROR_FORMAT, "tokenizer.json: model: merge %d (\"%s\") is not two tokens separated by one space",
                               (int)rank + 1, l);
                break;
            }
            ln = (size_t)(sp - l);
            r = sp + 1;
            rn = strlen(r);
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
            l = cJSON_GetArrayItem(m, 0)->valuestring;
            r = cJSON_GetArrayItem(m, 1)->valuestring;
            ln = strlen(l);
            rn = strlen(r);
        } else {
            rc = model_error("a merge is neither \"a b\" nor [\"a\", \"b\"]", NULL);
            break;
        }
        int32_t left, right;
        if ((rc = merge_side(t, l, ln, &left)) || (rc = merge_side(t, r, rn, &right))) break;
        joined.len = 0;
        tsr_tkbuf_put(&joined, l, ln);
        tsr_tkbuf_put(&joined, r, rn);
        if (joined.failed) {
            rc = TESSERA_ERROR_OUT_OF_MEMORY;
            break;
        }
        int32_t merged = tsr_vocab_find(t, joined.p, joined.len);
        if (merged < 0) {
            rc = tsr_error(TESSERA_ERROR_FORMAT,
                           "tokenizer.json: model: merge %d (\"%.*s\" + \"%.*s\") makes \"%.*s\", which is not in the vocabulary",
                           (int)rank + 1, (int)ln, l, (int)rn, r, (int)joined.len, joined.p);
            break;
        }
        tsr_merges_insert(t, left, right, rank++, merged);
    }
    tsr_tkbuf_free(&joined);
    return rc;
}

static int empty_or_null_string(const cJSON *model, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(model, key);
    if (is_null_json(j) || (cJSON_IsString(j) && !*j->valuestring)) return 0;
    return tsr_error(TESSERA_ERROR_UNSUPPORTED, "tokenizer.json: model BPE with %s is not supported", key);
}

static int opt_bool(const cJSON *model, const char *key, bool *out) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(model, key);
    *out = false;
    if (is_null_json(j)) return 0;
    if (!cJSON_IsBool(j)) return tsr_error(TESSERA_ERROR_FORMAT, "tokenizer.json: model: '%s' is not a boolean", key);
    *out = cJSON_IsTrue(j);
    return 0;
}

int tsr_load_model(tsr_tokenizer *t, const cJSON *model) {
    if (!cJSON_IsObject(model)) return model_error("missing or not an object", NULL);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "BPE"))
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "tokenizer.json: model \"%s\" is not supported (supported: BPE)",
                         type->valuestring);
    if (!cJSON_IsString(type) && !cJSON_GetObjectItemCaseSensitive(model, "merges"))
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "tokenizer.json: a model without a type and merges is not supported (supported: BPE)");
    int rc;
    if ((rc = empty_or_null_string(model, "continuing_subword_prefix")) ||
        (rc = empty_or_null_string(model, "end_of_word_suffix")))
        return rc;
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (!is_null_json(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0.0))
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "tokenizer.json: model BPE with dropout is not supported");
    if ((rc = opt_bool(model, "fuse_unk", &t->fuse_unk)) || (rc = opt_bool(model, "byte_fallback", &t->byte_fallback)) ||
        (rc = opt_bool(model, "ignore_merges", &t->ignore_merges)))
        return rc;
    if ((rc = load_vocab(t, cJSON_GetObjectItemCaseSensitive(model, "vocab")))) return rc;
    if ((rc = load_merges(t, cJSON_GetObjectItemCaseSensitive(model, "merges")))) return rc;
    t->unk_id = -1;
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    if (cJSON_IsString(unk)) {
        t->unk_id = tsr_vocab_find(t, unk->valuestring, strlen(unk->valuestring));
        if (t->unk_id < 0)
            return tsr_error(TESSERA_ERROR_FORMAT, "tokenizer.json: model: the unk_token \"%s\" is not in the vocabulary",
                             unk->valuestring);
    } else if (!is_null_json(unk)) {
        return model_error("'unk_token' is not a string", NULL);
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        static const char hex[] = "0123456789ABCDEF";
        name[0] = '<', name[1] = '0', name[2] = 'x', name[3] = hex[b >> 4], name[4] = hex[b & 15], name[5] = '>';
        t->byte_id[b] = tsr_vocab_find(t, name, 6);
    }
    return 0;
}
