/* Chat models: chat-config.json and tokenizer.json beside the executable, and sessions that chat.
 *
 * A session keeps the tokens its KV cache holds. A turn renders the whole conversation with the
 * reduced chat template (chat_format.c), tokenizes it, and prefills only what differs from the
 * cache (the common prefix is kept, as the browser engine and tessera.app.chat do); then it
 * decodes token by token, sampling on the host (sampler.c) and streaming whole UTF-8 characters.
 * Every buffer is made when the session is made: a turn of a steady conversation allocates only
 * inside the VM's pool, and decode allocates nothing. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "chat_format.h"
#include "files.h"
#include "json.h"
#include "model.h"
#include "program.h"
#include "sampler.h"
#include "tokenizer/tokenizer.h"

#define MAX_CONFIG_BYTES ((size_t)TSR_MAX_JSON_BYTES_CHAT_CONFIG)
#define MAX_TOKENIZER_BYTES ((size_t)TSR_MAX_JSON_BYTES_TOKENIZER)
#define MAX_STOP_IDS 64

typedef struct tsr_chat_config {
    int32_t context_length;
    int32_t prefill_chunk; /* the most positions one prefill call takes */
    int32_t stop_ids[MAX_STOP_IDS];
    int32_t n_stop_ids;
    int32_t vocab; /* logits per position */
    /* The functions by role. A batched build (program.batched: prefill_paged and decode_batch) is
       called by the caller's own scheduler (tessera serve); it tokenizes, but chat sessions refuse it. */
    tsr_program program;
    const char *prefill, *decode; /* one-sequence builds: the names of the functions to call */
    bool has_format;
    tsr_chat_format format;
    char format_error[512]; /* why the model cannot chat, when has_format is false */
    /* The tokenizer allocates work buffers on every call: through this, only on the first. */
    tsr_recycler tokenizer_memory;
} tsr_chat_config;

struct tessera_session {
    tessera_model *model;
    tessera_session *next, *prev; /* the model's open sessions */
    int32_t *tokens; /* what the KV cache holds */
    int32_t n_tokens;
    int32_t *prompt; /* this turn's tokens, then the reply's */
    int32_t *generated;
    tsr_chat_buffer text;
    char *pieces; /* the reply's text, decoded as it streams */
    int32_t pieces_capacity;
    tsr_sampler sampler;
};

static int logits_width(const tsr_executable *exe, const tsr_program *program, int32_t *out) {
    const tsr_program_role roles[] = {TSR_ROLE_PREFILL, TSR_ROLE_DECODE};
    for (int i = 0; i < 2; i++) {
        const tsr_function *f = &exe->functions[program->functions[roles[i]]];
        const tsr_instr *ret = &f->code[f->n_code - 1];
        const tsr_register_info *info = ret->op == TSR_OP_RET ? &f->regs[ret->reg] : NULL;
        if (!info || !info->has_tensor || info->ndim != 2 || info->dtype != TESSERA_FLOAT32 ||
            info->shape[1].code != NULL || info->shape[1].constant <= 0 || info->shape[1].constant > (1 << 24))
            return tsr_error(TESSERA_ERROR_FORMAT, "%s must return float32 logits of shape (1, vocab)", f->name);
        *out = (int32_t)info->shape[1].constant;
    }
    return 0;
}

int tsr_chat_attach(tessera_model *m) {
    char *json;
    size_t size;
    char path[4096];
    if (tsr_resolve_inside(m->dir, "chat-config.json", path, sizeof path) == TESSERA_ERROR_IO) {
        tsr_clear_error();
        return 0; /* a plain executable: functions only */
    }
    int rc = tsr_read_file(&m->alloc, m->dir, "chat-config.json", MAX_CONFIG_BYTES, &json, &size);
    if (rc) return rc;
    cJSON *root = tsr_json_parse(json, size, "chat-config.json");
    tsr_free(&m->alloc, json);
    if (!root) return TESSERA_ERROR_FORMAT;
    tsr_chat_config *c = tsr_calloc(&m->alloc, 1, sizeof *c);
    if (!c) {
        cJSON_Delete(root);
        return TESSERA_ERROR_OUT_OF_MEMORY;
    }
    m->chat = c;
    tsr_recycler_init(&c->tokenizer_memory, &m->alloc);
    int64_t v;
    const cJSON *stops, *item;
    if ((rc = tsr_json_int(root, "context_length", "chat-config.json", 1, 1 << 24, &v))) goto done;
    c->context_length = (int32_t)v;
    /* Older builds prefill the whole context in one call. */
    c->prefill_chunk = c->context_length;
    if (cJSON_GetObjectItemCaseSensitive(root, "prefill_chunk")) {
        if ((rc = tsr_json_int(root, "prefill_chunk", "chat-config.json", 1, c->context_length, &v))) goto done;
        c->prefill_chunk = (int32_t)v;
    }
    if ((rc = tsr_json_array(root, "stop_token_ids", "chat-config.json", &stops))) goto done;
    cJSON_ArrayForEach(item, stops) {
        if (c->n_stop_ids == MAX_STOP_IDS) {
            rc = tsr_error(TESSERA_ERROR_FORMAT, "chat-config.json: more than %d stop tokens", MAX_STOP_IDS);
            goto done;
        }
        if ((rc = tsr_json_int_item(item, "chat-config.json: stop_token_ids", 0, INT32_MAX, &v))) goto done;
        c->stop_ids[c->n_stop_ids++] = (int32_t)v;
    }
    /* A model whose template did not reduce still loads (functions, tokenizer); chatting says why not. */
    rc = tsr_chat_format_parse(&m->alloc, root, &c->format);
    if (rc == 0) {
        c->has_format = true;
    } else if (rc == TESSERA_ERROR_UNSUPPORTED || rc == TESSERA_ERROR_VERSION) {
        snprintf(c->format_error, sizeof c->format_error, "%s", tessera_last_error());
        rc = 0;
    } else {
        goto done;
    }
    if ((rc = tsr_program_parse(root, &m->exe, &c->program))) goto done;
    if (!c->program.batched) {
        c->prefill = tsr_program_function(&c->program, &m->exe, TSR_ROLE_PREFILL);
        c->decode = tsr_program_function(&c->program, &m->exe, TSR_ROLE_DECODE);
        if ((rc = logits_width(&m->exe, &c->program, &c->vocab))) goto done;
        /* The executable plans prefill for at most prefill_chunk new positions (its symbol n) and
           context_length in all (total). */
        const tsr_function *f = &m->exe.functions[c->program.functions[TSR_ROLE_PREFILL]];
        for (int32_t s = 0; s < f->symbols.count; s++) {
            bool is_chunk = strcmp(f->symbols.names[s], "n") == 0;
            int32_t wanted = is_chunk ? c->prefill_chunk : c->context_length;
            if (f->upper_bounds[s] >= 0 && f->upper_bounds[s] < wanted) {
                rc = tsr_error(TESSERA_ERROR_FORMAT, "chat-config.json says the %s is %d tokens, but the executable "
                               "was compiled for %lld: recompile with %s %d", is_chunk ? "prefill chunk" : "context",
                               wanted, (long long)f->upper_bounds[s], is_chunk ? "--prefill-chunk" : "--context",
                               wanted);
                goto done;
            }
        }
    }
    if ((rc = tsr_read_file(&m->alloc, m->dir, "tokenizer.json", MAX_TOKENIZER_BYTES, &json, &size))) goto done;
    rc = tsr_tokenizer_load(&c->tokenizer_memory.alloc, json, size, &m->tokenizer);
    tsr_free(&m->alloc, json);
    if (rc) tsr_error_context(rc, "tokenizer.json");
done:
    cJSON_Delete(root);
    if (rc) tsr_error_context(rc, "%s", m->dir);
    return rc;
}

void tsr_free_sessions(tessera_model *m) {
    while (m->sessions) tessera_session_free(m->sessions);
}

void tsr_chat_detach(tessera_model *m) {
    if (m->tokenizer) tsr_tokenizer_free(m->tokenizer);
    m->tokenizer = NULL;
    if (m->chat) {
        tsr_recycler_release(&m->chat->tokenizer_memory);
        if (m->chat->has_format) tsr_chat_format_free(&m->chat->format);
        tsr_free(&m->alloc, m->chat);
        m->chat = NULL;
    }
}

int32_t tessera_model_context_length(const tessera_model *m) { return m && m->chat ? m->chat->context_length : 0; }
int32_t tessera_model_vocab_size(const tessera_model *m) { return m && m->chat ? m->chat->vocab : 0; }

static int need_tokenizer(const tessera_model *m) {
    if (!m) return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "the model is NULL");
    if (!m->tokenizer)
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "%s has no chat-config.json and tokenizer.json: it is not a chat "
                         "model (tessera compile MODEL.gguf writes them)", m->dir);
    return 0;
}

int32_t tessera_tokenize(const tessera_model *m, const char *text, size_t text_len, int32_t *tokens,
                         int32_t max_tokens, int add_special, int parse_special) {
    int rc = need_tokenizer(m);
    if (rc) return rc;
    if ((!text && text_len) || (!tokens && max_tokens > 0) || max_tokens < 0)
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "tessera_tokenize: NULL buffer or negative size");
    unsigned flags = (add_special ? TSR_TOKENIZE_ADD_SPECIAL : 0u) | (parse_special ? TSR_TOKENIZE_PARSE_SPECIAL : 0u);
    return tsr_tokenizer_encode(m->tokenizer, text ? text : "", text_len, flags, tokens, max_tokens);
}

int32_t tessera_detokenize(const tessera_model *m, const int32_t *tokens, int32_t n_tokens, char *buf,
                           int32_t buf_size) {
    int rc = need_tokenizer(m);
    if (rc) return rc;
    if ((!tokens && n_tokens) || n_tokens < 0 || (!buf && buf_size > 0) || buf_size < 0)
        return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "tessera_detokenize: NULL buffer or negative size");
    return tsr_tokenizer_decode(m->tokenizer, tokens, n_tokens, 1, buf, buf_size);
}

/* ---- sessions ------------------------------------------------------------------------------- */

tessera_session *tessera_session_new(tessera_model *m) {
    if (need_tokenizer(m)) return NULL;
    if (m->chat->program.batched) {
        tsr_error(TESSERA_ERROR_UNSUPPORTED, "this is a batched build (compiled with --max-batch): its functions "
                  "prefill_paged and decode_batch are called by a server's scheduler (tessera serve --max-batch); "
                  "a chat session needs a build compiled without --max-batch");
        return NULL;
    }
    tsr_alloc *a = &m->alloc;
    tessera_session *s = tsr_calloc(a, 1, sizeof *s);
    if (!s) return NULL;
    s->model = m;
    s->next = m->sessions;
    if (m->sessions) m->sessions->prev = s;
    m->sessions = s;
    int32_t context = m->chat->context_length;
    s->tokens = tsr_calloc(a, (size_t)context + 1, sizeof(int32_t));
    s->prompt = tsr_calloc(a, (size_t)context + 1, sizeof(int32_t));
    s->generated = tsr_calloc(a, (size_t)context + 1, sizeof(int32_t));
    /* Room for the reply's text: most tokens are a few bytes; a longer reply grows it once. */
    s->pieces_capacity = 64 * (context + 1);
    s->pieces = tsr_malloc(a, (size_t)s->pieces_capacity);
    tsr_chat_buffer_init(&s->text, a);
    if (!s->tokens || !s->prompt || !s->generated || !s->pieces || tsr_sampler_init(&s->sampler, a, m->chat->vocab)) {
        tessera_session_free(s);
        return NULL;
    }
    return s;
}

void tessera_session_reset(tessera_session *s) {
    if (!s) return;
    s->n_tokens = 0;
    tessera_model_reset_state(s->model);
}

void tessera_session_free(tessera_session *s) {
    if (!s) return;
    if (s->prev) s->prev->next = s->next;
    else s->model->sessions = s->next;
    if (s->next) s->next->prev = s->prev;
    tsr_alloc *a = &s->model->alloc;
    tsr_free(a, s->tokens);
    tsr_free(a, s->prompt);
    tsr_free(a, s->generated);
    tsr_free(a, s->pieces);
    tsr_chat_buffer_free(&s->text);
    tsr_sampler_free(&s->sampler);
    tsr_free(a, s);
}

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Runs prefill or decode over ids (the tokens after the cache's first total - n) and returns the logits. */
static int forward(tessera_session *s, const char *function, const int32_t *ids, int32_t n, int32_t total,
                   const float **logits) {
    tessera_value args[2];
    memset(args, 0, sizeof args);
    args[0].kind = TESSERA_VALUE_TENSOR;
    args[0].tensor.data = (void *)ids;
    args[0].tensor.dtype = TESSERA_INT32;
    args[0].tensor.ndim = 1;
    args[0].tensor.shape[0] = n;
    args[1].kind = TESSERA_VALUE_INT;
    args[1].value = total;
    const tessera_tensor *outputs;
    size_t n_outputs;
    int rc = tessera_model_call(s->model, function, args, 2, &outputs, &n_outputs);
    if (rc) return rc;
    *logits = outputs[0].data;
    return 0;
}

static bool is_stop(const tsr_chat_config *c, int32_t token) {
    for (int32_t i = 0; i < c->n_stop_ids; i++)
        if (c->stop_ids[i] == token) return true;
    return false;
}

/* Streams the reply's text that became complete UTF-8 with the latest token; 1 if the callback stops. */
static int stream(tessera_session *s, int32_t n_generated, int32_t *emitted, tessera_piece_callback cb, void *user) {
    const tsr_tokenizer *t = s->model->tokenizer;
    int32_t n = tsr_tokenizer_decode_stream(t, s->generated, n_generated, 1, s->pieces, s->pieces_capacity - 1);
    if (n < 0) return n;
    if (n >= s->pieces_capacity) {
        int32_t capacity = n * 2 + 64;
        char *grown = tsr_malloc(&s->model->alloc, (size_t)capacity);
        if (!grown) return TESSERA_ERROR_OUT_OF_MEMORY;
        tsr_free(&s->model->alloc, s->pieces);
        s->pieces = grown;
        s->pieces_capacity = capacity;
        n = tsr_tokenizer_decode_stream(t, s->generated, n_generated, 1, s->pieces, s->pieces_capacity - 1);
    }
    if (n <= *emitted) return 0;
    /* Hand out [emitted, n) as one NUL-terminated piece, restoring the byte after it. */
    char saved = s->pieces[n];
    s->pieces[n] = '\0';
    int stop = cb ? cb(s->pieces + *emitted, user) : 0;
    s->pieces[n] = saved;
    *emitted = n;
    return stop ? 1 : 0;
}

int tessera_chat_completion(tessera_session *s, const tessera_message *msgs, size_t n_msgs,
                            const tessera_sampling_params *sp, tessera_piece_callback cb, void *user,
                            tessera_usage *usage) {
    if (!s || (!msgs && n_msgs)) return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "tessera_chat_completion: NULL argument");
    tessera_sampling_params defaults = tessera_sampling_default_params();
    if (!sp) sp = &defaults;
    int rc = tsr_sampling_check(sp);
    if (rc) return rc;
    tessera_model *m = s->model;
    tsr_chat_config *c = m->chat;
    if (!c->has_format)
        return tsr_error(TESSERA_ERROR_UNSUPPORTED, "this model's chat template cannot be used by the native runtime: %s",
                         c->format_error);
    if (n_msgs == 0) return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "the conversation has no messages");
    if ((rc = tsr_chat_format_render(&c->format, msgs, n_msgs, &s->text))) return rc;
    int32_t context = c->context_length;
    int32_t n = tsr_tokenizer_encode(m->tokenizer, s->text.data, s->text.len,
                                     TSR_TOKENIZE_PARSE_SPECIAL | TSR_TOKENIZE_ADD_SPECIAL, s->prompt, context);
    if (n < 0) return n;
    if (n == 0) return tsr_error(TESSERA_ERROR_INVALID_ARGUMENT, "the conversation is empty once tokenized");
    if (n + 1 > context)
        return tsr_error(TESSERA_ERROR_CONTEXT_FULL, "the prompt has %d tokens; the context window is %d (with room "
                         "for one reply token): shorten the conversation or recompile with a larger --context", n, context);
    int32_t common = 0;
    while (common < s->n_tokens && common < n && s->tokens[common] == s->prompt[common]) common++;
    if (common > n - 1) common = n - 1; /* at least one token to compute logits from */
    double start = now_seconds();
    const float *logits = NULL;
    /* A prompt longer than a prefill chunk takes several calls, each after the last. */
    rc = 0;
    for (int32_t begin = common; begin < n && rc == 0; begin += c->prefill_chunk) {
        int32_t end = n - begin > c->prefill_chunk ? begin + c->prefill_chunk : n;
        rc = forward(s, c->prefill, s->prompt + begin, end - begin, end, &logits);
    }
    if (rc) {
        tessera_session_reset(s);
        return rc;
    }
    memcpy(s->tokens, s->prompt, (size_t)n * sizeof(int32_t));
    s->n_tokens = n;
    tsr_sampler_seed(&s->sampler, sp->seed);
    int32_t token = tsr_sampler_sample(&s->sampler, logits, s->tokens, s->n_tokens, sp);
    double prefill_seconds = now_seconds() - start;
    int32_t n_generated = 0, emitted = 0;
    start = now_seconds();
    while (!is_stop(c, token)) {
        s->generated[n_generated++] = token;
        int stop = stream(s, n_generated, &emitted, cb, user);
        if (stop < 0) return stop;
        if (stop || n_generated >= sp->max_tokens || s->n_tokens + 1 >= context) break;
        s->tokens[s->n_tokens++] = token;
        if ((rc = forward(s, c->decode, &token, 1, s->n_tokens, &logits))) {
            tessera_session_reset(s);
            return rc;
        }
        token = tsr_sampler_sample(&s->sampler, logits, s->tokens, s->n_tokens, sp);
    }
    double decode_seconds = now_seconds() - start;
    if (usage) {
        usage->prompt_tokens = n;
        usage->prefilled_tokens = n - common;
        usage->completion_tokens = n_generated;
        usage->prefill_tokens_per_s = prefill_seconds > 0 ? (n - common) / prefill_seconds : 0.0;
        usage->decode_tokens_per_s = decode_seconds > 0 && n_generated > 1 ? (n_generated - 1) / decode_seconds : 0.0;
    }
    return 0;
}
