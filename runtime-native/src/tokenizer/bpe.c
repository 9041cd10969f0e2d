/* The BPE model: the vocabulary's hash table, the merges' table keyed by the pair of ids, and the
 * merge loop HF's Word::merge_all runs (a binary heap ordered by rank, then position, over a doubly
 * linked list of symbols; stale heap entries are skipped when the pair no longer matches). */
#include <string.h>

#include "tokenizer/tok_internal.h"

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static uint64_t hash_pair(uint64_t key) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    key *= 0xc4ceb9fe1a85ec53ull;
    return key ^ (key >> 33);
}

static size_t pow2_at_least(size_t n) {
    size_t cap = 16;
    while (cap < n) cap *= 2;
    return cap;
}

int tsr_vocab_build(tsr_tokenizer *t) {
    t->vmap_cap = pow2_at_least((size_t)t->n_ids * 2 + 1);
    t->vmap = tsr_malloc(t->a, t->vmap_cap * sizeof *t->vmap);
    if (!t->vmap) return TESSERA_ERROR_OUT_OF_MEMORY;
    memset(t->vmap, 0xFF, t->vmap_cap * sizeof *t->vmap);
    for (int32_t id = 0; id < t->n_ids; id++) {
        if (!t->tok[id]) continue;
        size_t i = hash_bytes(t->tok[id], t->tok_len[id]) & (t->vmap_cap - 1);
        while (t->vmap[i] >= 0) {
            int32_t other = t->vmap[i];
            if (t->tok_len[other] == t->tok_len[id] && memcmp(t->tok[other], t->tok[id], t->tok_len[id]) == 0)
                return tsr_error(TESSERA_ERROR_FORMAT, "tokenizer.json: the vocabulary has \"%s\" twice (ids %d and %d)",
                                 t->tok[id], (int)other, (int)id);
            i = (i + 1) & (t->vmap_cap - 1);
        }
        t->vmap[i] = id;
    }
    return 0;
}

int32_t tsr_vocab_find(const tsr_tokenizer *t, const char *s, size_t len) {
    size_t i = hash_bytes(s, len) & (t->vmap_cap - 1);
    for (;;) {
        int32_t id = t->vmap[i];
        if (id < 0) return -1;
        if (t->tok_len[id] == len && memcmp(t->tok[id], s, len) == 0) return id;
        i = (i + 1) & (t->vmap_cap - 1);
    }
}

/* The pair table is sized by the caller (pair_cap set, arrays allocated, keys all ~0). A later
 * duplicate overwrites the earlier one, as HF's HashMap collect does. */
int tsr_merges_insert(tsr_tokenizer *t, int32_t left, int32_t right, int32_t rank, int32_t merged) {
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    size_t i = hash_pair(key) & (t->pair_cap - 1);
    while (t->pair_key[i] != UINT64_MAX && t->pair_key[i] != key) i = (i + 1) & (t->pair_cap - 1);
    t->pair_key[i] = key;
    t->pair_rank[i] = rank;
    t->pair_new[i] = merged;
    return 0;
}

bool tsr_merges_find(const tsr_tokenizer *t, int32_t left, int32_t right, int32_t *rank, int32_t *merged) {
    if (!t->pair_cap) return false;
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    size_t i = hash_pair(key) & (t->pair_cap - 1);
    for (;;) {
        uint64_t k = t->pair_key[i];
        if (k == UINT64_MAX) return false;
        if (k == key) {
            *rank = t->pair_rank[i];
            *merged = t->pair_new[i];
            return true;
        }
        i = (i + 1) & (t->pair_cap - 1);
    }
}

typedef struct symbol {
    int32_t id;
    int32_t prev, next; /* -1 at the ends */
    uint32_t len;       /* bytes; 0 once merged into its left neighbour */
} symbol;

typedef struct merge {
    int32_t rank, pos, new_id;
} merge;

static bool grow(tsr_bpe_scratch *sc, void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = tsr_calloc(sc->a, c, elem);
    if (!q) {
        sc->failed = true;
        return false;
    }
    tsr_free(sc->a, *p);
    *p = q;
    *cap = c;
    return true;
}

void tsr_bpe_scratch_free(tsr_bpe_scratch *sc) {
    tsr_free(sc->a, sc->sym);
    tsr_free(sc->a, sc->heap);
    sc->sym = sc->heap = NULL;
    sc->sym_cap = sc->heap_cap = 0;
}

static bool merge_before(merge a, merge b) { return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos; }

static void heap_push(merge *h, size_t *n, merge m) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!merge_before(m, h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = m;
}

static merge heap_pop(merge *h, size_t *n) {
    merge top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && merge_before(h[c + 1], h[c])) c++;
        if (!merge_before(h[c], last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

int tsr_bpe_word(const tsr_tokenizer *t, tsr_bpe_scratch *sc, const char *w, size_t n, tsr_idvec *ids) {
    if (n == 0) return 0;
    if (t->ignore_merges) {
        int32_t whole = tsr_vocab_find(t, w, n);
        if (whole >= 0) {
            tsr_idvec_push(ids, whole);
            return 0;
        }
    }
    /* At most one symbol per byte; each merge pushes at most two heap entries. */
    if (!grow(sc, &sc->sym, &sc->sym_cap, n, sizeof(symbol)) ||
        !grow(sc, &sc->heap, &sc->heap_cap, 3 * n + 1, sizeof(merge)))
        return TESSERA_ERROR_OUT_OF_MEMORY;
    symbol *sym = sc->sym;
    merge *heap = sc->heap;
    int32_t ns = 0;
    int32_t unk = -1;
    uint32_t unk_len = 0;
#define ADD_SYMBOL(ID, LEN) \
    do { sym[ns] = (symbol){(ID), ns - 1, ns + 1, (LEN)}; ns++; } while (0)
    for (size_t i = 0; i < n;) {
        bool truncated;
        int k = tsr_utf8_step((const unsigned char *)w + i, n - i, &truncated);
        size_t clen = k > 0 ? (size_t)k : 1;
        int32_t id = tsr_vocab_find(t, w + i, clen);
        if (id >= 0) {
            if (unk >= 0) ADD_SYMBOL(unk, unk_len);
            unk = -1;
            ADD_SYMBOL(id, (uint32_t)clen);
        } else {
            bool done = false;
            if (t->byte_fallback) {
                bool all = true;
                for (size_t b = 0; b < clen; b++) all = all && t->byte_id[(unsigned char)w[i + b]] >= 0;
                if (all) {
                    /* As HF: a pending unk stays pending (it lands after these bytes). */
                    for (size_t b = 0; b < clen; b++) ADD_SYMBOL(t->byte_id[(unsigned char)w[i + b]], 1);
                    done = true;
                }
            }
            if (!done && t->unk_id >= 0) {
                if (unk >= 0 && t->fuse_unk) {
                    unk_len += (uint32_t)clen;
                } else {
                    if (unk >= 0) ADD_SYMBOL(unk, unk_len);
                    unk = t->unk_id;
                    unk_len = (uint32_t)clen;
                }
            }
            /* Neither: HF drops the character. */
        }
        i += clen;
    }
    if (unk >= 0) ADD_SYMBOL(unk, unk_len);
#undef ADD_SYMBOL
    if (ns == 0) return 0;
    sym[ns - 1].next = -1;

    size_t nh = 0;
    for (int32_t i = 0; i + 1 < ns; i++) {
        int32_t rank, merged;
        if (tsr_merges_find(t, sym[i].id, sym[i + 1].id, &rank, &merged))
            heap_push(heap, &nh, (merge){rank, i, merged});
    }
    while (nh) {
        merge top = heap_pop(heap, &nh);
        symbol *cur = &sym[top.pos];
        if (cur->len == 0 || cur->next < 0) continue;
        symbol right = sym[cur->next];
        int32_t rank, merged;
        if (!tsr_merges_find(t, cur->id, right.id, &rank, &merged) || merged != top.new_id) continue;
        int32_t right_pos = cur->next;
        cur->id = top.new_id;
        cur->len += right.len;
        cur->next = right.next;
        sym[right_pos].len = 0;
        if (right.next >= 0) sym[right.next].prev = top.pos;
        if (cur->prev >= 0 && tsr_merges_find(t, sym[cur->prev].id, cur->id, &rank, &merged))
            heap_push(heap, &nh, (merge){rank, cur->prev, merged});
        if (cur->next >= 0 && tsr_merges_find(t, cur->id, sym[cur->next].id, &rank, &merged))
            heap_push(heap, &nh, (merge){rank, top.pos, merged});
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next) tsr_idvec_push(ids, sym[i].id);
    return 0;
}
