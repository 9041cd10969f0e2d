/* The chat format: a model's chat template reduced to fixed strings around each message, as
 * `tessera compile` writes it into chat-config.json ("chat_format", docs/format.md). A conversation
 * renders as
 *
 *   begin + (default_system, if the first role is not "system")
 *         + for each message: prefix(role) + content + suffix(role)
 *         + generation_prompt + end
 *
 * with each content stripped of surrounding whitespace (Python's str.strip) when trim_content is set.
 * The compiler checked the reduction against the Jinja template byte for byte. */
#ifndef TSR_CHAT_FORMAT_H
#define TSR_CHAT_FORMAT_H

#include <cjson/cJSON.h>

#include "common.h"

#define TSR_CHAT_FORMAT_VERSION 1

typedef struct tsr_chat_role {
    char *name;
    char *prefix;
    char *suffix;
} tsr_chat_role;

typedef struct tsr_chat_format {
    tsr_alloc *alloc;
    char *begin;
    char *default_system; /* NULL: none */
    char *generation_prompt;
    char *end;
    bool trim_content;
    tsr_chat_role *roles; /* the roles the template knows (a template may lack "system") */
    size_t n_roles;
} tsr_chat_format;

/* A text the caller keeps across renders: it grows (through alloc) and is reused. data is
 * NUL-terminated after a successful render; len excludes the NUL. */
typedef struct tsr_chat_buffer {
    tsr_alloc *alloc;
    char *data;
    size_t len;
    size_t cap;
} tsr_chat_buffer;

/* Reads chat_config's "chat_format" into *out (zeroed on failure). TESSERA_ERROR_UNSUPPORTED when
 * chat_config has none (an older compiler: recompile) or has null (the template did not reduce);
 * TESSERA_ERROR_VERSION for another version; TESSERA_ERROR_FORMAT for a field of the wrong type. */
int tsr_chat_format_parse(tsr_alloc *alloc, const cJSON *chat_config, tsr_chat_format *out);
void tsr_chat_format_free(tsr_chat_format *f);
/* The role's strings, or NULL if the format has no such role. */
const tsr_chat_role *tsr_chat_format_role(const tsr_chat_format *f, const char *role);

void tsr_chat_buffer_init(tsr_chat_buffer *buf, tsr_alloc *alloc);
void tsr_chat_buffer_free(tsr_chat_buffer *buf);
/* Lays the conversation out into buf (replacing what it held), with the generation prompt.
 * TESSERA_ERROR_INVALID_ARGUMENT for a message whose role the format does not know (named in the
 * error) or a NULL role or content; buf is left empty on failure. */
int tsr_chat_format_render(const tsr_chat_format *f, const tessera_message *msgs, size_t n_msgs,
                           tsr_chat_buffer *buf);

#endif
