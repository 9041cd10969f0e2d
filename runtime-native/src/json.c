/* Checked reads of JSON documents over cJSON. The documents come from a model folder, so nothing
 * in them is trusted: depth is bounded before cJSON recurses, trailing bytes are refused, a member
 * named twice is refused (cJSON would return the first, Python's json the last: the two runtimes
 * must not read different values from one file), and numbers become integers only when they are
 * exactly integers within range.
 *
 * cJSON allocates through its own process-wide hooks (malloc); routing it through a model's
 * tsr_alloc would need global state, so parse trees are the one thing outside the allocator. They
 * live only while a file is being read. */
#include "json.h"

#include <math.h>
#include <string.h>

#include <stdio.h>

#include "facts.h"

/* Integers beyond 2^53 - 1 cannot be told apart from their neighbours once parsed as doubles. */
#define TSR_JSON_MAX_EXACT 9007199254740991.0

/* Deepest nesting of the text, counted without parsing (strings skipped), so that cJSON's
 * recursive parser never goes deeper than we allow. Stops counting once past the limit. Also says
 * whether a string holds the escape \u0000: cJSON would end the C string there, so "x\u0000.bin"
 * would be "x" here and "x\0.bin" to the other runtimes, which refuse it. */
static int nesting_depth(const char *text, size_t size, int *nul_escape) {
    int depth = 0, deepest = 0, in_string = 0;
    *nul_escape = 0;
    for (size_t i = 0; i < size; i++) {
        char c = text[i];
        if (in_string) {
            if (c == '\\') {
                if (size - i > 5 && text[i + 1] == 'u' && memcmp(text + i + 2, "0000", 4) == 0) *nul_escape = 1;
                i++;
            } else if (c == '"') {
                in_string = 0;
            }
        } else if (c == '"') {
            in_string = 1;
        } else if (c == '[' || c == '{') {
            if (++depth > deepest) deepest = depth;
            if (deepest > TSR_MAX_JSON_DEPTH) break;
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return deepest;
}

cJSON *tsr_json_parse(const char *text, size_t size, const char *what) {
    if (!text) {
        tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "%s: no text", what);
        return NULL;
    }
    int nul_escape;
    if (nesting_depth(text, size, &nul_escape) > TSR_MAX_JSON_DEPTH) {
        tsr_error(TESSERA_ERROR_FORMAT, "%s: JSON nested deeper than %d levels", what, TSR_MAX_JSON_DEPTH);
        return NULL;
    }
    if (nul_escape) {
        tsr_error(TESSERA_ERROR_FORMAT, "%s: a string holds the NUL character (\\u0000), which no name or path may", what);
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, size, &end, 0);
    if (!root) {
        size_t at = end && end >= text && (size_t)(end - text) <= size ? (size_t)(end - text) : 0;
        size_t line = 1;
        for (size_t i = 0; i < at; i++) line += text[i] == '\n';
        tsr_error(TESSERA_ERROR_FORMAT, "%s is not valid JSON (near byte %zu, line %zu)", what, at, line);
        return NULL;
    }
    /* cJSON stops after the first value; anything but whitespace after it is an error. */
    for (size_t at = (size_t)(end - text); at < size; at++) {
        char c = text[at];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            cJSON_Delete(root);
            tsr_error(TESSERA_ERROR_FORMAT, "%s is not valid JSON (unexpected bytes after the value at byte %zu)", what,
                      at);
            return NULL;
        }
    }
    return root;
}

/* The member `key` of obj, or NULL; a member present twice is an error (see the top). */
static int member(const cJSON *obj, const char *key, const char *what, const cJSON **out) {
    *out = NULL;
    if (!cJSON_IsObject(obj)) return tsr_error(TESSERA_ERROR_FORMAT, "%s is not a JSON object", what);
    for (const cJSON *child = obj->child; child; child = child->next) {
        if (child->string && strcmp(child->string, key) == 0) {
            if (*out) return tsr_error(TESSERA_ERROR_FORMAT, "%s: field '%s' appears twice", what, key);
            *out = child;
        }
    }
    return TESSERA_OK;
}

static int required(const cJSON *obj, const char *key, const char *what, const cJSON **out) {
    int status = member(obj, key, what, out);
    if (status) return status;
    if (!*out) return tsr_error(TESSERA_ERROR_FORMAT, "%s: field '%s' is missing", what, key);
    return TESSERA_OK;
}

static int wrong_type(const char *what, const char *key, const char *want) {
    return tsr_error(TESSERA_ERROR_FORMAT, "%s: field '%s' is not %s", what, key, want);
}

int tsr_json_object(const cJSON *obj, const char *key, const char *what, const cJSON **out) {
    int status = required(obj, key, what, out);
    if (!status && !cJSON_IsObject(*out)) return wrong_type(what, key, "an object");
    return status;
}

int tsr_json_array(const cJSON *obj, const char *key, const char *what, const cJSON **out) {
    int status = required(obj, key, what, out);
    if (!status && !cJSON_IsArray(*out)) return wrong_type(what, key, "an array");
    return status;
}

int tsr_json_string(const cJSON *obj, const char *key, const char *what, const char **out) {
    const cJSON *item;
    int status = required(obj, key, what, &item);
    if (status) return status;
    if (!cJSON_IsString(item) || !item->valuestring) return wrong_type(what, key, "a string");
    *out = item->valuestring;
    return TESSERA_OK;
}

/* The integer of a number item, or an error that says why not ("field 'x'" or "element"). */
static int integer(const cJSON *item, const char *what, const char *label, int64_t lo, int64_t hi, int64_t *out) {
    if (!cJSON_IsNumber(item)) return tsr_error(TESSERA_ERROR_FORMAT, "%s: %s is not a number", what, label);
    double d = item->valuedouble;
    if (!isfinite(d) || fabs(d) > TSR_JSON_MAX_EXACT)
        return tsr_error(TESSERA_ERROR_FORMAT, "%s: %s is beyond 2^53 (not exact as a JSON number)", what, label);
    int64_t v = (int64_t)d; /* in range: |d| <= 2^53 */
    if ((double)v != d) return tsr_error(TESSERA_ERROR_FORMAT, "%s: %s is %g, not an integer", what, label, d);
    if (v < lo || v > hi)
        return tsr_error(TESSERA_ERROR_FORMAT, "%s: %s is %lld, outside [%lld, %lld]", what, label, (long long)v,
                         (long long)lo, (long long)hi);
    *out = v;
    return TESSERA_OK;
}

int tsr_json_int(const cJSON *obj, const char *key, const char *what, int64_t lo, int64_t hi, int64_t *out) {
    const cJSON *item;
    int status = required(obj, key, what, &item);
    if (status) return status;
    char label[96];
    snprintf(label, sizeof label, "field '%s'", key);
    return integer(item, what, label, lo, hi, out);
}

int tsr_json_int_item(const cJSON *item, const char *what, int64_t lo, int64_t hi, int64_t *out) {
    return integer(item, what, "an element", lo, hi, out);
}

int tsr_json_opt_string(const cJSON *obj, const char *key, const char *what, const char **out) {
    const cJSON *item;
    int status = member(obj, key, what, &item);
    if (status || !item || cJSON_IsNull(item)) return status;
    if (!cJSON_IsString(item) || !item->valuestring) return wrong_type(what, key, "a string");
    *out = item->valuestring;
    return TESSERA_OK;
}

int tsr_json_opt_int(const cJSON *obj, const char *key, const char *what, int64_t lo, int64_t hi, int64_t *out) {
    const cJSON *item;
    int status = member(obj, key, what, &item);
    if (status || !item || cJSON_IsNull(item)) return status;
    char label[96];
    snprintf(label, sizeof label, "field '%s'", key);
    return integer(item, what, label, lo, hi, out);
}
