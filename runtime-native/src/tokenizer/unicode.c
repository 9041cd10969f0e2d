/* UTF-8 stepping and lossy repair, GPT-2's byte <-> code point map, growable buffers, and regular
 * expressions through PCRE2 with the semantics Hugging Face's Oniguruma patterns have. */
#include <string.h>

#include "tokenizer/tok_internal.h"

/* ---- buffers ---- */

void tsr_tkbuf_init(tsr_tkbuf *b, tsr_alloc *a) {
    memset(b, 0, sizeof *b);
    b->a = a;
}

void tsr_tkbuf_free(tsr_tkbuf *b) {
    tsr_free(b->a, b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

bool tsr_tkbuf_reserve(tsr_tkbuf *b, size_t extra) {
    if (b->failed) return false;
    size_t need;
    if (!tsr_add_size(b->len, extra, &need)) {
        b->failed = true;
        tsr_error(TESSERA_ERROR_OUT_OF_MEMORY, "tokenizer buffer size overflows");
        return false;
    }
    if (need <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap *= 2;
    char *p = tsr_malloc(b->a, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    if (b->len) memcpy(p, b->p, b->len);
    tsr_free(b->a, b->p);
    b->p = p;
    b->cap = cap;
    return true;
}

void tsr_tkbuf_put(tsr_tkbuf *b, const void *data, size_t n) {
    if (!n || !tsr_tkbuf_reserve(b, n)) return;
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

void tsr_tkbuf_put_cp(tsr_tkbuf *b, uint32_t cp) {
    unsigned char s[4];
    size_t n;
    if (cp < 0x80) {
        s[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        s[0] = (unsigned char)(0xC0 | (cp >> 6));
        s[1] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        s[0] = (unsigned char)(0xE0 | (cp >> 12));
        s[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        s[2] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        s[0] = (unsigned char)(0xF0 | (cp >> 18));
        s[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        s[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        s[3] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    tsr_tkbuf_put(b, s, n);
}

void tsr_spans_init(tsr_spans *s, tsr_alloc *a) {
    memset(s, 0, sizeof *s);
    s->a = a;
}

void tsr_spans_free(tsr_spans *s) {
    tsr_free(s->a, s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

void tsr_spans_push(tsr_spans *s, size_t off, size_t len, int32_t id, bool first) {
    if (s->failed) return;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        tsr_span *v = tsr_calloc(s->a, cap, sizeof *v);
        if (!v) {
            s->failed = true;
            return;
        }
        if (s->n) memcpy(v, s->v, s->n * sizeof *v);
        tsr_free(s->a, s->v);
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (tsr_span){off, len, id, first};
}

/* ---- UTF-8 ---- */

int tsr_utf8_step(const unsigned char *s, size_t n, bool *truncated) {
    *truncated = false;
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    int need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) { need = 2; lo = 0xA0; }
    else if (c >= 0xE1 && c <= 0xEC) need = 2;
    else if (c == 0xED) { need = 2; hi = 0x9F; }
    else if (c >= 0xEE && c <= 0xEF) need = 2;
    else if (c == 0xF0) { need = 3; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) { need = 3; hi = 0x8F; }
    else return -1;
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n) {
            *truncated = true;
            return -i;
        }
        unsigned char x = s[i];
        if (x < lo || x > hi) return -i;
        lo = 0x80;
        hi = 0xBF;
    }
    return need + 1;
}

uint32_t tsr_utf8_cp(const unsigned char *s, int len) {
    switch (len) {
    case 1: return s[0];
    case 2: return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    case 3: return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    default:
        return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) |
               (s[3] & 0x3F);
    }
}

void tsr_utf8_lossy(tsr_tkbuf *out, const char *src, size_t n, bool keep_tail, size_t *tail) {
    const unsigned char *s = (const unsigned char *)src;
    size_t i = 0, run = 0; /* run: start of the pending valid bytes */
    if (tail) *tail = 0;
    while (i < n) {
        bool truncated;
        int k = tsr_utf8_step(s + i, n - i, &truncated);
        if (k > 0) {
            i += (size_t)k;
            continue;
        }
        tsr_tkbuf_put(out, s + run, i - run);
        if (truncated && keep_tail) {
            tsr_tkbuf_put(out, s + i, n - i);
            if (tail) *tail = n - i;
            return;
        }
        tsr_tkbuf_put(out, "\xEF\xBF\xBD", 3);
        i += (size_t)(-k);
        run = i;
    }
    tsr_tkbuf_put(out, s + run, n - run);
}

size_t tsr_utf8_complete_prefix(const char *s, size_t len) {
    /* Only the last (at most 3) bytes can start an incomplete sequence. */
    size_t start = len > 3 ? len - 3 : 0;
    for (size_t i = start; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80 || c >= 0xC0) {
            bool truncated;
            int k = tsr_utf8_step((const unsigned char *)s + i, len - i, &truncated);
            if (k < 0 && truncated) return i;
            if (k > 0) i += (size_t)k - 1;
        }
    }
    return len;
}

bool tsr_unicode_is_whitespace(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

/* ---- GPT-2 byte map: printable Latin-1 bytes stand for themselves, the other 68 for 256.. ---- */

static bool byte_is_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t tsr_byte_to_cp(uint8_t b) {
    if (byte_is_printable(b)) return b;
    uint32_t n = 0;
    for (unsigned x = 0; x < b; x++)
        if (!byte_is_printable(x)) n++;
    return 256 + n;
}

int tsr_cp_to_byte(uint32_t cp) {
    if (cp < 256) return byte_is_printable(cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    uint32_t n = cp - 256;
    for (unsigned x = 0; x < 256; x++)
        if (!byte_is_printable(x) && n-- == 0) return (int)x;
    return -1;
}

/* ---- regular expressions ---- */

/* Oniguruma's \s (HF compiles its patterns with it) is Unicode White_Space; PCRE2's \s with UCP
 * lacks U+0085. Spell it out: outside a class as a class, inside a class as its members. */
static const char WS_MEMBERS[] = "\\t-\\r\\x{85}\\p{Z}";

static int rewrite_pattern(tsr_tkbuf *out, const char *p, size_t n) {
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char e = p[i + 1];
            if (e == 's' || (e == 'S' && !in_class)) {
                if (!in_class) tsr_tkbuf_put(out, e == 's' ? "[" : "[^", e == 's' ? 1 : 2);
                tsr_tkbuf_put(out, WS_MEMBERS, sizeof WS_MEMBERS - 1);
                if (!in_class) tsr_tkbuf_put(out, "]", 1);
            } else {
                tsr_tkbuf_put(out, p + i, 2);
            }
            i++;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            tsr_tkbuf_put(out, p + i, 1);
            /* A ']' right after '[' or '[^' is a member, not the end. */
            if (i + 1 < n && p[i + 1] == '^') tsr_tkbuf_put(out, p + ++i, 1);
            if (i + 1 < n && p[i + 1] == ']') tsr_tkbuf_put(out, p + ++i, 1);
            continue;
        }
        if (in_class && c == ']') in_class = false;
        tsr_tkbuf_put(out, p + i, 1);
    }
    return out->failed ? TESSERA_ERROR_OUT_OF_MEMORY : 0;
}

int tsr_regex_compile(tsr_tokenizer *t, const char *pattern, size_t len, bool literal, tsr_regex *out,
                      const char *what) {
    tsr_tkbuf buf;
    tsr_tkbuf_init(&buf, t->a);
    uint32_t options = PCRE2_UTF | PCRE2_UCP;
    if (literal) {
        options = PCRE2_UTF | PCRE2_LITERAL; /* UCP is refused with LITERAL (and means nothing there) */
        tsr_tkbuf_put(&buf, pattern, len);
    } else {
        int rc = rewrite_pattern(&buf, pattern, len);
        if (rc) return rc;
    }
    if (buf.failed) return TESSERA_ERROR_OUT_OF_MEMORY;
    int code;
    PCRE2_SIZE at;
    out->code = pcre2_compile((PCRE2_SPTR)(buf.p ? buf.p : ""), buf.len, options, &code, &at, t->cctx);
    tsr_tkbuf_free(&buf);
    if (!out->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "tokenizer.json: %s: the pattern \"%.*s\" does not compile: %s",
                         what, (int)(len > 200 ? 200 : len), pattern, (const char *)msg);
    }
    pcre2_jit_compile(out->code, PCRE2_JIT_COMPLETE); /* without JIT, pcre2_match interprets */
    return 0;
}

void tsr_regex_free(tsr_regex *re) {
    if (re->code) pcre2_code_free(re->code);
    re->code = NULL;
}

int tsr_regex_find_all(const tsr_tokenizer *t, const tsr_regex *re, pcre2_match_data *md, const char *s, size_t n,
                       tsr_spans *out) {
    size_t prev = 0, at = 0;
    while (at <= n) {
        int rc = pcre2_match(re->code, (PCRE2_SPTR)s, n, at, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(re->code, (PCRE2_SPTR)s, n, at, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return tsr_error(TESSERA_ERROR_RUNTIME_CHECK, "tokenizer: regular expression failed: %s",
                             (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t start = ov[0], end = ov[1];
        if (prev != start) tsr_spans_push(out, prev, start - prev, 0, false);
        tsr_spans_push(out, start, end - start, 1, false);
        prev = end;
        if (end > start) {
            at = end;
        } else { /* an empty match: go on after the next character */
            if (end >= n) break;
            bool truncated;
            int k = tsr_utf8_step((const unsigned char *)s + end, n - end, &truncated);
            at = end + (size_t)(k > 0 ? k : 1);
        }
    }
    if (prev != n) tsr_spans_push(out, prev, n - prev, 0, false);
    (void)t;
    return out->failed ? TESSERA_ERROR_OUT_OF_MEMORY : 0;
}
