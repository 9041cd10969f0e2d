/* The chat format of chat-config.json: parsing, checking, and laying a conversation out. */
#include "chat_format.h"

#include <stdio.h>
#include <string.h>

#define WHAT "chat-config.json: chat_format"

/* ---- parsing ------------------------------------------------------------------------------ */

static int copy_string(tsr_alloc *alloc, const cJSON *obj, const char *key, const char *where, bool optional,
                       char **out) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!item && optional) {
        *out = tsr_strdup(alloc, "");
    } else if (!cJSON_IsString(item) || !item->valuestring) {
        return tsr_error(TESSERA_ERROR_FORMAT, WHAT "%s: field '%s' is %s, not a string", where, key,
                         item ? "of another type" : "missing");
    } else {
        *out = tsr_strdup(alloc, item->valuestring);
    }
    return *out ? TESSERA_OK : TESSERA_ERROR_OUT_OF_MEMORY;
}

static int parse_roles(tsr_alloc *alloc, const cJSON *roles, tsr_chat_format *out) {
    if (!cJSON_IsObject(roles))
        return tsr_error(TESSERA_ERROR_FORMAT, WHAT ": field 'roles' is %s, not an object",
                         roles ? "of another type" : "missing");
    size_t n = (size_t)cJSON_GetArraySize(roles);
    out->roles = tsr_calloc(alloc, n ? n : 1, sizeof *out->roles);
    if (!out->roles) return TESSERA_ERROR_OUT_OF_MEMORY;
    const cJSON *role;
    cJSON_ArrayForEach(role, roles) {
        const char *name = role->string ? role->string : "";
        if (!*name) return tsr_error(TESSERA_ERROR_FORMAT, WHAT ".roles: a role has an empty name");
        for (size_t i = 0; i < out->n_roles; i++)
            if (strcmp(out->roles[i].name, name) == 0)
                return tsr_error(TESSERA_ERROR_FORMAT, WHAT ".roles: role '%s' appears twice", name);
        if (!cJSON_IsObject(role))
            return tsr_error(TESSERA_ERROR_FORMAT, WHAT ".roles: role '%s' is not an object", name);
        tsr_chat_role *r = &out->roles[out->n_roles++];
        char where[96];
        snprintf(where, sizeof where, ".roles.%.64s", name);
        if (!(r->name = tsr_strdup(alloc, name))) return TESSERA_ERROR_OUT_OF_MEMORY;
        int rc = copy_string(alloc, role, "prefix", where, false, &r->prefix);
        if (rc == TESSERA_OK) rc = copy_string(alloc, role, "suffix", where, false, &r->suffix);
        if (rc != TESSERA_OK) return rc;
    }
    return TESSERA_OK;
}

static int parse(tsr_alloc *alloc, const cJSON *chat_config, tsr_chat_format *out) {
    if (!cJSON_IsObject(chat_config))
        return tsr_error(TESSERA_ERROR_FORMAT, "chat-config.json is not a JSON object");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(chat_config, "chat_format");
    if (!fmt)
        return tsr_error(TESSERA_ERROR_UNSUPPORTED,
                         "chat-config.json has no chat_format (the native runtime's form of the chat template): "
                         "the model was compiled by an older tessera; recompile it with a newer one "
                         "(tessera compile MODEL.gguf --target cpu -o DIR)");
    if (cJSON_IsNull(fmt))
        return tsr_error(TESSERA_ERROR_UNSUPPORTED,
                         "chat-config.json's chat_format is null: tessera compile could not reduce this model's "
                         "chat template to fixed text around each message (its warning said why), so the native "
                         "runtime cannot lay out a conversation for it");
    if (!cJSON_IsObject(fmt)) return tsr_error(TESSERA_ERROR_FORMAT, WHAT " is not an object");
    const cJSON *version = cJSON_GetObjectItemCaseSensitive(fmt, "version");
    if (!cJSON_IsNumber(version))
        return tsr_error(TESSERA_ERROR_FORMAT, WHAT ": field 'version' is %s, not a number",
                         version ? "of another type" : "missing");
    if (version->valuedouble != TSR_CHAT_FORMAT_VERSION)
        return tsr_error(TESSERA_ERROR_VERSION,
                         WHAT " has version %g; this library reads version %d (recompile the model with the "
                         "tessera that matches this runtime)", version->valuedouble, TSR_CHAT_FORMAT_VERSION);
    int rc = copy_string(alloc, fmt, "begin", "", false, &out->begin);
    if (rc == TESSERA_OK) rc = copy_string(alloc, fmt, "generation_prompt", "", false, &out->generation_prompt);
    if (rc == TESSERA_OK) rc = copy_string(alloc, fmt, "end", "", true, &out->end);
    if (rc != TESSERA_OK) return rc;
    const cJSON *system = cJSON_GetObjectItemCaseSensitive(fmt, "default_system");
    if (system && !cJSON_IsNull(system)) {
        rc = copy_string(alloc, fmt, "default_system", "", false, &out->default_system);
        if (rc != TESSERA_OK) return rc;
    }
    const cJSON *trim = cJSON_GetObjectItemCaseSensitive(fmt, "trim_content");
    if (trim && !cJSON_IsBool(trim))
        return tsr_error(TESSERA_ERROR_FORMAT, WHAT ": field 'trim_content' is not a boolean");
    out->trim_content = cJSON_IsTrue(trim);
    return parse_roles(alloc, cJSON_GetObjectItemCaseSensitive(fmt, "roles"), out);
}

int tsr_chat_format_parse(tsr_alloc *alloc, const cJSON *chat_config, tsr_chat_format *out) {
    memset(out, 0, sizeof *out);
    out->alloc = alloc;
    int rc = parse(alloc, chat_config, out);
    if (rc != TESSERA_OK) tsr_chat_format_free(out);
    return rc;
}

void tsr_chat_format_free(tsr_chat_format *f) {
    tsr_alloc *alloc = f->alloc;
    if (!alloc) return;
    tsr_free(alloc, f->begin);
    tsr_free(alloc, f->default_system);
    tsr_free(alloc, f->generation_prompt);
    tsr_free(alloc, f->end);
    for (size_t i = 0; f->roles && i < f->n_roles; i++) {
        tsr_free(alloc, f->roles[i].name);
        tsr_free(alloc, f->roles[i].prefix);
        tsr_free(alloc, f->roles[i].suffix);
    }
    tsr_free(alloc, f->roles);
    memset(f, 0, sizeof *f);
}

const tsr_chat_role *tsr_chat_format_role(const tsr_chat_format *f, const char *role) {
    for (size_t i = 0; i < f->n_roles; i++)
        if (strcmp(f->roles[i].name, role) == 0) return &f->roles[i];
    return NULL;
}

/* ---- rendering ---------------------------------------------------------------------------- */

void tsr_chat_buffer_init(tsr_chat_buffer *buf, tsr_alloc *alloc) {
    buf->alloc = alloc;
    buf->data = NULL;
    buf->len = buf->cap = 0;
}

void tsr_chat_buffer_free(tsr_chat_buffer *buf) {
    if (buf->alloc) tsr_free(buf->alloc, buf->data);
    buf->data = NULL;
    buf->len = buf->cap = 0;
}

static int append(tsr_chat_buffer *buf, const char *text, size_t n) {
    size_t need;
    if (!tsr_add_size(buf->len, n, &need) || !tsr_add_size(need, 1, &need))
        return tsr_error(TESSERA_ERROR_OUT_OF_MEMORY, "the conversation's text overflows size_t");
    if (need > buf->cap) {
        size_t cap = buf->cap > SIZE_MAX / 2 ? need : buf->cap * 2;
        if (cap < need) cap = need;
        if (cap < 256) cap = 256;
        char *data = tsr_malloc(buf->alloc, cap);
        if (!data) return TESSERA_ERROR_OUT_OF_MEMORY;
        if (buf->len) memcpy(data, buf->data, buf->len);
        tsr_free(buf->alloc, buf->data);
        buf->data = data;
        buf->cap = cap;
    }
    if (n) memcpy(buf->data + buf->len, text, n);
    buf->len += n;
    buf->data[buf->len] = '\0';
    return TESSERA_OK;
}

static int append_str(tsr_chat_buffer *buf, const char *text) { return append(buf, text, strlen(text)); }

static bool is_space(uint32_t c) {
    /* Python's str.isspace, which str.strip and Jinja's trim use. */
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

/* The length of the whitespace character that is exactly the n bytes at s, or 0 (every such
 * character takes at most 3 bytes in UTF-8; invalid or overlong sequences are not whitespace). */
static size_t space_of_length(const unsigned char *s, size_t n) {
    uint32_t c = s[0];
    size_t len;
    if (c < 0x80) {
        len = 1;
    } else if ((c & 0xE0) == 0xC0) {
        len = 2;
        c &= 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3;
        c &= 0x0F;
    } else {
        return 0;
    }
    if (len != n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        c = (c << 6) | (s[i] & 0x3F);
    }
    if ((len == 2 && c < 0x80) || (len == 3 && c < 0x800)) return 0;
    return is_space(c) ? len : 0;
}

/* content without the whitespace around it: [*start, *start + *n). */
static void trim(const char *content, const char **start, size_t *n) {
    const unsigned char *s = (const unsigned char *)content;
    size_t len = strlen(content), k;
    for (bool more = true; more && len;) {
        more = false;
        for (k = 1; k <= 3 && k <= len; k++)
            if (space_of_length(s, k)) {
                s += k;
                len -= k;
                more = true;
                break;
            }
    }
    for (bool more = true; more && len;) {
        more = false;
        for (k = 1; k <= 3 && k <= len; k++)
            if (space_of_length(s + len - k, k)) {
                len -= k;
                more = true;
                break;
            }
    }
    *start = (const char *)s;
    *n = len;
}

static int unknown_role(const tsr_chat_format *f, size_t index, const char *role) {
    char known[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < f->n_roles && used < sizeof known; i++) {
        int w = snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "", f->roles[i].name);
        if (w < 0) break;
        used += (size_t)w;
    }
    return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT,
                     "message %zu has role '%s', which this model's chat format does not have (it has: %s)", index,
                     role, f->n_roles ? known : "no roles");
}

static int render(const tsr_chat_format *f, const tessera_message *msgs, size_t n_msgs, tsr_chat_buffer *buf) {
    if (n_msgs == 0 || !msgs)
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "a conversation needs at least one message");
    for (size_t i = 0; i < n_msgs; i++) {
        if (!msgs[i].role || !msgs[i].content)
            return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "message %zu has a NULL %s", i,
                             msgs[i].role ? "content" : "role");
        if (!tsr_chat_format_role(f, msgs[i].role)) return unknown_role(f, i, msgs[i].role);
    }
    int rc = append_str(buf, f->begin);
    if (rc == TESSERA_OK && f->default_system && strcmp(msgs[0].role, "system") != 0)
        rc = append_str(buf, f->default_system);
    for (size_t i = 0; rc == TESSERA_OK && i < n_msgs; i++) {
        const tsr_chat_role *role = tsr_chat_format_role(f, msgs[i].role);
        const char *content = msgs[i].content;
        size_t n = 0;
        if (f->trim_content) trim(msgs[i].content, &content, &n);
        else n = strlen(content);
        rc = append_str(buf, role->prefix);
        if (rc == TESSERA_OK) rc = append(buf, content, n);
        if (rc == TESSERA_OK) rc = append_str(buf, role->suffix);
    }
    if (rc == TESSERA_OK) rc = append_str(buf, f->generation_prompt);
    if (rc == TESSERA_OK) rc = append_str(buf, f->end);
    return rc;
}

int tsr_chat_format_render(const tsr_chat_format *f, const tessera_message *msgs, size_t n_msgs,
                           tsr_chat_buffer *buf) {
    if (!f || !buf || !buf->alloc)
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "tsr_chat_format_render: NULL format or buffer");
    buf->len = 0;
    if (buf->data) buf->data[0] = '\0';
    int rc = render(f, msgs, n_msgs, buf);
    if (rc != TESSERA_OK) {
        buf->len = 0;
        if (buf->data) buf->data[0] = '\0';
    }
    return rc;
}
