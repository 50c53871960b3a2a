/* cmd_llm.c: `khlua llm ask`, one model call from the command line.  Streams
 * the reply to stdout as it arrives (or prints one JSON object with --json),
 * records the call in the store (llm_store.h) unless --no-store, optionally
 * writes the transcript (record + raw stream) to a directory too; replays
 * from either.  Keys come from the environment only and never reach stdout,
 * stderr, the store or the transcript. */
#include "commands.h"

#include "llm/llm.h"
#include "llm/llm_store.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void usage(FILE *f)
{
    fprintf(f,
        "usage: khlua llm ask [options] PROMPT [-- AGENT ARGV...]\n"
        "\n"
        "Sends PROMPT (\"-\": read it from stdin) to a model and streams the reply to\n"
        "stdout.  Calls are streamed, retried as the official SDKs do (429, 5xx, 529,\n"
        "never a quota 429), and time-limited.\n"
        "\n"
        "  --provider P        openai | openai-responses | anthropic | compat | command |\n"
        "                      replay (default: replay, the offline one)\n"
        "  --base-url URL      server base URL, e.g. http://127.0.0.1:8000/v1 (compat needs it)\n"
        "  --model M           model name (required for the HTTP providers)\n"
        "  --max-tokens N      output token limit\n"
        "  --system TEXT       a system message before the prompt\n"
        "  --temperature X     sampling temperature (omitted unless given)\n"
        "  --reasoning-effort E  minimal | low | medium | high\n"
        "  --max-retries N     retries after the first attempt (default 6)\n"
        "  --timeout S         limit for one attempt, in seconds (default 1800)\n"
        "  --replay-dir DIR    recorded replies for --provider replay (default\n"
        "                      $KHLUA_REPLAY_DIR; replay needs one of them or --replay-run)\n"
        "  --replay-run RUN    --provider replay answers from run RUN's recorded calls in\n"
        "                      the store (same prompt: same answer; else recorded order)\n"
        "  --store PATH        record the call there (default $KHLUA_STORE, else\n"
        "                      .khlua/store): an llm_call record, raw stream as a blob\n"
        "  --no-store          do not record the call (--replay-run still reads the store)\n"
        "  --run RUN           link the record to run RUN (which must be in the store)\n"
        "  --transcript-dir DIR  write the call's record (.json) and raw stream (.sse)\n"
        "                      there, named by the prompt's fingerprint (replayable)\n"
        "  --json              print one JSON object: text, usage, retries, latency,\n"
        "                      store_id (the llm_call record), ...\n"
        "  -- ARGV...          with --provider command: the agent command line, which\n"
        "                      gets the prompt on stdin in a fresh workspace\n"
        "\n"
        "Keys: OPENAI_API_KEY (openai, openai-responses), ANTHROPIC_API_KEY (anthropic),\n"
        "KHLUA_API_KEY (compat, optional).  Never on the command line.\n"
        "\n"
        "Exit 0 when the model answered, 1 when the call failed, 2 usage, 130 Ctrl-C.\n");
}

static void on_delta(void *ud, int64_t id, const char *kind, const char *s, size_t n)
{
    (void)id;
    int json = *(int *)ud;
    if (json)
        return;
    if (!strcmp(kind, "text")) {
        fwrite(s, 1, n, stdout);
        fflush(stdout);
    } else if (!strcmp(kind, "retry")) {
        fprintf(stderr, "\n[khlua llm: the stream failed part-way; retrying from the start]\n");
    }
}

static char *slurp_stdin(void)
{
    size_t cap = 65536, len = 0;
    char *b = malloc(cap);
    if (!b)
        return NULL;
    size_t n;
    while ((n = fread(b + len, 1, cap - len - 1, stdin)) > 0) {
        len += n;
        if (cap - len < 2) {
            char *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                return NULL;
            }
            b = nb;
            cap *= 2;
        }
    }
    b[len] = '\0';
    return b;
}

static int write_file(const char *path, const char *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(data, 1, n, f);
    int rc = fclose(f);
    return (w == n && rc == 0) ? 0 : -1;
}

static int save_transcript(const char *dir, const json_t *rec, const char *raw, size_t raw_len)
{
    if (mkdir(dir, 0777) < 0 && errno != EEXIST)
        return -1;
    const char *fp = json_string_value(json_object_get(rec, "fingerprint"));
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.json", dir, fp ? fp : "call");
    char *s = json_dumps(rec, JSON_INDENT(2) | JSON_SORT_KEYS);
    int rc = s ? write_file(path, s, strlen(s)) : -1;
    free(s);
    const char *d = json_string_value(json_object_get(rec, "dialect"));
    if (rc == 0 && d && strcmp(d, "none")) {
        snprintf(path, sizeof path, "%s/%s.sse", dir, fp ? fp : "call");
        rc = write_file(path, raw, raw_len);
    }
    return rc;
}

/* What `khlua llm ask` is asked: the options, the prompt as given ("-":
 * stdin) and where the agent command line starts (after "--"). */
typedef struct ask_args {
    const char *provider, *base, *model, *system, *prompt;
    const char *replay_dir, *tdir, *effort;
    const char *store_path, *run, *replay_run;
    int no_store;
    long max_tokens, max_retries;
    double temperature, timeout;
    int json, cmd_at;
} ask_args;

/* argv into a: -1 to go on, else the exit code of a usage error (2, said
 * on stderr). */
static int parse_ask(int argc, char **argv, ask_args *a)
{
    *a = (ask_args){.provider = "replay", .max_retries = -1, .temperature = -1, .cmd_at = -1};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define TAKE(name)                                                                           \
    if (!v) {                                                                                \
        fprintf(stderr, "khlua llm ask: %s needs a value\n", name);                          \
        return 2;                                                                            \
    }                                                                                        \
    i++
        if (!strcmp(o, "--")) {
            a->cmd_at = i + 1;
            break;
        } else if (!strcmp(o, "--json")) {
            a->json = 1;
        } else if (!strcmp(o, "--no-store")) {
            a->no_store = 1;
        } else if (!strcmp(o, "--store")) {
            TAKE(o);
            a->store_path = v;
        } else if (!strcmp(o, "--run")) {
            TAKE(o);
            a->run = v;
        } else if (!strcmp(o, "--replay-run")) {
            TAKE(o);
            a->replay_run = v;
        } else if (!strcmp(o, "--provider")) {
            TAKE(o);
            a->provider = v;
        } else if (!strcmp(o, "--base-url")) {
            TAKE(o);
            a->base = v;
        } else if (!strcmp(o, "--model")) {
            TAKE(o);
            a->model = v;
        } else if (!strcmp(o, "--system")) {
            TAKE(o);
            a->system = v;
        } else if (!strcmp(o, "--replay-dir")) {
            TAKE(o);
            a->replay_dir = v;
        } else if (!strcmp(o, "--transcript-dir")) {
            TAKE(o);
            a->tdir = v;
        } else if (!strcmp(o, "--reasoning-effort")) {
            TAKE(o);
            a->effort = v;
        } else if (!strcmp(o, "--max-tokens") || !strcmp(o, "--max-retries") ||
                   !strcmp(o, "--temperature") || !strcmp(o, "--timeout")) {
            TAKE(o);
            char *end;
            double d = strtod(v, &end);
            if (end == v || *end || d < 0) {
                fprintf(stderr, "khlua llm ask: %s wants a non-negative number, got '%s'\n", o, v);
                return 2;
            }
            if (!strcmp(o, "--max-tokens"))
                a->max_tokens = (long)d;
            else if (!strcmp(o, "--max-retries"))
                a->max_retries = (long)d;
            else if (!strcmp(o, "--temperature"))
                a->temperature = d;
            else
                a->timeout = d;
        } else if (o[0] == '-' && o[1]) {
            fprintf(stderr, "khlua llm ask: unknown option '%s'\n", o);
            usage(stderr);
            return 2;
        } else if (!a->prompt) {
            a->prompt = o;
        } else {
            fprintf(stderr, "khlua llm ask: one PROMPT only (quote it); extra '%s'\n", o);
            return 2;
        }
#undef TAKE
    }
    if (!a->prompt) {
        fprintf(stderr, "khlua llm ask: PROMPT is missing\n");
        usage(stderr);
        return 2;
    }
    if (!strcmp(a->provider, "command") && (a->cmd_at < 0 || a->cmd_at >= argc)) {
        fprintf(stderr, "khlua llm ask: --provider command needs the agent command line after "
                        "-- (e.g. -- claude -p)\n");
        return 2;
    }
    if (a->replay_run && strcmp(a->provider, "replay")) {
        fprintf(stderr, "khlua llm ask: --replay-run goes with --provider replay\n");
        return 2;
    }
    if (a->replay_run && a->replay_dir) {
        fprintf(stderr, "khlua llm ask: --replay-run or --replay-dir, not both\n");
        return 2;
    }
    if (a->no_store && a->run) {
        fprintf(stderr, "khlua llm ask: --no-store contradicts --run\n");
        return 2;
    }
    const char *env_dir = getenv("KHLUA_REPLAY_DIR");
    if (!a->replay_dir && env_dir && *env_dir)
        a->replay_dir = env_dir;
    if (!strcmp(a->provider, "replay") && !a->replay_run && !a->replay_dir) {
        fprintf(stderr, "khlua llm ask: --provider replay (the default) answers from recorded "
                        "replies: give --replay-dir DIR (or set KHLUA_REPLAY_DIR) or --replay-run "
                        "RUN, or choose a live --provider\n");
        return 2;
    }
    return -1;
}

/* The request kh_llm_submit takes for a, prompt its text. */
static json_t *ask_request(const ask_args *a, const char *prompt, int argc, char **argv)
{
    json_t *req = json_pack("{s:s, s:[]}", "provider", a->provider, "messages");
    json_t *msgs = json_object_get(req, "messages");
    if (a->system)
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content",
                                              a->system));
    json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", prompt));
    if (a->model)
        json_object_set_new(req, "model", json_string(a->model));
    if (a->base)
        json_object_set_new(req, "base_url", json_string(a->base));
    if (a->max_tokens)
        json_object_set_new(req, "max_tokens", json_integer(a->max_tokens));
    if (a->temperature >= 0)
        json_object_set_new(req, "temperature", json_real(a->temperature));
    if (a->effort)
        json_object_set_new(req, "reasoning_effort", json_string(a->effort));
    json_t *opts = json_object();
    if (a->max_retries >= 0)
        json_object_set_new(opts, "max_retries", json_integer(a->max_retries));
    if (a->timeout > 0)
        json_object_set_new(opts, "total_timeout", json_real(a->timeout));
    json_object_set_new(req, "options", opts);
    if (a->run)
        json_object_set_new(req, "run", json_string(a->run));
    if (a->replay_run) {
        json_object_set_new(req, "replay", json_pack("{s:b, s:s}", "store", 1, "run",
                                                     a->replay_run));
    } else if (!strcmp(a->provider, "replay")) {
        json_object_set_new(req, "replay", json_pack("{s:s}", "dir", a->replay_dir));
    }
    if (!strcmp(a->provider, "command")) {
        json_t *av = json_array();
        for (int i = a->cmd_at; i < argc; i++)
            json_array_append_new(av, json_string(argv[i]));
        json_object_set_new(req, "command", json_pack("{s:o}", "argv", av));
    }
    return req;
}

/* The call's record: --json's object on stdout, else the notes on stderr
 * after the reply streamed to stdout. */
static void print_reply(const json_t *rec, int json)
{
    int ok = json_is_true(json_object_get(rec, "ok"));
    if (json) {
        static const char *const keep[] = {
            "ok",  "provider", "model", "replay", "text", "reasoning", "finish_reason",
            "truncated", "usage", "retries", "attempts", "latency_s", "first_token_s",
            "request_id", "warnings", "error", "http_status", "replay_file", "command", "files",
            "replay_of", "replay_run", "store_id", "store_error",
        };
        json_t *o = json_object();
        for (size_t i = 0; i < KH_ARRAY_LEN(keep); i++) {
            json_t *v = json_object_get(rec, keep[i]);
            if (v)
                json_object_set(o, keep[i], v);
        }
        char *s = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS);
        if (s)
            puts(s);
        free(s);
        json_decref(o);
        return;
    }
    const char *t = json_string_value(json_object_get(rec, "text"));
    if (t && *t && t[strlen(t) - 1] != '\n')
        putchar('\n');
    fflush(stdout); /* the reply before the notes on stderr */
    const char *ws = json_string_value(
        json_object_get(json_object_get(rec, "command"), "workspace"));
    if (ws)
        fprintf(stderr, "[khlua llm: the agent's workspace is %s]\n", ws);
    const char *from = json_string_value(json_object_get(rec, "replay_of"));
    if (json_is_true(json_object_get(rec, "replay")) && from)
        fprintf(stderr, "[khlua llm: replayed from %s of %s in the store, not a live model]\n",
                from, json_string_value(json_object_get(rec, "replay_run")));
    else if (json_is_true(json_object_get(rec, "replay")) && ok)
        fprintf(stderr, "[khlua llm: replayed from %s, not a live model]\n",
                json_string_value(json_object_get(rec, "replay_file")));
    if (!ok)
        fprintf(stderr, "khlua llm: %s\n",
                json_string_value(json_object_get(json_object_get(rec, "error"), "message")));
}

static int ask(kh_engine *e, int argc, char **argv)
{
    ask_args aa;
    int prc = parse_ask(argc, argv, &aa);
    if (prc >= 0)
        return prc;
    const char *prompt = aa.prompt;
    char *stdin_prompt = NULL;
    if (!strcmp(prompt, "-")) {
        stdin_prompt = slurp_stdin();
        if (!stdin_prompt) {
            fprintf(stderr, "khlua llm ask: cannot read the prompt from stdin\n");
            return 1;
        }
        prompt = stdin_prompt;
    }
    json_t *req = ask_request(&aa, prompt, argc, argv);

    kh_err err;
    /* The store opens before the call: a call that cannot be recorded is
     * not worth paying for.  --no-store with --replay-run only reads it. */
    kh_store *store = NULL;
    kh_llm_recorder recorder;
    memset(&recorder, 0, sizeof recorder);
    if (!aa.no_store || aa.replay_run) {
        kh_store_opts so = {.readonly = aa.no_store};
        const char *sp = aa.store_path ? aa.store_path : kh_engine_store_path(e);
        if (kh_store_open(sp, &so, &store, &err)) {
            json_decref(req);
            free(stdin_prompt);
            fprintf(stderr, "khlua llm ask: the store %s: %s%s\n", sp, err.msg,
                    aa.no_store ? "" : " (--no-store: do not record the call)");
            return 1;
        }
    }
    kh_llm *c = kh_llm_new(e, &err);
    if (!c) {
        json_decref(req);
        free(stdin_prompt);
        kh_store_close(store);
        fprintf(stderr, "khlua llm: %s\n", err.msg);
        return 1;
    }
    kh_llm_set_delta(c, on_delta, &aa.json);
    kh_llm_set_store(c, store);
    if (!aa.no_store) {
        recorder.store = store;
        kh_llm_set_sink(c, kh_llm_store_sink, &recorder);
    }
    int64_t id;
    kh_status st = kh_llm_submit(c, req, &id, &err);
    json_decref(req);
    free(stdin_prompt);
    if (st != KH_OK) {
        fprintf(stderr, "khlua llm ask: %s\n", err.msg);
        kh_llm_free(c);
        kh_store_close(store);
        return st == KH_EINVAL ? 2 : 1;
    }
    kh_llm_result *rs = NULL;
    size_t n = 0;
    while (n == 0) {
        st = kh_llm_poll(c, 0.25, &rs, &n, &err);
        if (st == KH_EINTR) {
            fprintf(stderr, "\nkhlua llm: interrupted\n");
            kh_llm_free(c);
            kh_store_close(store);
            return 130;
        }
        if (st != KH_OK) {
            fprintf(stderr, "khlua llm: %s\n", err.msg);
            kh_llm_free(c);
            kh_store_close(store);
            return 1;
        }
    }
    json_t *rec = rs[0].record;
    int rc = json_is_true(json_object_get(rec, "ok")) ? 0 : 1;
    const char *serr = json_string_value(json_object_get(rec, "store_error"));
    if (serr) {
        fprintf(stderr, "khlua llm: the call was not recorded in the store %s: %s\n",
                kh_store_path(store), serr);
        rc = 1;
    }
    if (aa.tdir && save_transcript(aa.tdir, rec, rs[0].raw, rs[0].raw_len) != 0) {
        fprintf(stderr, "khlua llm: cannot write the transcript to %s: %s\n", aa.tdir,
                strerror(errno));
        rc = 1;
    }
    print_reply(rec, aa.json);
    for (size_t i = 0; i < n; i++) {
        json_decref(rs[i].record);
        free(rs[i].raw);
    }
    free(rs);
    kh_llm_free(c);
    kh_store_close(store);
    return rc;
}

int kh_cmd_llm(kh_engine *e, int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "ask")) {
        fprintf(stderr, "khlua llm: unknown subcommand '%s' (only: ask)\n", argv[1]);
        return 2;
    }
    for (int i = 2; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
    return ask(e, argc - 1, argv + 1);
}
