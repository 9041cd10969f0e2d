/* The host sampler: greedy picks the lowest index among equal maxima; the repetition penalty
 * divides positive and multiplies negative logits, once per distinct id; top-k 1 and a tiny
 * top-p are greedy; seeded draws are reproducible; temperature sampling follows softmax(l / T);
 * parameter checks name the field. */
#include <math.h>
#include <string.h>

#include "harness.h"
#include "sampler.h"

static tsr_alloc a;

static int has(const char *needle) {
    if (strstr(tessera_last_error(), needle)) return 1;
    fprintf(stderr, "last error \"%s\" lacks \"%s\"\n", tessera_last_error(), needle);
    return 0;
}

static tessera_sampling_params greedy(void) { return tessera_sampling_default_params(); }

static tessera_sampling_params hot(float temperature, uint64_t seed) {
    tessera_sampling_params p = tessera_sampling_default_params();
    p.temperature = temperature;
    p.seed = seed;
    return p;
}

static void argmax(void) {
    tsr_sampler s;
    CHECK_EQ_INT(tsr_sampler_init(&s, &a, 6), 0);
    tessera_sampling_params p = greedy();
    float l[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, 2.0f};
    CHECK_EQ_INT(tsr_sampler_sample(&s, l, NULL, 0, &p), 1); /* ties: the lowest index */
    float neg[6] = {-5, -3, -4, -3, -9, -8};
    CHECK_EQ_INT(tsr_sampler_sample(&s, neg, NULL, 0, &p), 1);
    float last[6] = {0, 0, 0, 0, 0, 1e-6f};
    CHECK_EQ_INT(tsr_sampler_sample(&s, last, NULL, 0, &p), 5);
    float flat[6] = {0, 0, 0, 0, 0, 0};
    CHECK_EQ_INT(tsr_sampler_sample(&s, flat, NULL, 0, &p), 0);
    /* the caller's logits are not modified */
    CHECK(l[1] == 2.0f && l[3] == 2.0f);
    tsr_sampler_free(&s);
}

static void repetition_penalty(void) {
    tsr_sampler s;
    CHECK_EQ_INT(tsr_sampler_init(&s, &a, 4), 0);
    tessera_sampling_params p = greedy();
    p.repetition_penalty = 2.0f;
    /* id 0: 3.0 -> 1.5 (divided); id 1: 2.0 untouched wins */
    float l[4] = {3.0f, 2.0f, -1.0f, -0.5f};
    int32_t history[3] = {0, 0, 0}; /* repeated: still one division (1.5, not 0.375) */
    CHECK_EQ_INT(tsr_sampler_sample(&s, l, history, 3, &p), 1);
    /* 3.0 / 2 = 1.5 beats 1.4 (penalized once) but not 1.6; penalized three times it would lose to 1.4 */
    float m[4] = {3.0f, 1.4f, -1.0f, -0.5f};
    CHECK_EQ_INT(tsr_sampler_sample(&s, m, history, 3, &p), 0);
    float m2[4] = {3.0f, 1.6f, -1.0f, -0.5f};
    CHECK_EQ_INT(tsr_sampler_sample(&s, m2, history, 3, &p), 1);
    /* negative logits are multiplied: -0.5 * 2 = -1.0 ties with -1.0 at id 2, which comes first;
     * the others are pushed below zero by the penalty on 0 and 1 ... here all four are negative */
    float n[4] = {-3.0f, -2.0f, -1.0f, -0.5f};
    int32_t h3[1] = {3};
    CHECK_EQ_INT(tsr_sampler_sample(&s, n, h3, 1, &p), 2); /* -1.0 (id 2) vs -1.0 (id 3 penalized): lowest id */
    float n2[4] = {-3.0f, -2.0f, -1.1f, -0.5f};
    CHECK_EQ_INT(tsr_sampler_sample(&s, n2, h3, 1, &p), 3); /* -1.0 beats -1.1 */
    int32_t h33[2] = {3, 3}; /* -0.5 * 2 * 2 = -2.0 would lose to -1.1: once per id, so id 3 still wins */
    CHECK_EQ_INT(tsr_sampler_sample(&s, n2, h33, 2, &p), 3);
    /* ids outside the vocabulary in the history are ignored */
    int32_t odd[3] = {-1, 4, 1000};
    CHECK_EQ_INT(tsr_sampler_sample(&s, l, odd, 3, &p), 0);
    /* the penalty leaves no trace on the next call without history */
    CHECK_EQ_INT(tsr_sampler_sample(&s, l, NULL, 0, &p), 0);
    tsr_sampler_free(&s);
}

static void top_k_and_top_p(void) {
    enum { V = 50 };
    tsr_sampler s;
    CHECK_EQ_INT(tsr_sampler_init(&s, &a, V), 0);
    float l[V];
    for (int i = 0; i < V; i++) l[i] = (float)((i * 37) % V) * 0.05f; /* a permutation; the max is at i with 37i % 50 == 49 */
    int best = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > l[best]) best = i;
    tessera_sampling_params p = hot(5.0f, 1); /* a high temperature: almost uniform without truncation */
    p.top_k = 1;
    int wrong = 0;
    for (int k = 0; k < 200; k++) wrong += tsr_sampler_sample(&s, l, NULL, 0, &p) != best;
    CHECK_EQ_INT(wrong, 0); /* top_k = 1 is greedy */
    p.top_k = 0;
    p.top_p = 1e-6f;
    for (int k = 0; k < 200; k++) wrong += tsr_sampler_sample(&s, l, NULL, 0, &p) != best;
    CHECK_EQ_INT(wrong, 0); /* a tiny top_p keeps only the top token */
    /* top_k = 3: only the three largest ever come out, and each of them does */
    p.top_p = 1.0f;
    p.top_k = 3;
    int seen[V] = {0};
    for (int k = 0; k < 3000; k++) seen[tsr_sampler_sample(&s, l, NULL, 0, &p)]++;
    int distinct = 0, outside = 0;
    for (int i = 0; i < V; i++) {
        if (!seen[i]) continue;
        distinct++;
        outside += l[i] < 2.35f; /* the three largest are 2.45, 2.40, 2.35 */
    }
    CHECK_EQ_INT(distinct, 3);
    CHECK_EQ_INT(outside, 0);
    tsr_sampler_free(&s);
}

static void seeds(void) {
    enum { V = 1000, N = 64 };
    tsr_sampler s;
    CHECK_EQ_INT(tsr_sampler_init(&s, &a, V), 0);
    static float l[V];
    for (int i = 0; i < V; i++) l[i] = sinf((float)i) * 2.0f;
    tessera_sampling_params p = hot(1.0f, 42);
    int32_t first[N], again[N], other[N];
    tsr_sampler_seed(&s, 42);
    for (int i = 0; i < N; i++) first[i] = tsr_sampler_sample(&s, l, NULL, 0, &p);
    tsr_sampler_seed(&s, 42);
    for (int i = 0; i < N; i++) again[i] = tsr_sampler_sample(&s, l, NULL, 0, &p);
    tsr_sampler_seed(&s, 43);
    for (int i = 0; i < N; i++) other[i] = tsr_sampler_sample(&s, l, NULL, 0, &p);
    CHECK(memcmp(first, again, sizeof first) == 0); /* the same seed: the same draws */
    CHECK(memcmp(first, other, sizeof first) != 0);  /* another seed: others */
    int in_range = 1;
    for (int i = 0; i < N; i++) in_range &= first[i] >= 0 && first[i] < V;
    CHECK(in_range);
    /* uniform draws lie in [0, 1) */
    double lo = 1, hi = 0;
    for (int i = 0; i < 100000; i++) {
        double u = tsr_sampler_uniform(&s);
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
    }
    CHECK(lo >= 0.0 && lo < 0.001 && hi < 1.0 && hi > 0.999);
    tsr_sampler_free(&s);
}

/* Draws over softmax(l / T) match its probabilities: a chi-square statistic over 4 categories
 * (3 degrees of freedom) stays below 30, far beyond the 0.9999 quantile (about 21) for a fair
 * sampler, and far below what a wrong temperature gives. */
static void distribution(void) {
    tsr_sampler s;
    CHECK_EQ_INT(tsr_sampler_init(&s, &a, 4), 0);
    float l[4] = {1.0f, 0.0f, 2.0f, -1.0f};
    const float T = 0.7f;
    double prob[4], sum = 0;
    for (int i = 0; i < 4; i++) sum += prob[i] = exp(l[i] / T);
    for (int i = 0; i < 4; i++) prob[i] /= sum;
    tessera_sampling_params p = hot(T, 7);
    tsr_sampler_seed(&s, 7);
    enum { N = 200000 };
    long count[4] = {0};
    for (int k = 0; k < N; k++) count[tsr_sampler_sample(&s, l, NULL, 0, &p)]++;
    double chi2 = 0;
    for (int i = 0; i < 4; i++) {
        double expected = prob[i] * N, seen = (double)count[i]; /* exact: counts stay far below 2^53 */
        chi2 += (seen - expected) * (seen - expected) / expected;
    }
    if (!(chi2 < 30)) fprintf(stderr, "chi-square %.1f: %ld %ld %ld %ld\n", chi2, count[0], count[1], count[2], count[3]);
    CHECK(chi2 < 30);
    /* the same counts against T = 1's probabilities are far off: the temperature is applied */
    double other[4], osum = 0, chi2_other = 0;
    for (int i = 0; i < 4; i++) osum += other[i] = exp(l[i]);
    for (int i = 0; i < 4; i++) {
        double expected = other[i] / osum * N, seen = (double)count[i];
        chi2_other += (seen - expected) * (seen - expected) / expected;
    }
    CHECK(chi2_other > 1000);
    tsr_sampler_free(&s);
}

static void checks(void) {
    tessera_sampling_params p = tessera_sampling_default_params();
    CHECK_EQ_INT(tsr_sampling_check(&p), 0);
    CHECK(p.temperature == 0.0f && p.top_p == 1.0f && p.top_k == 0 && p.repetition_penalty == 1.0f && p.max_tokens >= 1);
    p.temperature = -0.5f;
    CHECK_EQ_INT(tsr_sampling_check(&p), TESSERA_ERROR_INVALID_ARGUMENT);
    CHECK(has("temperature"));
    p.temperature = NAN;
    CHECK_EQ_INT(tsr_sampling_check(&p), TESSERA_ERROR_INVALID_ARGUMENT);
    CHECK(has("temperature"));
    p = tessera_sampling_default_params();
    p.top_p = 0.0f;
    CHECK_EQ_INT(tsr_sampling_check(&p), TESSERA_ERROR_INVALID_ARGUMENT);
    CHECK(has("top_p"));
    p.top_p = 1.5f;
    CHECK_EQ_INT(tsr_sampling_check(&p), TESSERA_ERROR_INVALID_ARGUMENT);
    CHECK(has("top_p"));
    p = tessera_sampling_default_params();
    p.max_tokens = 0;
    CHECK_EQ_INT(tsr_sampling_check(&p), TESSERA_ERROR_INVALID_ARGUMENT);
    CHECK(has("max_tokens"));
    p = tessera_sampling_default_params();
    p.top_k = -1;
    CHECK_EQ_INT(tsr_sampling_check(&p), TESSERA_ERROR_INVALID_ARGUMENT);
    CHECK(has("top_k"));
    p = tessera_sampling_default_params();
    p.repetition_penalty = 0.0f;
    CHECK_EQ_INT(tsr_sampling_check(&p), TESSERA_ERROR_INVALID_ARGUMENT);
    CHECK(has("repetition_penalty"));
}

int main(void) {
    tsr_alloc_init(&a, NULL);
    argmax();
    repetition_penalty();
    top_k_and_top_p();
    seeds();
    distribution();
    checks();
    uint64_t before = a.count;
    /* sampling allocates nothing once the sampler exists */
    tsr_sampler s;
    CHECK_EQ_INT(tsr_sampler_init(&s, &a, 100), 0);
    before = a.count;
    float l[100];
    for (int i = 0; i < 100; i++) l[i] = (float)(i % 7);
    tessera_sampling_params p = hot(0.8f, 3);
    p.top_k = 10;
    p.top_p = 0.9f;
    p.repetition_penalty = 1.3f;
    int32_t history[4] = {6, 13, 20, 6};
    for (int k = 0; k < 1000; k++) tsr_sampler_sample(&s, l, history, 4, &p);
    CHECK_EQ_INT(a.count - before, 0);
    tsr_sampler_free(&s);
    return tsr_test_failures();
}
