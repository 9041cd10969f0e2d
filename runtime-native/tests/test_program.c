/* chat-config.json's "program" section (program.h): the roles of a one-sequence and of a batched
 * build resolve to the executable's functions, and every way of breaking the section (missing,
 * another version, a role missing or unknown, a function the executable lacks, state names that are
 * not the step functions' state parameters, another sampler layout) is refused naming the member. */
#include <string.h>

#include "harness.h"
#include "json.h"
#include "program.h"

static int has(const char *needle) {
    if (strstr(tessera_last_error(), needle)) return 1;
    fprintf(stderr, "last error \"%s\" lacks \"%s\"\n", tessera_last_error(), needle);
    return 0;
}

/* Step functions taking (input_ids, total, cache_k_0, cache_v_0), the last two state. */
static tsr_param STEP_PARAMS[] = {
    {.name = "input_ids"},
    {.name = "total"},
    {.name = "cache_k_0", .state = true},
    {.name = "cache_v_0", .state = true},
};
static tsr_param SAMPLE_PARAMS[] = {{.name = "logits"}, {.name = "history"}, {.name = "params"}};

static tsr_function FUNCTIONS[] = {
    {.name = "step_prefill", .params = STEP_PARAMS, .n_params = 4},
    {.name = "step_decode", .params = STEP_PARAMS, .n_params = 4},
    {.name = "paged_prefill", .params = STEP_PARAMS, .n_params = 4},
    {.name = "paged_decode", .params = STEP_PARAMS, .n_params = 4},
    {.name = "draw", .params = SAMPLE_PARAMS, .n_params = 3},
    {.name = "argmax", .params = SAMPLE_PARAMS, .n_params = 3},
};

static tsr_executable executable(void) {
    tsr_executable exe;
    memset(&exe, 0, sizeof exe);
    exe.functions = FUNCTIONS;
    exe.n_functions = (int32_t)TSR_ARRAY_LEN(FUNCTIONS);
    return exe;
}

#define SAMPLER "\"sampler\": [\"temperature\", \"top_k\", \"top_p\", \"repetition_penalty\", \"random\"]"
#define STATE "\"state\": [\"cache_k_0\", \"cache_v_0\"]"
#define SAMPLING_ROLES "\"sample\": \"draw\", \"sample_greedy\": \"argmax\""
#define ONE_SEQUENCE "\"prefill\": \"step_prefill\", \"decode\": \"step_decode\", " SAMPLING_ROLES

/* Parses a chat-config.json text and its program; the status. */
static int parse(const char *json, tsr_program *out) {
    tsr_executable exe = executable();
    cJSON *root = tsr_json_parse(json, strlen(json), "chat-config.json");
    if (!root) return -100;
    int rc = tsr_program_parse(root, &exe, out);
    cJSON_Delete(root);
    return rc;
}

static void a_one_sequence_build_names_its_functions(void) {
    tsr_program p;
    tsr_executable exe = executable();
    const char *json = "{\"program\": {\"version\": 1, \"functions\": {" ONE_SEQUENCE "}, " STATE ", " SAMPLER "}}";
    CHECK_EQ_INT(parse(json, &p), 0);
    CHECK(!p.batched);
    CHECK_EQ_INT(p.n_state, 2);
    CHECK_EQ_INT(p.page_size, 0);
    CHECK(strcmp(tsr_program_function(&p, &exe, TSR_ROLE_PREFILL), "step_prefill") == 0);
    CHECK(strcmp(tsr_program_function(&p, &exe, TSR_ROLE_DECODE), "step_decode") == 0);
    CHECK(strcmp(tsr_program_function(&p, &exe, TSR_ROLE_SAMPLE), "draw") == 0);
    CHECK(strcmp(tsr_program_function(&p, &exe, TSR_ROLE_SAMPLE_GREEDY), "argmax") == 0);
    CHECK(tsr_program_function(&p, &exe, TSR_ROLE_DECODE_BATCH) == NULL);
}

static void a_batched_build_names_its_functions_page_and_batch(void) {
    tsr_program p;
    tsr_executable exe = executable();
    CHECK_EQ_INT(parse("{\"program\": {\"version\": 1, \"functions\": {\"prefill_paged\": \"paged_prefill\", "
                       "\"decode_batch\": \"paged_decode\", " SAMPLING_ROLES "}, " STATE ", " SAMPLER ", "
                       "\"page_size\": 16, \"max_batch\": 4}}", &p), 0);
    CHECK(p.batched);
    CHECK_EQ_INT(p.page_size, 16);
    CHECK_EQ_INT(p.max_batch, 4);
    CHECK(strcmp(tsr_program_function(&p, &exe, TSR_ROLE_DECODE_BATCH), "paged_decode") == 0);
    CHECK(tsr_program_function(&p, &exe, TSR_ROLE_PREFILL) == NULL);
    CHECK_EQ_INT(parse("{\"program\": {\"version\": 1, \"functions\": {\"prefill_paged\": \"paged_prefill\", "
                       "\"decode_batch\": \"paged_decode\", " SAMPLING_ROLES "}, " STATE ", " SAMPLER ", "
                       "\"page_size\": 16}}", &p), TESSERA_ERROR_FORMAT);
    CHECK(has("chat-config.json's program has no 'max_batch', which a batched build states"));
}

typedef struct broken_case {
    const char *json;
    int status;
    const char *message;
} broken_case;

static const broken_case BROKEN[] = {
    {"{\"context_length\": 64}", TESSERA_ERROR_FORMAT,
     "chat-config.json has no \"program\" section (the functions a chat runtime calls): the model was compiled by an "
     "older tessera; compile it again with this one"},
    {"{\"program\": [1]}", TESSERA_ERROR_FORMAT, "field 'program'"},
    {"{\"program\": {\"functions\": {" ONE_SEQUENCE "}, " STATE ", " SAMPLER "}}", TESSERA_ERROR_FORMAT,
     "chat-config.json's program: field 'version' is missing"},
    {"{\"program\": {\"version\": 2, \"functions\": {" ONE_SEQUENCE "}, " STATE ", " SAMPLER "}}",
     TESSERA_ERROR_VERSION, "chat-config.json's program has version 2; this runtime reads version 1"},
    {"{\"program\": {\"version\": \"1\", \"functions\": {" ONE_SEQUENCE "}, " STATE ", " SAMPLER "}}",
     TESSERA_ERROR_FORMAT, "field 'version' is of another type"},
    {"{\"program\": {\"version\": 1, " STATE ", " SAMPLER "}}", TESSERA_ERROR_FORMAT, "field 'functions'"},
    {"{\"program\": {\"version\": 1, \"functions\": {\"prefill\": \"step_prefill\", " SAMPLING_ROLES "}, " STATE ", "
     SAMPLER "}}", TESSERA_ERROR_FORMAT,
     "chat-config.json's program.functions has no role 'decode' (a one-sequence build has prefill, decode"},
    {"{\"program\": {\"version\": 1, \"functions\": {" ONE_SEQUENCE ", \"decode_batch\": \"paged_decode\"}, " STATE ", "
     SAMPLER "}}", TESSERA_ERROR_FORMAT, "roles of a one-sequence build (prefill, decode) and of a batched build"},
    {"{\"program\": {\"version\": 1, \"functions\": {\"prefill\": \"step_prefill\", \"decode\": \"step_decode\", "
     "\"sample\": \"draw\"}, " STATE ", " SAMPLER "}}", TESSERA_ERROR_FORMAT,
     "program.functions has no role 'sample_greedy'"},
    {"{\"program\": {\"version\": 1, \"functions\": {" ONE_SEQUENCE ", \"embed\": \"draw\"}, " STATE ", " SAMPLER "}}",
     TESSERA_ERROR_FORMAT, "program.functions has role 'embed', which this runtime does not know"},
    {"{\"program\": {\"version\": 1, \"functions\": {" ONE_SEQUENCE ", \"decode\": \"step_decode\"}, " STATE ", "
     SAMPLER "}}", TESSERA_ERROR_FORMAT, "program.functions names role 'decode' twice"},
    {"{\"program\": {\"version\": 1, \"functions\": {\"prefill\": \"step_prefill\", \"decode\": \"decode\", "
     SAMPLING_ROLES "}, " STATE ", " SAMPLER "}}", TESSERA_ERROR_FORMAT,
     "chat-config.json's program.functions.decode names function 'decode', which executable.json does not have"},
    {"{\"program\": {\"version\": 1, \"functions\": {\"prefill\": 3, \"decode\": \"step_decode\", " SAMPLING_ROLES
     "}, " STATE ", " SAMPLER "}}", TESSERA_ERROR_FORMAT, "program.functions.prefill is not a string"},
    {"{\"program\": {\"version\": 1, \"functions\": {" ONE_SEQUENCE "}, " SAMPLER "}}", TESSERA_ERROR_FORMAT,
     "field 'state'"},
    {"{\"program\": {\"version\": 1, \"functions\": {" ONE_SEQUENCE "}, \"state\": [\"cache_k_0\", 7], " SAMPLER "}}",
     TESSERA_ERROR_FORMAT, "program.state[1] is not a string"},
    {"{\"program\": {\"version\": 1, \"functions\": {" ONE_SEQUENCE "}, \"state\": [\"cache_v_0\", \"cache_k_0\"], "
     SAMPLER "}}", TESSERA_ERROR_FORMAT,
     "program.state[0] is 'cache_v_0'; function step_prefill's state parameter 0 is 'cache_k_0'"},
    {"{\"program\": {\"version\": 1, \"functions\": {" ONE_SEQUENCE "}, \"state\": [\"cache_k_0\"], " SAMPLER "}}",
     TESSERA_ERROR_FORMAT, "program.state has 1 names; function step_prefill has more state parameters ('cache_v_0'"},
    {"{\"program\": {\"version\": 1, \"functions\": {" ONE_SEQUENCE "}, \"state\": [\"cache_k_0\", \"cache_v_0\", "
     "\"cache_k_1\"], " SAMPLER "}}", TESSERA_ERROR_FORMAT,
     "program.state has 3 names; function step_prefill has 2 state parameters"},
    {"{\"program\": {\"version\": 1, \"functions\": {" ONE_SEQUENCE "}, " STATE ", \"sampler\": [\"temperature\", "
     "\"top_p\", \"top_k\", \"repetition_penalty\", \"random\"]}}", TESSERA_ERROR_FORMAT,
     "chat-config.json's program.sampler is [\"temperature\", \"top_p\", \"top_k\", \"repetition_penalty\", "
     "\"random\"]; this runtime knows [\"temperature\", \"top_k\", \"top_p\", \"repetition_penalty\", \"random\"]"},
    {"{\"program\": {\"version\": 1, \"functions\": {" ONE_SEQUENCE "}, " STATE ", \"sampler\": [\"temperature\", "
     "\"top_k\", \"top_p\", \"repetition_penalty\", \"random\", \"min_p\"]}}", TESSERA_ERROR_FORMAT,
     "program.sampler is [\"temperature\", \"top_k\", \"top_p\", \"repetition_penalty\", \"random\", \"min_p\"]"},
    {"{\"program\": {\"version\": 1, \"functions\": {" ONE_SEQUENCE "}, " STATE ", \"sampler\": [\"temperature\", 2]}}",
     TESSERA_ERROR_FORMAT, "program.sampler is [\"temperature\", ?]"},
    {"{\"program\": {\"version\": 1, \"functions\": {" ONE_SEQUENCE "}, " STATE ", \"sampler\": []}}",
     TESSERA_ERROR_FORMAT, "program.sampler is []; this runtime knows"},
    {"{\"program\": {\"version\": 1, \"functions\": {" ONE_SEQUENCE "}, " STATE "}}", TESSERA_ERROR_FORMAT,
     "field 'sampler'"},
    {"{\"program\": {\"version\": 1, \"functions\": {\"prefill_paged\": \"paged_prefill\", \"decode_batch\": "
     "\"paged_decode\", " SAMPLING_ROLES "}, " STATE ", " SAMPLER ", \"page_size\": 0, \"max_batch\": 4}}",
     TESSERA_ERROR_FORMAT, "field 'page_size'"},
};

static void each_broken_section_is_refused_naming_the_member(void) {
    for (size_t i = 0; i < TSR_ARRAY_LEN(BROKEN); i++) {
        tsr_program p;
        int rc = parse(BROKEN[i].json, &p);
        if (rc != BROKEN[i].status || !has(BROKEN[i].message)) {
            fprintf(stderr, "case %zu: status %d\n", i, rc);
            CHECK(!"a broken program section is refused with its message");
        }
    }
}

static void a_long_wrong_sampler_layout_is_cut_short_in_the_message(void) {
    char json[4096] = "{\"program\": {\"version\": 1, \"functions\": {" ONE_SEQUENCE "}, " STATE ", \"sampler\": [";
    for (int i = 0; i < 100; i++) strcat(json, i ? ", \"temperature_and_more\"" : "\"temperature_and_more\"");
    strcat(json, "]}}");
    tsr_program p;
    CHECK_EQ_INT(parse(json, &p), TESSERA_ERROR_FORMAT);
    CHECK(has("program.sampler is [\"temperature_and_more\", "));
    CHECK(has("...; this runtime knows"));
}

int main(void) {
    a_one_sequence_build_names_its_functions();
    a_batched_build_names_its_functions_page_and_batch();
    each_broken_section_is_refused_naming_the_member();
    a_long_wrong_sampler_layout_is_cut_short_in_the_message();
    return tsr_test_failures();
}
