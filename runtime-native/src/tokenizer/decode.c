/* Decoding: ids -> token strings -> the decoder chain (each decoder maps a list of strings to a
 * list of strings, as HF's decode_chain does) -> their concatenation. Three modes: text (HF's
 * decode), stream (an incomplete UTF-8 sequence at the end is held back, not replaced), and piece
 * (one token's raw bytes: no stripping, no repair). */
#include <string.h>

#include "tokenizer/tok_internal.h"

typedef enum { MODE_TEXT, MODE_STREAM, MODE_PIECE } decode_mode;

typedef struct strlist {
    tsr_tkbuf buf;
    tsr_spans s;
} strlist;

static void list_init(strlist *l, tsr_alloc *a) {
    tsr_tkbuf_init(&l->buf, a);
    tsr_spans_init(&l->s, a);
}

static void list_free(strlist *l) {
    tsr_tkbuf_free(&l->buf);
    tsr_spans_free(&l->s);
}

static void list_reset(strlist *l) {
    l->buf.len = 0;
    l->s.n = 0;
}

static void list_push(strlist *l, const char *p, size_t n) {
    size_t off = l->buf.len;
    tsr_tkbuf_put(&l->buf, p, n);
    tsr_spans_push(&l->s, off, n, 0, false);
}

/* The token is the two-digit hex byte of "<0xXX>"; -1 otherwise. */
static int byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static void flush_bytes(strlist *out, tsr_tkbuf *bytes, bool at_end, decode_mode mode) {
    if (!bytes->len) return;
    size_t i = 0;
    bool valid = true, tail_only = false;
    while (i < bytes->len) {
        bool truncated;
        int k = tsr_utf8_step((const unsigned char *)bytes->p + i, bytes->len - i, &truncated);
        if (k < 0) {
            valid = false;
            tail_only = truncated;
            break;
        }
        i += (size_t)k;
    }
    if (valid || mode == MODE_PIECE || (mode == MODE_STREAM && at_end && tail_only)) {
        list_push(out, bytes->p, bytes->len);
    } else { /* HF: one U+FFFD per byte of an invalid run */
        size_t off = out->buf.len;
        for (size_t k = 0; k < bytes->len; k++) tsr_tkbuf_put(&out->buf, "\xEF\xBF\xBD", 3);
        tsr_spans_push(&out->s, off, out->buf.len - off, 0, false);
    }
    bytes->len = 0;
}

static int apply_decoder(const tsr_tokenizer *t, const tsr_dec *d, pcre2_match_data *md, const strlist *in,
                         strlist *out, decode_mode mode, tsr_tkbuf *tmp) {
    const char *base = in->buf.p;
    switch (d->kind) {
    case TSR_DEC_BYTELEVEL: {
        tmp->len = 0;
        for (size_t i = 0; i < in->s.n; i++) {
            const char *s = base + in->s.v[i].off;
            size_t n = in->s.v[i].len, start = tmp->len;
            bool all = true;
            for (size_t k = 0; k < n && all;) {
                bool truncated;
                int step = tsr_utf8_step((const unsigned char *)s + k, n - k, &truncated);
                int b = step > 0 ? tsr_cp_to_byte(tsr_utf8_cp((const unsigned char *)s + k, step)) : -1;
                if (b < 0) all = false;
                else {
                    unsigned char c = (unsigned char)b;
                    tsr_tkbuf_put(tmp, &c, 1);
                }
                k += step > 0 ? (size_t)step : 1;
            }
            if (!all) { /* HF keeps a token with a non-byte character as it is */
                tmp->len = start;
                tsr_tkbuf_put(tmp, s, n);
            }
        }
        size_t off = out->buf.len;
        if (mode == MODE_PIECE) tsr_tkbuf_put(&out->buf, tmp->p, tmp->len);
        else tsr_utf8_lossy(&out->buf, tmp->p ? tmp->p : "", tmp->len, mode == MODE_STREAM, NULL);
        tsr_spans_push(&out->s, off, out->buf.len - off, 0, false);
        return 0;
    }
    case TSR_DEC_BYTEFALLBACK: {
        tmp->len = 0;
        for (size_t i = 0; i < in->s.n; i++) {
            const char *s = base + in->s.v[i].off;
            int b = byte_token(s, in->s.v[i].len);
            if (b >= 0) {
                unsigned char c = (unsigned char)b;
                tsr_tkbuf_put(tmp, &c, 1);
                continue;
            }
            flush_bytes(out, tmp, false, mode);
            list_push(out, s, in->s.v[i].len);
        }
        flush_bytes(out, tmp, true, mode);
        return 0;
    }
    case TSR_DEC_FUSE: {
        size_t off = out->buf.len;
        for (size_t i = 0; i < in->s.n; i++) tsr_tkbuf_put(&out->buf, base + in->s.v[i].off, in->s.v[i].len);
        tsr_spans_push(&out->s, off, out->buf.len - off, 0, false);
        return 0;
    }
    case TSR_DEC_REPLACE:
        for (size_t i = 0; i < in->s.n; i++) {
            size_t off = out->buf.len;
            const char *s = base + in->s.v[i].off;
            size_t n = in->s.v[i].len;
            /* Only a held-back tail (stream, piece) can be invalid UTF-8; keep it out of the regex. */
            size_t ok = mode == MODE_TEXT ? n : tsr_utf8_complete_prefix(s, n);
            tsr_spans m;
            tsr_spans_init(&m, t->a);
            int rc = tsr_regex_find_all(t, &d->re, md, s, ok, &m);
            for (size_t k = 0; !rc && k < m.n; k++) {
                if (m.v[k].id) tsr_tkbuf_put(&out->buf, d->content, d->content_len);
                else tsr_tkbuf_put(&out->buf, s + m.v[k].off, m.v[k].len);
            }
            tsr_spans_free(&m);
            if (rc) return rc;
            tsr_tkbuf_put(&out->buf, s + ok, n - ok);
            tsr_spans_push(&out->s, off, out->buf.len - off, 0, false);
        }
        return 0;
    case TSR_DEC_STRIP:
        for (size_t i = 0; i < in->s.n; i++) {
            const unsigned char *s = (const unsigned char *)base + in->s.v[i].off;
            size_t n = in->s.v[i].len, from = 0, to = n;
            if (mode != MODE_PIECE) {
                for (int32_t k = 0; k < d->start && from < to; k++) {
                    bool truncated;
                    int step = tsr_utf8_step(s + from, to - from, &truncated);
                    if (step <= 0 || tsr_utf8_cp(s + from, step) != d->strip_cp) break;
                    from += (size_t)step;
                }
                for (int32_t k = 0; k < d->stop && to > from; k++) {
                    size_t p = to - 1;
                    while (p > from && (s[p] & 0xC0) == 0x80) p--;
                    bool truncated;
                    int step = tsr_utf8_step(s + p, to - p, &truncated);
                    if (step <= 0 || tsr_utf8_cp(s + p, step) != d->strip_cp) break;
                    to = p;
                }
            }
            list_push(out, (const char *)s + from, to - from);
        }
        return 0;
    case TSR_DEC_METASPACE:
        for (size_t i = 0; i < in->s.n; i++) {
            const char *s = base + in->s.v[i].off;
            size_t n = in->s.v[i].len, off = out->buf.len;
            bool drop = i == 0 && d->scheme != TSR_PREPEND_NEVER && mode != MODE_PIECE;
            for (size_t k = 0; k < n;) {
                if (n - k >= d->rep_len && memcmp(s + k, d->replacement, d->rep_len) == 0) {
                    if (!drop) tsr_tkbuf_put(&out->buf, " ", 1);
                    k += d->rep_len;
                } else {
                    tsr_tkbuf_put(&out->buf, s + k, 1);
                    k++;
                }
            }
            tsr_spans_push(&out->s, off, out->buf.len - off, 0, false);
        }
        return 0;
    }
    return 0;
}

static int32_t decode(const tsr_tokenizer *t, const int32_t *ids, int32_t n, int skip_special, char *buf,
                      int32_t size, decode_mode mode) {
    if (!t || n < 0 || (!ids && n) || size < 0 || (!buf && size))
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "tsr_tokenizer_decode: bad argument");
    strlist lists[2];
    tsr_tkbuf tmp;
    list_init(&lists[0], t->a);
    list_init(&lists[1], t->a);
    tsr_tkbuf_init(&tmp, t->a);
    strlist *cur = &lists[0], *next = &lists[1];
    for (int32_t i = 0; i < n; i++) {
        const char *s = tsr_tokenizer_token_str(t, ids[i]);
        if (!s || (skip_special && tsr_tokenizer_is_special(t, ids[i]))) continue;
        list_push(cur, s, strlen(s));
    }
    int rc = 0;
    pcre2_match_data *md = pcre2_match_data_create(1, t->gctx);
    if (!md) rc = TESSERA_ERROR_OUT_OF_MEMORY;
    for (size_t k = 0; !rc && k < t->n_dec; k++) {
        list_reset(next);
        rc = apply_decoder(t, &t->dec[k], md, cur, next, mode, &tmp);
        strlist *sw = cur;
        cur = next;
        next = sw;
    }
    if (md) pcre2_match_data_free(md);
    tsr_tkbuf *text = &next->buf;
    if (!rc) {
        list_reset(next);
        for (size_t i = 0; i < cur->s.n; i++) {
            if (i && !t->has_decoder) tsr_tkbuf_put(text, " ", 1); /* HF joins the tokens with spaces */
            tsr_tkbuf_put(text, cur->buf.p + cur->s.v[i].off, cur->s.v[i].len);
        }
        if (cur->buf.failed || cur->s.failed || text->failed || tmp.failed) rc = TESSERA_ERROR_OUT_OF_MEMORY;
    }
    size_t len = 0;
    if (!rc) {
        len = text->len;
        if (mode == MODE_STREAM) len = tsr_utf8_complete_prefix(text->p, len);
        if (len > INT32_MAX) rc = tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "tsr_tokenizer_decode: the text is too long");
        else if (size && len) memcpy(buf, text->p, len < (size_t)size ? len : (size_t)size);
    }
    list_free(&lists[0]);
    list_free(&lists[1]);
    tsr_tkbuf_free(&tmp);
    return rc ? rc : (int32_t)len;
}

int32_t tsr_tokenizer_decode(const tsr_tokenizer *t, const int32_t *ids, int32_t n, int skip_special, char *buf,
                             int32_t size) {
    return decode(t, ids, n, skip_special, buf, size, MODE_TEXT);
}

int32_t tsr_tokenizer_decode_stream(const tsr_tokenizer *t, const int32_t *ids, int32_t n, int skip_special,
                                    char *buf, int32_t size) {
    return decode(t, ids, n, skip_special, buf, size, MODE_STREAM);
}

int32_t tsr_tokenizer_token_to_piece(const tsr_tokenizer *t, int32_t id, char *buf, int32_t size) {
    if (t && !tsr_tokenizer_token_str(t, id))
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "tsr_tokenizer_token_to_piece: no token has id %d", (int)id);
    return decode(t, &id, 1, 0, buf, size, MODE_PIECE);
}
