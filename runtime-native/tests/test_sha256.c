/* SHA-256 against the FIPS 180-2 / NIST example vectors, lengths around the padding boundary
 * (digests from Python's hashlib), and updates split at odd sizes. */
#include <string.h>

#include "harness.h"
#include "sha256.h"

#define sizeof_array(a) (sizeof(a) / sizeof((a)[0]))

static int hex_of(const char *text, size_t size, const char *want) {
    char hex[65];
    tsr_sha256_hex(text, size, hex);
    if (strcmp(hex, want) != 0) fprintf(stderr, "sha256 of %zu bytes: %s, want %s\n", size, hex, want);
    return strcmp(hex, want) == 0;
}

int main(void) {
    CHECK(hex_of("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    CHECK(hex_of("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    CHECK(hex_of(m448, strlen(m448), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
                       "mnopqrstnopqrstu";
    CHECK(hex_of(m896, strlen(m896), "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"));

    /* Lengths that put the 0x80 byte and the length field at every edge of a block. */
    static char as[1000];
    memset(as, 'a', sizeof as);
    static const struct { size_t n; const char *hex; } edges[] = {
        {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
        {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
        {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
        {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
        {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
        {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
        {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
    };
    for (size_t i = 0; i < sizeof_array(edges); i++) CHECK(hex_of(as, edges[i].n, edges[i].hex));

    /* One million 'a' fed 1000 bytes at a time (the standard's long vector). */
    tsr_sha256 h;
    uint8_t digest[32];
    char hex[65];
    tsr_sha256_init(&h);
    for (int i = 0; i < 1000; i++) tsr_sha256_update(&h, as, sizeof as);
    tsr_sha256_final(&h, digest);
    tsr_sha256_digest_hex(digest, hex);
    CHECK(strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0);

    /* The 896-bit message split at every odd step size gives the one-shot digest. */
    size_t n896 = strlen(m896);
    for (size_t step = 1; step <= n896; step += 2) {
        tsr_sha256_init(&h);
        for (size_t at = 0; at < n896; at += step) tsr_sha256_update(&h, m896 + at, at + step <= n896 ? step : n896 - at);
        tsr_sha256_final(&h, digest);
        tsr_sha256_digest_hex(digest, hex);
        CHECK(strcmp(hex, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1") == 0);
    }
    /* Uneven splits (1, 63, 64, 65, 7, ...) of 1000 bytes, and zero-length updates in between. */
    static const size_t splits[] = {1, 63, 0, 64, 65, 7, 127, 128, 129, 3, 0, 413};
    tsr_sha256_init(&h);
    size_t at = 0;
    for (size_t i = 0; i < sizeof_array(splits); i++) {
        tsr_sha256_update(&h, as + at, splits[i]);
        at += splits[i];
    }
    CHECK_EQ_INT(at, 1000);
    tsr_sha256_final(&h, digest);
    tsr_sha256_digest_hex(digest, hex);
    char whole[65];
    tsr_sha256_hex(as, 1000, whole);
    CHECK(strcmp(hex, whole) == 0);
    return tsr_test_failures();
}
