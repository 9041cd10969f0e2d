/* Checked reads of JSON documents (cJSON): every getter names the field it was asked for in its
 * error, and numbers are checked to be integers within range before they become sizes. */
#ifndef TSR_JSON_H
#define TSR_JSON_H

#include <cjson/cJSON.h>

#include "common.h"

/* Parses text (of `size` bytes; need not be NUL-terminated). `what` names the file in errors.
 * Nesting deeper than TSR_MAX_JSON_DEPTH levels (facts.h; checked before cJSON recurses) and bytes
 * other than whitespace after the value are refused. NULL with the last error set on failure;
 * cJSON_Delete the result. */
cJSON *tsr_json_parse(const char *text, size_t size, const char *what);

/* Each returns 0 or TESSERA_ERROR_FORMAT ("<what>: field 'name' ..."). `what` describes the object.
 * A member present twice is an error (cJSON would take the first, Python the last). Integers must
 * be numbers without a fraction, within [lo, hi] and at most 2^53 - 1 in magnitude. */
int tsr_json_object(const cJSON *obj, const char *key, const char *what, const cJSON **out);   /* object */
int tsr_json_array(const cJSON *obj, const char *key, const char *what, const cJSON **out);    /* array */
int tsr_json_string(const cJSON *obj, const char *key, const char *what, const char **out);    /* string */
int tsr_json_int(const cJSON *obj, const char *key, const char *what, int64_t lo, int64_t hi, int64_t *out);
/* An integer item (an array element) within [lo, hi]. */
int tsr_json_int_item(const cJSON *item, const char *what, int64_t lo, int64_t hi, int64_t *out);
/* Optional members: absent or null leaves *out unchanged and returns 0. */
int tsr_json_opt_string(const cJSON *obj, const char *key, const char *what, const char **out);
int tsr_json_opt_int(const cJSON *obj, const char *key, const char *what, int64_t lo, int64_t hi, int64_t *out);

#endif
