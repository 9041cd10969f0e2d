/* The chat format renders conversations exactly as the models' Jinja templates do: the fixtures in
 * data/chat_format were rendered by Jinja (tests/frontend/test_chat_format.py writes them and checks
 * they are current). Malformed formats and unknown roles fail with errors that say what to do. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_format.h"
#include "harness.h"

#define FIXTURES "data/chat_format"

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *text = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        if (size >= 0 && fseek(f, 0, SEEK_SET) == 0 && (text = malloc((size_t)size + 1))) {
            if (fread(text, 1, (size_t)size, f) != (size_t)size) {
                free(text);
                text = NULL;
            } else {
                text[size] = '\0';
            }
        }
    }
    fclose(f);
    return text;
}

/* Renders every case of one fixture; returns the number of cases. */
static int check_fixture(const char *path) {
    char *text = read_file(path);
    CHECK(text != NULL);
    if (!text) return 0;
    cJSON *config = cJSON_Parse(text);
    free(text);
    CHECK(config != NULL);
    if (!config) return 0;
    tsr_alloc alloc;
    tsr_alloc_init(&alloc, NULL);
    tsr_chat_format fmt;
    int rc = tsr_chat_format_parse(&alloc, config, &fmt);
    if (rc != TESSERA_OK) fprintf(stderr, "%s: %s\n", path, tessera_last_error());
    CHECK_EQ_INT(rc, TESSERA_OK);
    tsr_chat_buffer buf;
    tsr_chat_buffer_init(&buf, &alloc);
    int n_cases = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(config, "cases")) {
        const cJSON *messages = cJSON_GetObjectItemCaseSensitive(c, "messages");
        const cJSON *expected = cJSON_GetObjectItemCaseSensitive(c, "expected");
        CHECK(cJSON_IsArray(messages) && cJSON_IsString(expected));
        tessera_message msgs[32];
        size_t n = 0;
        const cJSON *m;
        cJSON_ArrayForEach(m, messages) {
            if (n == TSR_ARRAY_LEN(msgs)) break;
            msgs[n].role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "role"));
            msgs[n].content = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "content"));
            n++;
        }
        CHECK_EQ_INT(n, cJSON_GetArraySize(messages));
        rc = tsr_chat_format_render(&fmt, msgs, n, &buf);
        CHECK_EQ_INT(rc, TESSERA_OK);
        const char *want = cJSON_GetStringValue(expected);
        if (rc == TESSERA_OK && (buf.len != strlen(want) || memcmp(buf.data, want, buf.len) != 0)) {
            fprintf(stderr, "%s: case %d renders\n%s\ninstead of\n%s\n", path, n_cases, buf.data, want);
            CHECK(!"rendered as the template does");
        }
        /* Rendering the same conversation again into the grown buffer allocates nothing. */
        uint64_t before = alloc.count;
        CHECK_EQ_INT(tsr_chat_format_render(&fmt, msgs, n, &buf), TESSERA_OK);
        CHECK_EQ_INT(alloc.count, before);
        n_cases++;
    }
    tsr_chat_buffer_free(&buf);
    tsr_chat_format_free(&fmt);
    cJSON_Delete(config);
    return n_cases;
}

static void check_fixtures(void) {
    DIR *dir = opendir(FIXTURES);
    CHECK(dir != NULL);
    if (!dir) return;
    int files = 0, cases = 0;
    for (struct dirent *e; (e = readdir(dir));) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".json") != 0) continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", FIXTURES, e->d_name);
        int n = check_fixture(path);
        CHECK(n >= 20);
        cases += n;
        files++;
    }
    closedir(dir);
    CHECK(files >= 6);
    printf("%d conversations of %d templates render as Jinja does\n", cases, files);
}

/* Parses `json` as a chat-config; returns the status and keeps the format in *fmt on success. */
static int parse_text(tsr_alloc *alloc, const char *json, tsr_chat_format *fmt) {
    cJSON *config = cJSON_Parse(json);
    CHECK(config != NULL);
    int rc = tsr_chat_format_parse(alloc, config, fmt);
    cJSON_Delete(config);
    return rc;
}

static void check_error(const char *json, int status, const char *words) {
    tsr_alloc alloc;
    tsr_alloc_init(&alloc, NULL);
    tsr_chat_format fmt;
    int rc = parse_text(&alloc, json, &fmt);
    CHECK_EQ_INT(rc, status);
    if (!strstr(tessera_last_error(), words)) {
        fprintf(stderr, "error '%s' does not say '%s'\n", tessera_last_error(), words);
        CHECK(!"the error says what is wrong");
    }
    if (rc == TESSERA_OK) tsr_chat_format_free(&fmt);
}

#define GEMMA_LIKE                                                                                      \
    "{\"chat_format\": {\"version\": 1, \"begin\": \"<bos>\", \"default_system\": null, \"roles\": {"      \
    "\"user\": {\"prefix\": \"<u>\", \"suffix\": \"</u>\"}, \"assistant\": {\"prefix\": \"<m>\", "          \
    "\"suffix\": \"</m>\"}}, \"generation_prompt\": \"<m>\", \"end\": \"\", \"trim_content\": true}}"

static void check_errors(void) {
    check_error("{\"model\": \"old\", \"chat_template\": \"{{ x }}\"}", TESSERA_ERROR_UNSUPPORTED,
                "recompile it with a newer");
    check_error("{\"chat_format\": null}", TESSERA_ERROR_UNSUPPORTED, "could not reduce this model's chat template");
    check_error("[]", TESSERA_ERROR_FORMAT, "not a JSON object");
    check_error("{\"chat_format\": 3}", TESSERA_ERROR_FORMAT, "chat_format is not an object");
    check_error("{\"chat_format\": {\"version\": 2}}", TESSERA_ERROR_VERSION, "version 2");
    check_error("{\"chat_format\": {\"begin\": \"\"}}", TESSERA_ERROR_FORMAT, "'version' is missing");
    check_error("{\"chat_format\": {\"version\": 1, \"begin\": 7, \"generation_prompt\": \"\", \"roles\": {}}}",
                TESSERA_ERROR_FORMAT, "field 'begin' is of another type");
    check_error("{\"chat_format\": {\"version\": 1, \"begin\": \"\", \"roles\": {}}}", TESSERA_ERROR_FORMAT,
                "field 'generation_prompt' is missing");
    check_error("{\"chat_format\": {\"version\": 1, \"begin\": \"\", \"generation_prompt\": \"\"}}",
                TESSERA_ERROR_FORMAT, "field 'roles' is missing");
    check_error("{\"chat_format\": {\"version\": 1, \"begin\": \"\", \"generation_prompt\": \"\", "
                "\"roles\": {\"user\": {\"prefix\": \"\"}}}}",
                TESSERA_ERROR_FORMAT, "chat_format.roles.user: field 'suffix' is missing");
    check_error("{\"chat_format\": {\"version\": 1, \"begin\": \"\", \"generation_prompt\": \"\", "
                "\"roles\": {\"user\": []}}}", TESSERA_ERROR_FORMAT, "role 'user' is not an object");
    check_error("{\"chat_format\": {\"version\": 1, \"begin\": \"\", \"generation_prompt\": \"\", "
                "\"default_system\": false, \"roles\": {}}}", TESSERA_ERROR_FORMAT, "'default_system'");
    check_error("{\"chat_format\": {\"version\": 1, \"begin\": \"\", \"generation_prompt\": \"\", "
                "\"trim_content\": 1, \"roles\": {}}}", TESSERA_ERROR_FORMAT, "'trim_content' is not a boolean");
    check_error(GEMMA_LIKE, TESSERA_OK, "");
}

static void check_rendering(void) {
    tsr_alloc alloc;
    tsr_alloc_init(&alloc, NULL);
    tsr_chat_format fmt;
    CHECK_EQ_INT(parse_text(&alloc, GEMMA_LIKE, &fmt), TESSERA_OK);
    CHECK(tsr_chat_format_role(&fmt, "system") == NULL);
    tsr_chat_buffer buf;
    tsr_chat_buffer_init(&buf, &alloc);

    /* A role the format lacks is an error only when a message uses it, and the error names it. */
    tessera_message with_system[] = {{"system", "be brief"}, {"user", "hi"}};
    CHECK_EQ_INT(tsr_chat_format_render(&fmt, with_system, 2, &buf), TESSERA_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(tessera_last_error(), "message 0 has role 'system'") != NULL);
    CHECK(strstr(tessera_last_error(), "(it has: user, assistant)") != NULL);
    CHECK(buf.len == 0);
    tessera_message tool[] = {{"user", "hi"}, {"tool", "{}"}};
    CHECK_EQ_INT(tsr_chat_format_render(&fmt, tool, 2, &buf), TESSERA_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(tessera_last_error(), "'tool'") != NULL);
    tessera_message null_content[] = {{"user", NULL}};
    CHECK_EQ_INT(tsr_chat_format_render(&fmt, null_content, 1, &buf), TESSERA_ERROR_INVALID_ARGUMENT);
    CHECK_EQ_INT(tsr_chat_format_render(&fmt, NULL, 0, &buf), TESSERA_ERROR_INVALID_ARGUMENT);

    /* trim_content strips what Python's str.strip strips: ASCII and Unicode whitespace (U+3000,
     * U+00A0, U+2028, U+0085), not other characters, and stops at bytes that are not UTF-8. */
    tessera_message trimmed[] = {{"user", "\xe3\x80\x80 \t hi there \xc2\xa0\n"},
                                 {"assistant", "\xe2\x80\xa8\xc2\x85x\xe2\x80\x8b"},
                                 {"user", " \n\r\x0b\x0c\x1c "},
                                 {"user", "\xe3\x80 \xff"}};
    CHECK_EQ_INT(tsr_chat_format_render(&fmt, trimmed, 4, &buf), TESSERA_OK);
    const char *want = "<bos><u>hi there</u><m>x\xe2\x80\x8b</m><u></u><u>\xe3\x80 \xff</u><m>";
    CHECK(buf.len == strlen(want) && strcmp(buf.data, want) == 0);
    tsr_chat_buffer_free(&buf);
    tsr_chat_format_free(&fmt);
}

int main(void) {
    check_fixtures();
    check_errors();
    check_rendering();
    return tsr_test_failures();
}
