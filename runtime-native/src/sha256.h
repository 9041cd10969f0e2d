/* SHA-256 (FIPS 180-4), for the checksums of modules and shards. */
#ifndef TSR_SHA256_H
#define TSR_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct tsr_sha256 {
    uint32_t state[8];
    uint64_t length;
    uint8_t block[64];
    size_t used;
} tsr_sha256;

void tsr_sha256_init(tsr_sha256 *h);
void tsr_sha256_update(tsr_sha256 *h, const void *data, size_t size);
void tsr_sha256_final(tsr_sha256 *h, uint8_t digest[32]);
/* A digest as 64 lowercase hex digits and a NUL (the spelling of the format's "sha256" fields). */
void tsr_sha256_digest_hex(const uint8_t digest[32], char hex[65]);
/* The digest of data as 64 lowercase hex digits and a NUL. */
void tsr_sha256_hex(const void *data, size_t size, char hex[65]);

#endif
