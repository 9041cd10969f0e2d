/* tessera-run: chat with a compiled model from a terminal, as llama-cli does.
 *
 *   tessera-run DIR [--prompt TEXT] [--device NAME] [--cache-dir DIR] [--threads N] [--max-tokens N]
 *                   [--temperature T] [--top-p P] [--top-k K] [--repetition-penalty R] [--seed S] [--json]
 *
 * Without --prompt it is an interactive chat (an empty line or end of input ends it); the reply
 * streams to stdout and the speeds go to stderr. --json prints one JSON object per turn instead.
 * The device line (which device, and why: tessera_model_device) goes to stderr first, so that a run
 * on "auto" says where it ran. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera.h"

#define MAX_TURNS 512
#define MAX_LINE 65536

static void usage(FILE *to) {
    fprintf(to, "usage: tessera-run DIR [--prompt TEXT] [--device NAME] [--cache-dir DIR] [--threads N]\n"
                "                   [--max-tokens N] [--temperature T] [--top-p P] [--top-k K]\n"
                "                   [--repetition-penalty R] [--seed S] [--json]\n"
                "  --device: auto (default: the first device that runs the kernels, a GPU before the CPU),\n"
                "            cpu, vulkan, opencl, metal; vulkan:N for the N-th Vulkan device\n");
}

static int print_piece(const char *piece, void *user) {
    (void)user;
    fputs(piece, stdout);
    fflush(stdout);
    return 0;
}

/* Collects the reply (for --json and for the conversation's history). */
typedef struct reply {
    char *text;
    size_t len, cap;
    int echo;
} reply;

static int collect(const char *piece, void *user) {
    reply *r = user;
    size_t n = strlen(piece);
    if (r->len + n + 1 > r->cap) {
        size_t cap = (r->len + n + 1) * 2;
        char *grown = realloc(r->text, cap);
        if (!grown) return 1;
        r->text = grown;
        r->cap = cap;
    }
    memcpy(r->text + r->len, piece, n + 1);
    r->len += n;
    return r->echo ? print_piece(piece, NULL) : 0;
}

static void json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') printf("\\%c", ch);
        else if (ch == '\n') fputs("\\n", stdout);
        else if (ch < 0x20) printf("\\u%04x", ch);
        else putchar(ch);
    }
    putchar('"');
}

static int parse_number(const char *flag, const char *text, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || *end || end == text || v < lo || v > hi) {
        fprintf(stderr, "error: %s expects a number in [%g, %g], got '%s'\n", flag, lo, hi, text);
        return 1;
    }
    *out = v;
    return 0;
}

int main(int argc, char **argv) {
    const char *dir = NULL, *prompt = NULL;
    int as_json = 0;
    tessera_model_params mp = tessera_model_default_params();
    tessera_sampling_params sp = tessera_sampling_default_params();
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        double v;
        if (strcmp(arg, "--json") == 0) { as_json = 1; continue; }
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) { usage(stdout); return 0; }
        if (arg[0] == '-' && arg[1] == '-') {
            if (i + 1 >= argc) { fprintf(stderr, "error: %s needs a value\n", arg); usage(stderr); return 2; }
            const char *value = argv[++i];
            if (strcmp(arg, "--prompt") == 0) prompt = value;
            else if (strcmp(arg, "--device") == 0) mp.device = value; /* the library checks the name */
            else if (strcmp(arg, "--cache-dir") == 0) mp.cache_dir = value;
            else if (strcmp(arg, "--threads") == 0) { if (parse_number(arg, value, 0, 1024, &v)) return 2; mp.n_threads = (int32_t)v; }
            else if (strcmp(arg, "--max-tokens") == 0) { if (parse_number(arg, value, 1, 1 << 24, &v)) return 2; sp.max_tokens = (int32_t)v; }
            else if (strcmp(arg, "--temperature") == 0) { if (parse_number(arg, value, 0, 100, &v)) return 2; sp.temperature = (float)v; }
            else if (strcmp(arg, "--top-p") == 0) { if (parse_number(arg, value, 1e-6, 1, &v)) return 2; sp.top_p = (float)v; }
            else if (strcmp(arg, "--top-k") == 0) { if (parse_number(arg, value, 0, 1 << 24, &v)) return 2; sp.top_k = (int32_t)v; }
            else if (strcmp(arg, "--repetition-penalty") == 0) { if (parse_number(arg, value, 1e-6, 100, &v)) return 2; sp.repetition_penalty = (float)v; }
            else if (strcmp(arg, "--seed") == 0) { if (parse_number(arg, value, 0, 9.0e15, &v)) return 2; sp.seed = (uint64_t)v; }
            else { fprintf(stderr, "error: unknown option %s\n", arg); usage(stderr); return 2; }
            continue;
        }
        if (dir) { fprintf(stderr, "error: one model folder, got '%s' and '%s'\n", dir, arg); return 2; }
        dir = arg;
    }
    if (!dir) { usage(stderr); return 2; }
    tessera_model *model = tessera_model_load(dir, &mp);
    if (!model) { fprintf(stderr, "error: %s\n", tessera_last_error()); return 1; }
    fprintf(stderr, "device: %s\n", tessera_model_device(model));
    tessera_session *session = tessera_session_new(model);
    if (!session) { fprintf(stderr, "error: %s\n", tessera_last_error()); tessera_model_free(model); return 1; }
    int status = 0;
    tessera_message turns[MAX_TURNS];
    char *owned[MAX_TURNS];
    size_t n_turns = 0;
    static char line[MAX_LINE];
    if (!prompt && !as_json) fprintf(stderr, "Chat with the model; an empty line or Ctrl-D ends.\n");
    for (;;) {
        const char *text = prompt;
        if (!prompt) {
            if (!as_json) { fputs("> ", stderr); fflush(stderr); }
            if (!fgets(line, sizeof line, stdin)) break;
            line[strcspn(line, "\r\n")] = '\0';
            if (!line[0]) break;
            text = line;
        }
        if (n_turns + 2 > MAX_TURNS) { fprintf(stderr, "error: the conversation is too long for this tool\n"); status = 1; break; }
        owned[n_turns] = strdup(text);
        turns[n_turns] = (tessera_message){"user", owned[n_turns]};
        n_turns++;
        reply r = {NULL, 0, 0, !as_json};
        tessera_usage u;
        int rc = tessera_chat_completion(session, turns, n_turns, &sp, collect, &r, &u);
        if (rc) {
            fprintf(stderr, "%serror: %s\n", as_json ? "" : "\n", tessera_last_error());
            free(owned[--n_turns]);
            free(r.text);
            status = 1;
            if (prompt) break;
            continue;
        }
        if (as_json) {
            fputs("{\"reply\": ", stdout);
            json_string(r.text ? r.text : "");
            printf(", \"prompt_tokens\": %d, \"prefilled_tokens\": %d, \"completion_tokens\": %d, "
                   "\"prefill_tokens_per_s\": %.3f, \"decode_tokens_per_s\": %.3f}\n", u.prompt_tokens,
                   u.prefilled_tokens, u.completion_tokens, u.prefill_tokens_per_s, u.decode_tokens_per_s);
        } else {
            fprintf(stderr, "\n[prompt %d tokens (%d prefilled) at %.1f tok/s, %d generated at %.1f tok/s]\n",
                    u.prompt_tokens, u.prefilled_tokens, u.prefill_tokens_per_s, u.completion_tokens,
                    u.decode_tokens_per_s);
        }
        owned[n_turns] = r.text ? r.text : strdup("");
        turns[n_turns] = (tessera_message){"assistant", owned[n_turns]};
        n_turns++;
        if (prompt) break;
    }
    for (size_t i = 0; i < n_turns; i++) free(owned[i]);
    tessera_session_free(session);
    tessera_model_free(model);
    return status;
}
