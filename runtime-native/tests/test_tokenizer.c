/* The tokenizer: unit tests on two small tokenizer.json files (expected ids from HF tokenizers
 * 0.23), error cases, and streaming. With arguments it is the driver tests/native/test_tokenizer.py
 * compares with HF:
 *   test_tokenizer --encode TOKENIZER_JSON INPUT FLAGS
 * INPUT holds records "<byte count>\n<bytes>\n"; for each one it prints a line
 *   <ids separated by spaces>\t<hex of decode(skip_special=1)>\t<hex of decode(skip_special=0)>\t<hex of
 *   decode_stream(skip_special=0)>
 * FLAGS is the encode flags (1: parse special tokens, 2: add the post-processor's tokens). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tokenizer/tokenizer.h"

static char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) p[n] = '\0';
    *size = (size_t)n;
    return p;
}

static tsr_tokenizer *load_file(tsr_alloc *a, const char *path) {
    size_t n;
    char *json = read_file(path, &n);
    if (!json) {
        fprintf(stderr, "cannot read %s\n", path);
        return NULL;
    }
    tsr_tokenizer *t = NULL;
    int rc = tsr_tokenizer_load(a, json, n, &t);
    free(json);
    if (rc) fprintf(stderr, "%s: %s\n", path, tessera_last_error());
    return t;
}

static bool encodes_to(const tsr_tokenizer *t, const char *text, unsigned flags, const int32_t *want, int32_t n) {
    int32_t ids[256];
    int32_t got = tsr_tokenizer_encode(t, text, strlen(text), flags, ids, 256);
    if (got != n) {
        fprintf(stderr, "encode(\"%s\"): %d ids, want %d\n", text, (int)got, (int)n);
        return false;
    }
    for (int32_t i = 0; i < n; i++)
        if (ids[i] != want[i]) {
            fprintf(stderr, "encode(\"%s\"): id %d is %d, want %d\n", text, (int)i, (int)ids[i], (int)want[i]);
            return false;
        }
    return true;
}

static bool decodes_to(const tsr_tokenizer *t, const int32_t *ids, int32_t n, int skip, const char *want) {
    char buf[512];
    int32_t len = tsr_tokenizer_decode(t, ids, n, skip, buf, sizeof buf);
    if (len < 0 || (size_t)len != strlen(want) || memcmp(buf, want, (size_t)len) != 0) {
        fprintf(stderr, "decode: \"%.*s\" (%d), want \"%s\"\n", len > 0 ? (int)len : 0, buf, (int)len, want);
        return false;
    }
    return true;
}

#define N(a) (int32_t)(sizeof(a) / sizeof((a)[0]))

static void test_bytelevel(tsr_alloc *a) {
    tsr_tokenizer *t = load_file(a, "data/tokenizer_bytelevel.json");
    CHECK(t != NULL);
    if (!t) return;
    CHECK_EQ_INT(tsr_tokenizer_vocab_size(t), 271);
    static const int32_t e1[] = {83, 257, 262, 268};
    CHECK(encodes_to(t, "the and world", 0, e1, N(e1)));
    CHECK(decodes_to(t, e1, N(e1), 1, "the and world"));
    static const int32_t e2[] = {39, 68, 75, 75, 78, 268, 269, 263, 220, 18, 270, 87};
    CHECK(encodes_to(t, "Hello world<|end|>12 3<tool>x", TSR_TOKENIZE_PARSE_SPECIAL, e2, N(e2)));
    CHECK(decodes_to(t, e2, N(e2), 1, "Hello world12 3<tool>x"));
    CHECK(decodes_to(t, e2, N(e2), 0, "Hello world<|end|>12 3<tool>x"));
    /* Without parse_special the marker is text; the non-special <tool> is still matched. */
    int32_t ids[64];
    int32_t n = tsr_tokenizer_encode(t, "x<|end|>", 8, 0, ids, 64);
    CHECK(n > 2);
    CHECK(tsr_tokenizer_encode(t, "x<|end|>", 8, TSR_TOKENIZE_PARSE_SPECIAL, ids, 64) == 2 && ids[1] == 269);
    CHECK(tsr_tokenizer_encode(t, "<tool>", 6, 0, ids, 64) == 1 && ids[0] == 270);
    static const int32_t e3[] = {66, 64, 69, 127, 102, 220, 172, 253, 246, 222};
    CHECK(encodes_to(t, "caf\xC3\xA9 \xF0\x9F\x98\x80", 0, e3, N(e3)));
    CHECK(decodes_to(t, e3, N(e3), 1, "caf\xC3\xA9 \xF0\x9F\x98\x80"));
    static const int32_t e4[] = {220, 258};
    CHECK(encodes_to(t, "  the", 0, e4, N(e4)));
    CHECK_EQ_INT(tsr_tokenizer_encode(t, "", 0, 0, ids, 64), 0);
    CHECK(decodes_to(t, ids, 0, 1, "")); /* nothing to copy into a non-empty buffer */
    /* The count is returned even when the array is too small. */
    CHECK_EQ_INT(tsr_tokenizer_encode(t, "the and world", 13, 0, ids, 1), 4);
    CHECK_EQ_INT(ids[0], 83);
    CHECK_EQ_INT(tsr_tokenizer_token_to_id(t, "<|end|>", 7), 269);
    CHECK_EQ_INT(tsr_tokenizer_token_to_id(t, "\xC4\xA0the", 5), 258);
    CHECK_EQ_INT(tsr_tokenizer_token_to_id(t, "nope", 4), -1);
    CHECK(strcmp(tsr_tokenizer_token_str(t, 258), "\xC4\xA0the") == 0);
    CHECK(tsr_tokenizer_token_str(t, 100000) == NULL);
    CHECK(tsr_tokenizer_is_special(t, 269) && !tsr_tokenizer_is_special(t, 270) && !tsr_tokenizer_is_special(t, 83));
    char buf[16];
    CHECK_EQ_INT(tsr_tokenizer_token_to_piece(t, 258, buf, sizeof buf), 4);
    CHECK(memcmp(buf, " the", 4) == 0);
    /* Streaming: the emoji's 4 bytes come as 4 tokens; only whole characters are released. */
    CHECK_EQ_INT(tsr_tokenizer_token_to_piece(t, 172, buf, sizeof buf), 1);
    CHECK_EQ_INT((unsigned char)buf[0], 0xF0);
    for (int32_t k = 6; k <= 10; k++) {
        int32_t len = tsr_tokenizer_decode_stream(t, e3, k, 1, NULL, 0);
        CHECK_EQ_INT(len, k < 10 ? 6 : 10);
    }
    /* decode (not streaming) replaces the incomplete tail like HF. */
    CHECK(decodes_to(t, e3, 8, 1, "caf\xC3\xA9 \xEF\xBF\xBD"));
    /* Invalid UTF-8 input is repaired (U+FFFD) rather than given to the regular expression. */
    CHECK(tsr_tokenizer_encode(t, "a\xFF" "b", 3, 0, ids, 64) > 0);
    /* Unknown ids are left out of decode. */
    static const int32_t bad_ids[] = {83, -5, 99999, 257};
    CHECK(decodes_to(t, bad_ids, 4, 1, "the")); /* 83 "t", 257 "he" */
    CHECK(tsr_tokenizer_token_to_piece(t, 99999, buf, sizeof buf) == TESSERA_ERROR_INVALID_ARGUMENT);
    tsr_tokenizer_free(t);
}

static void test_spm(tsr_alloc *a) {
    tsr_tokenizer *t = load_file(a, "data/tokenizer_spm.json");
    CHECK(t != NULL);
    if (!t) return;
    unsigned f = TSR_TOKENIZE_PARSE_SPECIAL | TSR_TOKENIZE_ADD_SPECIAL;
    static const int32_t e1[] = {1, 276, 281};
    CHECK(encodes_to(t, "hello world", f, e1, N(e1)));
    CHECK(decodes_to(t, e1, N(e1), 1, "hello world"));
    static const int32_t e2[] = {1, 276, 259, 281, 2};
    CHECK(encodes_to(t, "hello  world</s>", f, e2, N(e2)));
    CHECK(decodes_to(t, e2, N(e2), 1, "hello  world"));
    static const int32_t e3[] = {1, 272, 271, 265, 275, 259, 231, 187, 176};
    CHECK(encodes_to(t, "h\xC3\xA9llo \xE4\xB8\xAD", f, e3, N(e3)));
    CHECK(decodes_to(t, e3, N(e3), 1, "h\xC3\xA9llo \xE4\xB8\xAD"));
    CHECK_EQ_INT(tsr_tokenizer_decode_stream(t, e3, 7, 1, NULL, 0), 7); /* "héllo " without the first byte of 中 */
    CHECK(decodes_to(t, e3, 7, 1, "h\xC3\xA9llo \xEF\xBF\xBD"));
    static const int32_t e4[] = {1};
    CHECK(encodes_to(t, "", f, e4, N(e4)));
    static const int32_t e5[] = {1, 259, 259, 123};
    CHECK(encodes_to(t, " x", f, e5, N(e5)));
    static const int32_t e6[] = {276};
    CHECK(encodes_to(t, "hello", 0, e6, N(e6)));
    char buf[16];
    CHECK_EQ_INT(tsr_tokenizer_token_to_piece(t, 276, buf, sizeof buf), 6);
    CHECK(memcmp(buf, " hello", 6) == 0);
    CHECK_EQ_INT(tsr_tokenizer_token_to_piece(t, 231, buf, sizeof buf), 1);
    CHECK_EQ_INT((unsigned char)buf[0], 0xE4);
    tsr_tokenizer_free(t);
}

static void expect_error(tsr_alloc *a, const char *json, int status, const char *needle) {
    tsr_tokenizer *t = (tsr_tokenizer *)1;
    int rc = tsr_tokenizer_load(a, json, strlen(json), &t);
    CHECK(t == NULL);
    if (rc != status || !strstr(tessera_last_error(), needle)) {
        fprintf(stderr, "load: %s (%d), want %s / \"%s\"\n", tessera_last_error(), rc, tessera_status_name(status), needle);
        CHECK(!"the expected error");
    }
}

#define MODEL "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a b\"]}"

static void test_errors(tsr_alloc *a) {
    expect_error(a, "{\"model\": ", TESSERA_ERROR_FORMAT, "not valid JSON");
    expect_error(a, "[1, 2]", TESSERA_ERROR_FORMAT, "not a JSON object");
    expect_error(a, "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", TESSERA_ERROR_UNSUPPORTED,
                 "model \"WordPiece\" is not supported");
    expect_error(a, "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", TESSERA_ERROR_UNSUPPORTED, "Unigram");
    expect_error(a, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a c\"]}}",
                 TESSERA_ERROR_FORMAT, "\"c\", which is not in the vocabulary");
    expect_error(a, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [[\"a\", \"b\"]]}}",
                 TESSERA_ERROR_FORMAT, "makes \"ab\", which is not in the vocabulary");
    expect_error(a, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b c\"]}}",
                 TESSERA_ERROR_FORMAT, "not two tokens");
    expect_error(a, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}}", TESSERA_ERROR_FORMAT,
                 "not a non-negative integer");
    expect_error(a, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], \"unk_token\": \"<unk>\"}}",
                 TESSERA_ERROR_FORMAT, "unk_token");
    expect_error(a, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], \"continuing_subword_prefix\": \"##\"}}",
                 TESSERA_ERROR_UNSUPPORTED, "continuing_subword_prefix");
    expect_error(a, "{\"normalizer\": {\"type\": \"NFC\"}, " MODEL "}", TESSERA_ERROR_UNSUPPORTED,
                 "normalizer \"NFC\" is not supported");
    expect_error(a, "{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"BertPreTokenizer\"}]}, " MODEL "}",
                 TESSERA_ERROR_UNSUPPORTED, "pre_tokenizer \"BertPreTokenizer\" is not supported");
    expect_error(a, "{\"decoder\": {\"type\": \"WordPiece\"}, " MODEL "}", TESSERA_ERROR_UNSUPPORTED,
                 "decoder \"WordPiece\" is not supported");
    expect_error(a, "{\"post_processor\": {\"type\": \"BertProcessing\"}, " MODEL "}", TESSERA_ERROR_UNSUPPORTED,
                 "post_processor \"BertProcessing\"");
    expect_error(a, "{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}, " MODEL "}",
                 TESSERA_ERROR_UNSUPPORTED, "does not compile");
    expect_error(a, "{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Sideways\"}, " MODEL "}",
                 TESSERA_ERROR_UNSUPPORTED, "Sideways");
    expect_error(a, "{\"truncation\": {\"max_length\": 5}, " MODEL "}", TESSERA_ERROR_UNSUPPORTED, "truncation");
    expect_error(a, "{\"added_tokens\": [{\"id\": 5}], " MODEL "}", TESSERA_ERROR_FORMAT, "'content'");
    /* A minimal valid one: no pre-tokenizer, no decoder (decode joins tokens with spaces). */
    const char *ok = "{" MODEL "}";
    tsr_tokenizer *t = NULL;
    CHECK(tsr_tokenizer_load(a, ok, strlen(ok), &t) == 0);
    if (t) {
        int32_t ids[8];
        CHECK_EQ_INT(tsr_tokenizer_encode(t, "abba", 4, 0, ids, 8), 3);
        CHECK(ids[0] == 2 && ids[1] == 1 && ids[2] == 0);
        CHECK(decodes_to(t, ids, 3, 1, "ab b a"));
        tsr_tokenizer_free(t);
    }
}

static int drive(const char *json_path, const char *input_path, unsigned flags) {
    tsr_alloc a;
    tsr_alloc_init(&a, NULL);
    tsr_tokenizer *t = load_file(&a, json_path);
    if (!t) return 1;
    size_t size;
    char *in = read_file(input_path, &size);
    if (!in) {
        fprintf(stderr, "cannot read %s\n", input_path);
        return 1;
    }
    int32_t cap = 1 << 16;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    int32_t tcap = 1 << 20;
    char *text = malloc((size_t)tcap);
    size_t at = 0;
    int status = 0;
    while (at < size && !status) {
        char *end;
        unsigned long len = strtoul(in + at, &end, 10);
        if (*end != '\n' || (size_t)(end + 1 - in) + len > size) {
            fprintf(stderr, "bad record at byte %zu\n", at);
            status = 1;
            break;
        }
        const char *s = end + 1;
        int32_t n = tsr_tokenizer_encode(t, s, len, flags, ids, cap);
        if (n < 0 || n > cap) {
            fprintf(stderr, "encode failed (%d): %s\n", (int)n, tessera_last_error());
            status = 1;
            break;
        }
        for (int32_t i = 0; i < n; i++) printf(i ? " %d" : "%d", (int)ids[i]);
        for (int mode = 0; mode < 3; mode++) {
            int32_t m = mode == 2 ? tsr_tokenizer_decode_stream(t, ids, n, 0, text, tcap)
                                  : tsr_tokenizer_decode(t, ids, n, mode == 0, text, tcap);
            if (m < 0 || m > tcap) {
                fprintf(stderr, "decode failed (%d): %s\n", (int)m, tessera_last_error());
                status = 1;
                break;
            }
            putchar('\t');
            for (int32_t i = 0; i < m; i++) printf("%02x", (unsigned char)text[i]);
        }
        putchar('\n');
        at = (size_t)(s - in) + len + 1;
    }
    free(in);
    free(ids);
    free(text);
    tsr_tokenizer_free(t);
    return status;
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "--encode")) return drive(argv[2], argv[3], (unsigned)atoi(argv[4]));
    if (argc != 1) {
        fprintf(stderr, "usage: %s [--encode TOKENIZER_JSON INPUT FLAGS]\n", argv[0]);
        return 2;
    }
    tsr_alloc a;
    tsr_alloc_init(&a, NULL);
    test_bytelevel(&a);
    test_spm(&a);
    test_errors(&a);
    return tsr_test_failures();
}
