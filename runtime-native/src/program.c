/* chat-config.json's "program" section, checked as its JSON Schema (docs/chat-config.schema.json)
 * states it, and against the executable it names functions of (program.h). */
#include "program.h"

#include <stdio.h>
#include <string.h>

#include "json.h"

#define WHAT "chat-config.json's program"

static const char *const ROLE_NAMES[TSR_N_ROLES] = {"prefill", "decode", "prefill_paged", "decode_batch", "sample",
                                                    "sample_greedy"};

/* The float32 params vector of `sample`, entry by entry. */
static const char *const SAMPLER_LAYOUT[] = {"temperature", "top_k", "top_p", "repetition_penalty", "random"};
#define SAMPLER_LAYOUT_SIZE ((int)TSR_ARRAY_LEN(SAMPLER_LAYOUT))

/* Largest page and batch a batched build may state: far beyond any real one, small enough for int32 products. */
#define MAX_PAGE_SIZE (1 << 16)
#define MAX_BATCH (1 << 16)

static int role_of(const char *name) {
    for (int r = 0; r < TSR_N_ROLES; r++)
        if (strcmp(ROLE_NAMES[r], name) == 0) return r;
    return -1;
}

static int read_functions(const cJSON *program, const tsr_executable *exe, tsr_program *out) {
    const cJSON *functions, *item;
    int rc = tsr_json_object(program, "functions", WHAT, &functions);
    if (rc) return rc;
    cJSON_ArrayForEach(item, functions) {
        const char *role_name = item->string ? item->string : "";
        int role = role_of(role_name);
        if (role < 0)
            return tsr_error(TESSERA_ERROR_FORMAT, WHAT ".functions has role '%s', which this runtime does not know "
                             "(roles: prefill, decode, prefill_paged, decode_batch, sample, sample_greedy)", role_name);
        if (out->functions[role] >= 0)
            return tsr_error(TESSERA_ERROR_FORMAT, WHAT ".functions names role '%s' twice", role_name);
        if (!cJSON_IsString(item) || !item->valuestring)
            return tsr_error(TESSERA_ERROR_FORMAT, WHAT ".functions.%s is not a string", role_name);
        int32_t index = tsr_executable_function(exe, item->valuestring);
        if (index < 0)
            return tsr_error(TESSERA_ERROR_FORMAT, WHAT ".functions.%s names function '%s', which executable.json "
                             "does not have", role_name, item->valuestring);
        out->functions[role] = index;
    }
    bool one = out->functions[TSR_ROLE_PREFILL] >= 0 || out->functions[TSR_ROLE_DECODE] >= 0;
    out->batched = out->functions[TSR_ROLE_PREFILL_PAGED] >= 0 || out->functions[TSR_ROLE_DECODE_BATCH] >= 0;
    if (one && out->batched)
        return tsr_error(TESSERA_ERROR_FORMAT, WHAT ".functions has roles of a one-sequence build (prefill, decode) "
                         "and of a batched build (prefill_paged, decode_batch); a build has one pair");
    const int needed[] = {out->batched ? TSR_ROLE_PREFILL_PAGED : TSR_ROLE_PREFILL,
                          out->batched ? TSR_ROLE_DECODE_BATCH : TSR_ROLE_DECODE, TSR_ROLE_SAMPLE,
                          TSR_ROLE_SAMPLE_GREEDY};
    for (size_t i = 0; i < TSR_ARRAY_LEN(needed); i++)
        if (out->functions[needed[i]] < 0)
            return tsr_error(TESSERA_ERROR_FORMAT, WHAT ".functions has no role '%s' (a %s build has %s, %s, sample "
                             "and sample_greedy)", ROLE_NAMES[needed[i]], out->batched ? "batched" : "one-sequence",
                             ROLE_NAMES[needed[0]], ROLE_NAMES[needed[1]]);
    return 0;
}

/* The names of state must be the state parameters of each step function, in order. */
static int read_state(const cJSON *program, const tsr_executable *exe, tsr_program *out) {
    const cJSON *state, *item;
    int rc = tsr_json_array(program, "state", WHAT, &state);
    if (rc) return rc;
    int32_t at = 0;
    cJSON_ArrayForEach(item, state) {
        if (!cJSON_IsString(item) || !item->valuestring)
            return tsr_error(TESSERA_ERROR_FORMAT, WHAT ".state[%d] is not a string", at);
        at++;
    }
    out->n_state = at;
    const int steps[] = {out->batched ? TSR_ROLE_PREFILL_PAGED : TSR_ROLE_PREFILL,
                         out->batched ? TSR_ROLE_DECODE_BATCH : TSR_ROLE_DECODE};
    for (size_t s = 0; s < TSR_ARRAY_LEN(steps); s++) {
        const tsr_function *f = &exe->functions[out->functions[steps[s]]];
        const cJSON *name = state->child;
        int32_t n = 0;
        for (int32_t p = 0; p < f->n_params; p++) {
            if (!f->params[p].state) continue;
            if (!name)
                return tsr_error(TESSERA_ERROR_FORMAT, WHAT ".state has %d names; function %s has more state "
                                 "parameters ('%s' is the next)", out->n_state, f->name, f->params[p].name);
            if (strcmp(name->valuestring, f->params[p].name) != 0)
                return tsr_error(TESSERA_ERROR_FORMAT, WHAT ".state[%d] is '%s'; function %s's state parameter %d "
                                 "is '%s'", n, name->valuestring, f->name, n, f->params[p].name);
            name = name->next;
            n++;
        }
        if (n != out->n_state)
            return tsr_error(TESSERA_ERROR_FORMAT, WHAT ".state has %d names; function %s has %d state parameters",
                             out->n_state, f->name, n);
    }
    return 0;
}

/* `["a", "b"]` for messages, cut short with "..." when it does not fit; an item that is not a string is `?`. */
static void list_text(const cJSON *list, char *out, size_t size) {
    size_t used = (size_t)snprintf(out, size, "[");
    const cJSON *item;
    bool first = true;
    cJSON_ArrayForEach(item, list) {
        if (used >= size) break;
        int w = cJSON_IsString(item) && item->valuestring
                    ? snprintf(out + used, size - used, "%s\"%s\"", first ? "" : ", ", item->valuestring)
                    : snprintf(out + used, size - used, "%s?", first ? "" : ", ");
        if (w < 0) break;
        used += (size_t)w;
        first = false;
    }
    if (used + 1 < size) {
        out[used] = ']';
        out[used + 1] = '\0';
    } else if (size > 4) {
        memcpy(out + size - 4, "...", 4);
    }
}

static int read_sampler(const cJSON *program) {
    const cJSON *sampler;
    int rc = tsr_json_array(program, "sampler", WHAT, &sampler);
    if (rc) return rc;
    bool equal = cJSON_GetArraySize(sampler) == SAMPLER_LAYOUT_SIZE;
    const cJSON *item = sampler->child;
    for (int i = 0; equal && i < SAMPLER_LAYOUT_SIZE; i++, item = item->next)
        equal = cJSON_IsString(item) && item->valuestring && strcmp(item->valuestring, SAMPLER_LAYOUT[i]) == 0;
    if (equal) return 0;
    char found[256];
    list_text(sampler, found, sizeof found);
    return tsr_error(TESSERA_ERROR_FORMAT, WHAT ".sampler is %s; this runtime knows [\"temperature\", \"top_k\", "
                     "\"top_p\", \"repetition_penalty\", \"random\"]", found);
}

static int read_batch(const cJSON *program, tsr_program *out) {
    const char *keys[] = {"page_size", "max_batch"};
    const int64_t highest[] = {MAX_PAGE_SIZE, MAX_BATCH};
    int32_t *values[] = {&out->page_size, &out->max_batch};
    for (int i = 0; i < 2; i++) {
        if (!cJSON_GetObjectItemCaseSensitive(program, keys[i])) {
            if (out->batched)
                return tsr_error(TESSERA_ERROR_FORMAT, WHAT " has no '%s', which a batched build states", keys[i]);
            continue;
        }
        int64_t v;
        int rc = tsr_json_int(program, keys[i], WHAT, 1, highest[i], &v);
        if (rc) return rc;
        *values[i] = out->batched ? (int32_t)v : 0;
    }
    return 0;
}

int tsr_program_parse(const cJSON *chat_config, const tsr_executable *exe, tsr_program *out) {
    memset(out, 0, sizeof *out);
    for (int r = 0; r < TSR_N_ROLES; r++) out->functions[r] = -1;
    const cJSON *program = cJSON_GetObjectItemCaseSensitive(chat_config, "program");
    if (!program)
        return tsr_error(TESSERA_ERROR_FORMAT, "chat-config.json has no \"program\" section (the functions a chat "
                         "runtime calls): the model was compiled by an older tessera; compile it again with this one "
                         "(tessera compile MODEL.gguf --target cpu -o DIR)");
    const cJSON *version = NULL;
    int rc = tsr_json_object(chat_config, "program", "chat-config.json", &program);
    if (!rc && !cJSON_IsNumber(version = cJSON_GetObjectItemCaseSensitive(program, "version")))
        rc = tsr_error(TESSERA_ERROR_FORMAT, WHAT ": field 'version' is %s, not a number",
                       version ? "of another type" : "missing");
    if (!rc && version->valuedouble != TSR_PROGRAM_VERSION)
        rc = tsr_error(TESSERA_ERROR_VERSION, WHAT " has version %g; this runtime reads version %d (compile the model "
                       "again with the tessera that matches this runtime)", version->valuedouble, TSR_PROGRAM_VERSION);
    if (!rc) rc = read_functions(program, exe, out);
    if (!rc) rc = read_state(program, exe, out);
    if (!rc) rc = read_sampler(program);
    if (!rc) rc = read_batch(program, out);
    return rc;
}

const char *tsr_program_function(const tsr_program *p, const tsr_executable *exe, tsr_program_role role) {
    int32_t index = p->functions[role];
    return index >= 0 ? exe->functions[index].name : NULL;
}
