/* JSON helpers: depth limit, trailing bytes, typed getters with named fields, exact integers. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "json.h"

static int has(const char *needle) {
    if (strstr(tessera_last_error(), needle)) return 1;
    fprintf(stderr, "last error \"%s\" lacks \"%s\"\n", tessera_last_error(), needle);
    return 0;
}

static cJSON *parse(const char *text) { return tsr_json_parse(text, strlen(text), "test.json"); }

static char *nested(int depth) {
    char *s = malloc((size_t)depth * 2 + 1);
    for (int i = 0; i < depth; i++) {
        s[i] = '[';
        s[depth * 2 - 1 - i] = ']';
    }
    s[depth * 2] = '\0';
    return s;
}

int main(void) {
    /* Depth: 256 levels parse, 257 do not; brackets inside strings do not count. */
    char *ok = nested(256), *deep = nested(257), *very = nested(100000);
    cJSON *j = parse(ok);
    CHECK(j != NULL);
    cJSON_Delete(j);
    CHECK(parse(deep) == NULL && has("deeper than 256"));
    CHECK(parse(very) == NULL && has("deeper than 256"));
    free(ok);
    free(deep);
    free(very);
    j = parse("{\"s\": \"[[[[\\\"[[[[\"}");
    CHECK(j != NULL);
    cJSON_Delete(j);

    /* Not NUL-terminated: only `size` bytes are read. */
    const char text[] = "{\"a\": 1}garbage";
    j = tsr_json_parse(text, 8, "slice.json");
    CHECK(j != NULL);
    cJSON_Delete(j);
    CHECK(tsr_json_parse(text, sizeof text - 1, "slice.json") == NULL && has("slice.json") && has("after the value"));
    j = parse("{\"a\": 1} \n\t");
    CHECK(j != NULL);
    cJSON_Delete(j);
    CHECK(parse("{\"a\": 1,}") == NULL && has("test.json is not valid JSON"));
    CHECK(parse("{\n\"a\": \n}") == NULL && has("line 3"));
    CHECK(parse("") == NULL);
    CHECK(tsr_json_parse("{} \0 {}", 7, "nul.json") == NULL);
    /* cJSON would end a C string at \u0000 ("x\u0000.bin" read as "x"): refused, as by the other runtimes. */
    CHECK(parse("{\"path\": \"x\\u0000.bin\"}") == NULL && has("NUL character"));
    j = parse("{\"path\": \"x\\\\u0000.bin\"}"); /* an escaped backslash, then the text u0000 */
    CHECK(j != NULL);
    cJSON_Delete(j);

    j = parse("{\"obj\": {}, \"arr\": [1, 2.5, -3], \"str\": \"x\", \"n\": 42, \"neg\": -7, \"frac\": 1.5,"
              " \"big\": 9007199254740992, \"maxok\": 9007199254740991, \"exp\": 1e3, \"null\": null,"
              " \"twice\": 1, \"twice\": 2, \"huge\": 1e300}");
    CHECK(j != NULL);
    const cJSON *o;
    const char *s;
    int64_t v = 0;
    CHECK_EQ_INT(tsr_json_object(j, "obj", "root", &o), 0);
    CHECK_EQ_INT(tsr_json_object(j, "arr", "root", &o), TESSERA_ERROR_FORMAT);
    CHECK(has("root: field 'arr' is not an object"));
    CHECK_EQ_INT(tsr_json_object(j, "nope", "root", &o), TESSERA_ERROR_FORMAT);
    CHECK(has("root: field 'nope' is missing"));
    CHECK_EQ_INT(tsr_json_array(j, "arr", "root", &o), 0);
    CHECK_EQ_INT(tsr_json_int_item(cJSON_GetArrayItem(o, 0), "arr", 0, 10, &v), 0);
    CHECK_EQ_INT(v, 1);
    CHECK_EQ_INT(tsr_json_int_item(cJSON_GetArrayItem(o, 1), "arr", 0, 10, &v), TESSERA_ERROR_FORMAT);
    CHECK(has("not an integer"));
    CHECK_EQ_INT(tsr_json_int_item(cJSON_GetArrayItem(o, 2), "arr", 0, 10, &v), TESSERA_ERROR_FORMAT);
    CHECK(has("-3, outside [0, 10]"));
    CHECK_EQ_INT(tsr_json_array(j, "str", "root", &o), TESSERA_ERROR_FORMAT);
    CHECK_EQ_INT(tsr_json_string(j, "str", "root", &s), 0);
    CHECK(strcmp(s, "x") == 0);
    CHECK_EQ_INT(tsr_json_string(j, "n", "root", &s), TESSERA_ERROR_FORMAT);
    CHECK(has("field 'n' is not a string"));
    CHECK_EQ_INT(tsr_json_int(j, "n", "root", 0, 100, &v), 0);
    CHECK_EQ_INT(v, 42);
    CHECK_EQ_INT(tsr_json_int(j, "n", "root", 0, 41, &v), TESSERA_ERROR_FORMAT);
    CHECK(has("root: field 'n' is 42, outside [0, 41]"));
    CHECK_EQ_INT(tsr_json_int(j, "neg", "root", INT64_MIN, INT64_MAX, &v), 0);
    CHECK_EQ_INT(v, -7);
    CHECK_EQ_INT(tsr_json_int(j, "frac", "root", INT64_MIN, INT64_MAX, &v), TESSERA_ERROR_FORMAT);
    CHECK(has("field 'frac' is 1.5, not an integer"));
    CHECK_EQ_INT(tsr_json_int(j, "big", "root", INT64_MIN, INT64_MAX, &v), TESSERA_ERROR_FORMAT);
    CHECK(has("beyond 2^53"));
    CHECK_EQ_INT(tsr_json_int(j, "huge", "root", INT64_MIN, INT64_MAX, &v), TESSERA_ERROR_FORMAT);
    CHECK_EQ_INT(tsr_json_int(j, "maxok", "root", INT64_MIN, INT64_MAX, &v), 0);
    CHECK_EQ_INT(v, 9007199254740991LL);
    CHECK_EQ_INT(tsr_json_int(j, "exp", "root", 0, 1000, &v), 0);
    CHECK_EQ_INT(v, 1000);
    CHECK_EQ_INT(tsr_json_int(j, "str", "root", 0, 1, &v), TESSERA_ERROR_FORMAT);
    CHECK(has("field 'str' is not a number"));
    CHECK_EQ_INT(tsr_json_int(j, "twice", "root", 0, 9, &v), TESSERA_ERROR_FORMAT);
    CHECK(has("field 'twice' appears twice"));

    /* Optional members: absent and null leave the value alone; a wrong type is still an error. */
    v = 5;
    s = "default";
    CHECK_EQ_INT(tsr_json_opt_int(j, "absent", "root", 0, 9, &v), 0);
    CHECK_EQ_INT(tsr_json_opt_int(j, "null", "root", 0, 9, &v), 0);
    CHECK_EQ_INT(v, 5);
    CHECK_EQ_INT(tsr_json_opt_string(j, "null", "root", &s), 0);
    CHECK(strcmp(s, "default") == 0);
    CHECK_EQ_INT(tsr_json_opt_int(j, "n", "root", 0, 100, &v), 0);
    CHECK_EQ_INT(v, 42);
    CHECK_EQ_INT(tsr_json_opt_string(j, "n", "root", &s), TESSERA_ERROR_FORMAT);
    CHECK_EQ_INT(tsr_json_opt_string(j, "str", "root", &s), 0);
    CHECK(strcmp(s, "x") == 0);
    /* A getter on something that is not an object says so. */
    CHECK_EQ_INT(tsr_json_int(cJSON_GetObjectItem(j, "arr"), "k", "the array", 0, 1, &v), TESSERA_ERROR_FORMAT);
    CHECK(has("the array is not a JSON object"));
    cJSON_Delete(j);
    return tsr_test_failures();
}
