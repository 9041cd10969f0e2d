#include "sampler.h"

#include <math.h>
#include <string.h>

tessera_sampling_params tessera_sampling_default_params(void) {
    tessera_sampling_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 0.0f;
    p.top_p = 1.0f;
    p.top_k = 0;
    p.repetition_penalty = 1.0f;
    p.seed = 0;
    p.max_tokens = 256;
    return p;
}

int tsr_sampling_check(const tessera_sampling_params *p) {
    if (!(p->temperature >= 0.0f) || p->temperature > 100.0f)
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "temperature %g is out of range [0, 100]", p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "top_p %g is out of range (0, 1]", p->top_p);
    if (p->top_k < 0) return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "top_k %d is negative", p->top_k);
    if (!(p->repetition_penalty > 0.0f) || p->repetition_penalty > 100.0f)
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "repetition_penalty %g is out of range (0, 100]",
                         p->repetition_penalty);
    if (p->max_tokens < 1)
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "max_tokens %d: at least one token must be asked for",
                         p->max_tokens);
    return 0;
}

int tsr_sampler_init(tsr_sampler *s, tsr_alloc *a, int32_t vocab) {
    memset(s, 0, sizeof *s);
    s->alloc = a;
    s->vocab = vocab;
    s->logits = tsr_calloc(a, (size_t)vocab, sizeof(float));
    s->order = tsr_calloc(a, (size_t)vocab, sizeof(int32_t));
    s->penalized = tsr_calloc(a, (size_t)vocab, 1);
    if (!s->logits || !s->order || !s->penalized) {
        tsr_sampler_free(s);
        return TESSERA_ERROR_OUT_OF_MEMORY;
    }
    tsr_sampler_seed(s, 0);
    return 0;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void tsr_sampler_seed(tsr_sampler *s, uint64_t seed) {
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

double tsr_sampler_uniform(tsr_sampler *s) {
    uint64_t *r = s->rng;
    uint64_t result = rotl(r[1] * 5, 7) * 9, t = r[1] << 17;
    r[2] ^= r[0];
    r[3] ^= r[1];
    r[1] ^= r[2];
    r[0] ^= r[3];
    r[2] ^= t;
    r[3] = rotl(r[3], 45);
    return (double)(result >> 11) * 0x1.0p-53;
}

/* Sorts order[0..n) by descending logit; ties keep the lower id first (a stable insertion into a
 * heap would be overkill: a quickselect for top-k, then a sort of what is left). */
static void swap(int32_t *a, int32_t *b) {
    int32_t t = *a;
    *a = *b;
    *b = t;
}

static bool before(const float *logits, int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
}

static void select_top(const float *logits, int32_t *order, int32_t n, int32_t k) {
    int32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        int32_t pivot = order[(lo + hi) / 2], i = lo, j = hi;
        while (i <= j) {
            while (before(logits, order[i], pivot)) i++;
            while (before(logits, pivot, order[j])) j--;
            if (i <= j) swap(&order[i++], &order[j--]);
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
}

static void sort_desc(const float *logits, int32_t *order, int32_t n) {
    /* Shell sort: no recursion, no allocation, fast enough for the k (or vocab) candidates. */
    for (int32_t gap = n / 2; gap > 0; gap /= 2)
        for (int32_t i = gap; i < n; i++)
            for (int32_t j = i; j >= gap && before(logits, order[j], order[j - gap]); j -= gap) swap(&order[j], &order[j - gap]);
}

int32_t tsr_sampler_sample(tsr_sampler *s, const float *logits, const int32_t *history, int32_t n_history,
                           const tessera_sampling_params *p) {
    int32_t n = s->vocab;
    float *l = s->logits;
    memcpy(l, logits, (size_t)n * sizeof(float));
    if (p->repetition_penalty != 1.0f) {
        /* Each id once, however often it occurs (as transformers and llama.cpp do). */
        for (int32_t i = 0; i < n_history; i++) {
            int32_t id = history[i];
            if (id < 0 || id >= n || s->penalized[id]) continue;
            s->penalized[id] = 1;
            l[id] = l[id] > 0 ? l[id] / p->repetition_penalty : l[id] * p->repetition_penalty;
        }
        for (int32_t i = 0; i < n_history; i++)
            if (history[i] >= 0 && history[i] < n) s->penalized[history[i]] = 0;
    }
    if (p->temperature <= 0.0f) {
        int32_t best = 0;
        for (int32_t i = 1; i < n; i++)
            if (l[i] > l[best]) best = i;
        return best;
    }
    for (int32_t i = 0; i < n; i++) {
        l[i] /= p->temperature;
        s->order[i] = i;
    }
    int32_t k = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    if (k < n) select_top(l, s->order, n, k);
    sort_desc(l, s->order, k);
    float top = l[s->order[0]];
    double total = 0.0;
    for (int32_t i = 0; i < k; i++) total += exp((double)(l[s->order[i]] - top));
    /* top-p: the smallest prefix whose probability reaches p. */
    int32_t keep = k;
    if (p->top_p < 1.0f) {
        double cumulative = 0.0;
        for (int32_t i = 0; i < k; i++) {
            cumulative += exp((double)(l[s->order[i]] - top)) / total;
            if (cumulative >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
        total = 0.0;
        for (int32_t i = 0; i < keep; i++) total += exp((double)(l[s->order[i]] - top));
    }
    double draw = tsr_sampler_uniform(s) * total, cumulative = 0.0;
    for (int32_t i = 0; i < keep; i++) {
        cumulative += exp((double)(l[s->order[i]] - top));
        if (draw < cumulative) return s->order[i];
    }
    return s->order[keep - 1];
}

void tsr_sampler_free(tsr_sampler *s) {
    tsr_free(s->alloc, s->logits);
    tsr_free(s->alloc, s->order);
    tsr_free(s->alloc, s->penalized);
    s->logits = NULL;
    s->order = NULL;
    s->penalized = NULL;
}
