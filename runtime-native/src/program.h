/* The LLM program contract: chat-config.json's "program" section (docs/native.md, "The program"),
 * which names the functions of executable.json a chat runtime calls, by role, with the state tensors
 * they share and the layout of the sampler's parameter vector. Version 1:
 *
 *   "program": {"version": 1,
 *               "functions": {"prefill": ..., "decode": ...,  (or "prefill_paged", "decode_batch")
 *                             "sample": ..., "sample_greedy": ...},
 *               "state": ["cache_k_0", ...],
 *               "sampler": ["temperature", "top_k", "top_p", "repetition_penalty", "random"],
 *               "page_size": 16, "max_batch": 4}  (the last two in batched builds only)
 *
 * The runtime keeps the role names; the function names come from the section, checked here against
 * the executable. */
#ifndef TSR_PROGRAM_H
#define TSR_PROGRAM_H

#include <cjson/cJSON.h>

#include "executable.h"

#define TSR_PROGRAM_VERSION 1

typedef enum tsr_program_role {
    TSR_ROLE_PREFILL,       /* one-sequence builds */
    TSR_ROLE_DECODE,
    TSR_ROLE_PREFILL_PAGED, /* batched builds (--max-batch > 1) */
    TSR_ROLE_DECODE_BATCH,
    TSR_ROLE_SAMPLE,        /* every build */
    TSR_ROLE_SAMPLE_GREEDY,
    TSR_N_ROLES,
} tsr_program_role;

typedef struct tsr_program {
    int32_t functions[TSR_N_ROLES]; /* index into the executable's functions per role; -1 where the build has none */
    int32_t n_state;                /* the state tensors, which are the step functions' state parameters in order */
    bool batched;
    int32_t page_size, max_batch;   /* batched builds; 0 otherwise */
} tsr_program;

/* Reads and checks chat_config's "program" against exe: the version, the roles a build has, each
 * function present in exe, the state names equal to the step functions' state parameters, the sampler
 * layout equal to the one this runtime knows. TESSERA_ERROR_FORMAT (or TESSERA_ERROR_VERSION for
 * another version) with a message naming the member; a missing section says to compile again. */
int tsr_program_parse(const cJSON *chat_config, const tsr_executable *exe, tsr_program *out);

/* The name of the function that plays `role` (exe is the one the program was checked against), or
 * NULL where the build has none. */
const char *tsr_program_function(const tsr_program *p, const tsr_executable *exe, tsr_program_role role);

#endif
