/* Encoding, in HF's order: added tokens are cut out of the raw text (those not normalized), each
 * remaining piece is normalized and cut again by the normalized added tokens, then pre-tokenized
 * into words (ByteLevel / Split / Digits / Metaspace), and each word is run through BPE. */
#include <string.h>

#include "tokenizer/tok_internal.h"

typedef struct encoder {
    const tsr_tokenizer *t;
    pcre2_match_data *md;
    tsr_bpe_scratch bpe;
    tsr_idvec ids;
    unsigned flags;
    tsr_tkbuf bufs[3]; /* pre-tokenizer stages ping-pong between 0 and 1; 2 is a temporary */
    tsr_spans spans[3];
    tsr_spans matches;
} encoder;

/* ---- normalizers ---- */

static int replace_all(const tsr_tokenizer *t, pcre2_match_data *md, const tsr_regex *re, const char *with,
                       size_t with_len, const char *s, size_t n, tsr_tkbuf *out) {
    tsr_spans m;
    tsr_spans_init(&m, t->a);
    int rc = tsr_regex_find_all(t, re, md, s, n, &m);
    for (size_t i = 0; !rc && i < m.n; i++) {
        if (m.v[i].id) tsr_tkbuf_put(out, with, with_len);
        else tsr_tkbuf_put(out, s + m.v[i].off, m.v[i].len);
    }
    tsr_spans_free(&m);
    return rc;
}

int tsr_normalize(const tsr_tokenizer *t, pcre2_match_data *md, const char *s, size_t n, tsr_tkbuf *out) {
    tsr_tkbuf cur, next;
    tsr_tkbuf_init(&cur, t->a);
    tsr_tkbuf_init(&next, t->a);
    tsr_tkbuf_put(&cur, s, n);
    int rc = 0;
    for (size_t i = 0; !rc && i < t->n_norm; i++) {
        const tsr_norm *nm = &t->norm[i];
        next.len = 0;
        if (nm->kind == TSR_NORM_PREPEND) {
            if (cur.len) tsr_tkbuf_put(&next, nm->str, nm->str_len); /* HF: only a non-empty string */
            tsr_tkbuf_put(&next, cur.p, cur.len);
        } else {
            rc = replace_all(t, md, &nm->re, nm->str, nm->str_len, cur.p, cur.len, &next);
        }
        tsr_tkbuf swap = cur;
        cur = next;
        next = swap;
    }
    if (!rc) tsr_tkbuf_put(out, cur.p, cur.len);
    if (!rc && (cur.failed || next.failed || out->failed)) rc = TESSERA_ERROR_OUT_OF_MEMORY;
    tsr_tkbuf_free(&cur);
    tsr_tkbuf_free(&next);
    return rc;
}

/* ---- added tokens ---- */

static bool is_word_char_at(const encoder *e, const char *s, size_t n, bool last) {
    if (!n) return false;
    size_t at = 0;
    if (last) { /* the start of the last character */
        at = n - 1;
        while (at > 0 && ((unsigned char)s[at] & 0xC0) == 0x80) at--;
    }
    int rc = pcre2_match(e->t->wordchar.code, (PCRE2_SPTR)s, n, at, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, e->md, NULL);
    return rc >= 0;
}

static size_t utf8_prev(const char *s, size_t at) {
    do at--;
    while (at > 0 && ((unsigned char)s[at] & 0xC0) == 0x80);
    return at;
}

static bool ws_at(const char *s, size_t n, size_t at, size_t *len) {
    bool truncated;
    int k = tsr_utf8_step((const unsigned char *)s + at, n - at, &truncated);
    if (k <= 0) return false;
    *len = (size_t)k;
    return tsr_unicode_is_whitespace(tsr_utf8_cp((const unsigned char *)s + at, k));
}

/* HF's AddedVocabulary::find_matches over one group (normalized or not): leftmost-longest matches,
 * with lstrip / rstrip / single_word, special tokens skipped unless parse_special. */
static void split_added(encoder *e, const char *s, size_t n, bool normalized, bool first, tsr_spans *out) {
    const tsr_tokenizer *t = e->t;
    bool parse_special = e->flags & TSR_TOKENIZE_PARSE_SPECIAL;
    size_t start_offset = 0, pos = 0;
    bool any = false;
    for (size_t k = 0; k < t->n_added; k++) any = any || t->added[k].normalized == normalized;
    while (any && pos < n) {
        const tsr_added *best = NULL;
        for (size_t k = 0; k < t->n_added; k++) {
            const tsr_added *at = &t->added[k];
            if (at->normalized != normalized || at->match_len > n - pos || (best && at->match_len <= best->match_len))
                continue;
            if (memcmp(s + pos, at->match, at->match_len) == 0) best = at;
        }
        if (!best) {
            pos++;
            continue;
        }
        size_t start = pos, stop = pos + best->match_len;
        pos = stop;
        if (best->special && !parse_special) continue;
        if (best->single_word && ((start > 0 && is_word_char_at(e, s, start, true)) ||
                                  (stop < n && is_word_char_at(e, s + stop, n - stop, false))))
            continue;
        if (best->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                size_t p = utf8_prev(s, ns), len;
                if (!ws_at(s, n, p, &len)) break;
                ns = p;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (best->rstrip) {
            size_t len;
            while (stop < n && ws_at(s, n, stop, &len)) stop += len;
        }
        if (start_offset < start) tsr_spans_push(out, start_offset, start - start_offset, -1, first && start_offset == 0);
        tsr_spans_push(out, start, stop - start, best->id, false);
        start_offset = stop;
    }
    if (start_offset < n || n == 0) tsr_spans_push(out, start_offset, n - start_offset, -1, first && start_offset == 0);
}

/* ---- pre-tokenizers ---- */

/* HF's SplitDelimiterBehavior over find_matches' spans (id 1 = a match), appended as (off, len). */
static void apply_behavior(const tsr_spans *m, tsr_split_behavior b, bool invert, tsr_spans *res) {
    size_t base = res->n;
    bool prev_match = false;
    if (b == TSR_SPLIT_MERGED_NEXT) {
        for (size_t k = m->n; k-- > 0;) {
            bool is_match = (m->v[k].id != 0) != invert;
            if (is_match && !prev_match && res->n > base) {
                tsr_span *last = &res->v[res->n - 1];
                last->len += last->off - m->v[k].off;
                last->off = m->v[k].off;
            } else {
                tsr_spans_push(res, m->v[k].off, m->v[k].len, 0, false);
            }
            prev_match = is_match;
        }
        if (res->failed) return;
        for (size_t i = base, j = res->n; i + 1 < j; i++, j--) { /* back to text order */
            tsr_span tmp = res->v[i];
            res->v[i] = res->v[j - 1];
            res->v[j - 1] = tmp;
        }
        return;
    }
    for (size_t k = 0; k < m->n; k++) {
        bool is_match = (m->v[k].id != 0) != invert;
        const tsr_span *s = &m->v[k];
        bool merge = (b == TSR_SPLIT_MERGED_PREV && is_match && !prev_match) ||
                     (b == TSR_SPLIT_CONTIGUOUS && is_match == prev_match);
        if (b == TSR_SPLIT_REMOVED && is_match) {
        } else if (merge && res->n > base) {
            res->v[res->n - 1].len = s->off + s->len - res->v[res->n - 1].off;
        } else {
            tsr_spans_push(res, s->off, s->len, 0, false);
        }
        prev_match = is_match;
    }
}

/* Splits text (with `first` for its first piece) by p into out_buf / out spans. */
static int pretok_one(encoder *e, const tsr_pretok *p, const char *text, size_t n, bool first, tsr_tkbuf *ob,
                      tsr_spans *os) {
    const tsr_tokenizer *t = e->t;
    tsr_tkbuf *tmp = &e->bufs[2];
    tmp->len = 0;
    if (p->kind == TSR_PRE_BYTELEVEL) {
        if (p->add_prefix_space && (n == 0 || text[0] != ' ')) tsr_tkbuf_put(tmp, " ", 1);
    } else if (p->kind == TSR_PRE_METASPACE) {
        bool starts = n >= p->rep_len && memcmp(text, p->replacement, p->rep_len) == 0;
        bool starts_space = n > 0 && text[0] == ' '; /* becomes the replacement */
        if (!starts && !starts_space &&
            (p->scheme == TSR_PREPEND_ALWAYS || (p->scheme == TSR_PREPEND_FIRST && first)))
            tsr_tkbuf_put(tmp, p->replacement, p->rep_len);
    }
    if (p->kind == TSR_PRE_METASPACE) {
        for (size_t i = 0; i < n; i++) {
            if (text[i] == ' ') tsr_tkbuf_put(tmp, p->replacement, p->rep_len);
            else tsr_tkbuf_put(tmp, text + i, 1);
        }
    } else {
        tsr_tkbuf_put(tmp, text, n);
    }
    if (tmp->failed) return TESSERA_ERROR_OUT_OF_MEMORY;
    tsr_spans *parts = &e->spans[2];
    parts->n = 0;
    if ((p->kind == TSR_PRE_METASPACE && p->split) || (p->kind != TSR_PRE_METASPACE && p->has_regex)) {
        e->matches.n = 0;
        int rc = tsr_regex_find_all(t, &p->re, e->md, tmp->p, tmp->len, &e->matches);
        if (rc) return rc;
        apply_behavior(&e->matches, p->behavior, p->invert, parts);
    } else {
        tsr_spans_push(parts, 0, tmp->len, 0, false);
    }
    if (parts->failed) return TESSERA_ERROR_OUT_OF_MEMORY;
    for (size_t k = 0; k < parts->n; k++) {
        const tsr_span *s = &parts->v[k];
        if (!s->len) continue;
        size_t off = ob->len;
        if (p->kind == TSR_PRE_BYTELEVEL) {
            for (size_t i = 0; i < s->len; i++) tsr_tkbuf_put_cp(ob, tsr_byte_to_cp((uint8_t)tmp->p[s->off + i]));
        } else {
            tsr_tkbuf_put(ob, tmp->p + s->off, s->len);
        }
        tsr_spans_push(os, off, ob->len - off, -1, first && s->off == 0);
    }
    return ob->failed || os->failed ? TESSERA_ERROR_OUT_OF_MEMORY : 0;
}

static int encode_piece(encoder *e, const char *s, size_t n, bool first) {
    const tsr_tokenizer *t = e->t;
    tsr_tkbuf *cb = &e->bufs[0], *nb = &e->bufs[1];
    tsr_spans *cs = &e->spans[0], *ns = &e->spans[1];
    cb->len = 0;
    cs->n = 0;
    tsr_tkbuf_put(cb, s, n);
    tsr_spans_push(cs, 0, n, -1, first);
    if (cb->failed || cs->failed) return TESSERA_ERROR_OUT_OF_MEMORY;
    for (size_t k = 0; k < t->n_pre; k++) {
        nb->len = 0;
        ns->n = 0;
        for (size_t i = 0; i < cs->n; i++) {
            int rc = pretok_one(e, &t->pre[k], cb->p + cs->v[i].off, cs->v[i].len, cs->v[i].first, nb, ns);
            if (rc) return rc;
        }
        tsr_tkbuf tb = *cb;
        *cb = *nb;
        *nb = tb;
        tsr_spans ts = *cs;
        *cs = *ns;
        *ns = ts;
    }
    for (size_t i = 0; i < cs->n; i++) {
        int rc = tsr_bpe_word(t, &e->bpe, cb->p + cs->v[i].off, cs->v[i].len, &e->ids);
        if (rc) return rc;
    }
    return 0;
}

static int encode_all(encoder *e, const char *text, size_t len) {
    const tsr_tokenizer *t = e->t;
    tsr_spans raw, sub;
    tsr_tkbuf norm;
    tsr_spans_init(&raw, t->a);
    tsr_spans_init(&sub, t->a);
    tsr_tkbuf_init(&norm, t->a);
    int rc = 0;
    split_added(e, text, len, false, true, &raw);
    if (raw.failed) rc = TESSERA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; !rc && i < raw.n; i++) {
        const tsr_span *r = &raw.v[i];
        if (r->id >= 0) {
            tsr_idvec_push(&e->ids, r->id);
            continue;
        }
        const char *piece = text + r->off;
        size_t plen = r->len;
        if (t->n_norm) {
            norm.len = 0;
            if ((rc = tsr_normalize(t, e->md, piece, plen, &norm))) break;
            piece = norm.p ? norm.p : "";
            plen = norm.len;
        }
        sub.n = 0;
        split_added(e, piece, plen, true, r->first, &sub);
        if (sub.failed) rc = TESSERA_ERROR_OUT_OF_MEMORY;
        for (size_t k = 0; !rc && k < sub.n; k++) {
            if (sub.v[k].id >= 0) tsr_idvec_push(&e->ids, sub.v[k].id);
            else if (sub.v[k].len) rc = encode_piece(e, piece + sub.v[k].off, sub.v[k].len, sub.v[k].first);
        }
    }
    tsr_spans_free(&raw);
    tsr_spans_free(&sub);
    tsr_tkbuf_free(&norm);
    return rc;
}

int32_t tsr_tokenizer_encode(const tsr_tokenizer *t, const char *text, size_t len, unsigned flags, int32_t *ids,
                             int32_t max_ids) {
    if (!t || (!text && len) || max_ids < 0 || (!ids && max_ids))
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "tsr_tokenizer_encode: bad argument");
    if (len > (size_t)INT32_MAX / 4)
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "tsr_tokenizer_encode: text of %zu bytes is too long", len);
    encoder e;
    memset(&e, 0, sizeof e);
    e.t = t;
    e.flags = flags;
    e.ids = (tsr_idvec){ids, max_ids, 0};
    e.bpe.a = t->a;
    for (int i = 0; i < 3; i++) {
        tsr_tkbuf_init(&e.bufs[i], t->a);
        tsr_spans_init(&e.spans[i], t->a);
    }
    tsr_spans_init(&e.matches, t->a);
    tsr_tkbuf input; /* valid UTF-8 for the regular expressions: invalid bytes become U+FFFD */
    tsr_tkbuf_init(&input, t->a);
    tsr_utf8_lossy(&input, text ? text : "", len, false, NULL);
    int rc = input.failed ? TESSERA_ERROR_OUT_OF_MEMORY : 0;
    if (!rc) {
        e.md = pcre2_match_data_create(1, t->gctx);
        if (!e.md) rc = tsr_error(TESSERA_ERROR_OUT_OF_MEMORY, "tokenizer: out of memory");
    }
    if (!rc && (flags & TSR_TOKENIZE_ADD_SPECIAL))
        for (size_t i = 0; i < t->n_post_before; i++) tsr_idvec_push(&e.ids, t->post_before[i]);
    if (!rc) rc = encode_all(&e, input.p ? input.p : "", input.len);
    if (!rc && (flags & TSR_TOKENIZE_ADD_SPECIAL))
        for (size_t i = 0; i < t->n_post_after; i++) tsr_idvec_push(&e.ids, t->post_after[i]);
    if (e.md) pcre2_match_data_free(e.md);
    tsr_tkbuf_free(&input);
    for (int i = 0; i < 3; i++) {
        tsr_tkbuf_free(&e.bufs[i]);
        tsr_spans_free(&e.spans[i]);
    }
    tsr_spans_free(&e.matches);
    tsr_bpe_scratch_free(&e.bpe);
    return rc ? rc : e.ids.n;
}
