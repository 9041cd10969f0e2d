/* Choosing the next token from logits: repetition penalty, then greedy (temperature 0) or
 * temperature, top-k, top-p and a draw from a seeded generator (xoshiro256**). Buffers are made
 * once per session, so sampling allocates nothing. */
#ifndef TSR_SAMPLER_H
#define TSR_SAMPLER_H

#include "common.h"

typedef struct tsr_sampler {
    tsr_alloc *alloc;
    int32_t vocab;
    float *logits;     /* a working copy */
    int32_t *order;    /* candidate ids */
    uint8_t *penalized;
    uint64_t rng[4];
} tsr_sampler;

int tsr_sampler_init(tsr_sampler *s, tsr_alloc *a, int32_t vocab);
void tsr_sampler_seed(tsr_sampler *s, uint64_t seed);
/* Checks the parameters' ranges (TESSERA_ERROR_INVALID_ARGUMENT names the field). */
int tsr_sampling_check(const tessera_sampling_params *p);
int32_t tsr_sampler_sample(tsr_sampler *s, const float *logits, const int32_t *history, int32_t n_history,
                           const tessera_sampling_params *p);
/* A uniform double in [0, 1). */
double tsr_sampler_uniform(tsr_sampler *s);
void tsr_sampler_free(tsr_sampler *s);

#endif
