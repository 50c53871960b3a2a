/* llm_offline.c: the two providers that need no network.  "replay" answers
 * from recorded replies in a directory or from a run's llm_call records in
 * the store (deterministically: by the request's fingerprint when a reply
 * carries it, else in file-name / recorded order per client);
 * "command" runs an agent command line with the prompt on stdin in a scratch
 * workspace under a time limit, watched by the client's poll loop (so several
 * run at once beside HTTP calls), and records its output and the files it
 * wrote.  Both produce the same record shape as the HTTP providers. */
#include "llm/llm_offline.h"

#include "llm/llm_wire.h"

#include "core/proc.h"
#include "store/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define FILE_CONTENT_MAX ((size_t)1 << 20)
#define WALK_MAX_FILES 500

static char *read_file(const char *path, size_t max, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    llm_buf b = {0};
    char tmp[65536];
    size_t n;
    llm_buf_add(&b, "", 0);
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0) {
        if (b.len + n > max || llm_buf_add(&b, tmp, n)) {
            fclose(f);
            llm_buf_free(&b);
            return NULL;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (bad || !b.p) {
        llm_buf_free(&b);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

static void finish_fail(llm_job *j, const char *kind, kh_status code, const char *msg)
{
    json_t *r = llm_record_base(j);
    json_object_set_new(r, "ok", json_false());
    json_object_set_new(r, "text", json_string(""));
    json_object_set_new(r, "error", llm_error_json(kind, code, msg, 0, NULL));
    llm_job_finish(j, r);
}

/* The prompt an agent command line gets: every message's text, in order. */
static char *prompt_text(const json_t *req)
{
    llm_buf b = {0};
    llm_buf_add(&b, "", 0);
    size_t i, k;
    json_t *m, *p;
    json_array_foreach(json_object_get(req, "messages"), i, m) {
        if (b.len)
            llm_buf_add(&b, "\n\n", 2);
        json_t *c = json_object_get(m, "content");
        if (json_is_string(c)) {
            llm_buf_add(&b, json_string_value(c), json_string_length(c));
            continue;
        }
        json_array_foreach(c, k, p) {
            const json_t *t = json_is_string(p) ? p : json_object_get(p, "text");
            if (json_is_string(t))
                llm_buf_add(&b, json_string_value(t), json_string_length(t));
        }
    }
    return b.p;
}

/* ---- replay -------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int has_suffix(const char *s, const char *suf)
{
    size_t n = strlen(s), k = strlen(suf);
    return n > k && !strcmp(s + n - k, suf);
}

/* Parse a recorded raw stream of a dialect into j->st, through the code a
 * live stream takes (so its text reaches the delta hook the same way).  A
 * server that answered with one JSON object was recorded as that object.
 * 0 ok; -1 with msg. */
static int reparse(llm_job *j, int dialect, const char *data, size_t len, const char *what,
                   char *msg, size_t cap)
{
    llm_stream_ctx x = {&j->st, dialect, j};
    kh_sse *p = kh_sse_new(llm_wire_dispatch, &x, 0);
    kh_err err;
    int ok = p && kh_sse_feed(p, data, len, &err) == KH_OK && j->st.terminal;
    kh_sse_free(p);
    if (ok)
        return 0;
    llm_stream_reset(&j->st);
    if (llm_wire_parse_whole(dialect, data, len, &j->st) == 0) {
        llm_job_delta(j, "text", j->st.text.p ? j->st.text.p : "", j->st.text.len);
        return 0;
    }
    snprintf(msg, cap, "%s: the recorded stream did not parse to its end", what);
    return -1;
}

static int dialect_of(const char *name)
{
    for (int k = 0; name && k < D_NONE; k++)
        if (!strcmp(name, llm_dialect_names[k]))
            return k;
    return D_NONE;
}

/* Finish a replay from j->st: takes usage (or NULL), data (the recorded raw
 * bytes, malloc'ed, becomes the record's raw) and extra (fields the record
 * lacks: where the answer came from). */
static void replay_finish(llm_job *j, json_t *usage, char *data, size_t len, int dialect,
                          json_t *extra)
{
    if (!usage)
        usage = llm_wire_usage(D_NONE, NULL);
    json_t *r = llm_record_base(j);
    json_object_set_new(r, "ok", json_true());
    json_object_update_missing(r, extra);
    json_decref(extra);
    json_object_set_new(r, "recorded_dialect", json_string(llm_dialect_names[dialect]));
    char *t = kh_utf8_sanitize(j->st.text.p ? j->st.text.p : "", j->st.text.len, NULL);
    char *rs = kh_utf8_sanitize(j->st.reasoning.p ? j->st.reasoning.p : "", j->st.reasoning.len,
                                NULL);
    json_object_set_new(r, "text", json_string(t ? t : ""));
    json_object_set_new(r, "reasoning", json_string(rs ? rs : ""));
    free(t);
    free(rs);
    json_object_set_new(r, "finish_reason", json_string(j->st.finish[0] ? j->st.finish : "stop"));
    const char *f = j->st.finish;
    json_object_set_new(r, "truncated", json_boolean(!strcmp(f, "length") ||
                                                     !strcmp(f, "max_tokens") ||
                                                     !strcmp(f, "max_output_tokens")));
    json_object_set_new(r, "usage", usage);
    json_object_set_new(r, "first_token_s", json_real(0));
    llm_buf_free(&j->raw);
    j->raw.p = data;
    j->raw.len = len;
    j->raw.cap = len + 1;
    llm_job_finish(j, r);
}

/* Take text, reasoning, finish reason and usage from a recorded record (a
 * reply without a raw stream: a .json file, a command's output). */
static json_t *take_recorded_text(llm_job *j, const json_t *rec, const char *t)
{
    llm_buf_add(&j->st.text, t, strlen(t));
    llm_job_delta(j, "text", t, strlen(t));
    const char *rs = json_string_value(json_object_get(rec, "reasoning"));
    if (rs)
        llm_buf_add(&j->st.reasoning, rs, strlen(rs));
    const char *f = json_string_value(json_object_get(rec, "finish_reason"));
    snprintf(j->st.finish, sizeof j->st.finish, "%s", f ? f : "stop");
    json_t *u = json_object_get(rec, "usage");
    return json_is_object(u) ? json_deep_copy(u) : NULL;
}

/* ---- replay from the store ------------------------------------------------ */

struct load_arg {
    const char *run;
    json_t *out;
};

/* The run's successful live calls, oldest first: [{id, fingerprint}]. */
static kh_status load_cb(kh_store_txn *tx, void *p, kh_err *err)
{
    struct load_arg *a = p;
    kh_store_filter q = {.type = "llm_call", .run = a->run};
    json_t *recs;
    if (kh_store_txn_query(tx, &q, 0, &recs, err))
        return err->code;
    a->out = json_array();
    for (size_t i = json_array_size(recs); i-- > 0;) { /* the query is newest first */
        const json_t *r = json_array_get(recs, i);
        if (!json_is_true(json_object_get(r, "ok")) || json_is_true(json_object_get(r, "replay")))
            continue;
        json_array_append_new(a->out, json_pack("{s:O, s:O?}", "id", json_object_get(r, "id"),
                                                "fingerprint",
                                                json_object_get(r, "fingerprint")));
    }
    json_decref(recs);
    return a->out ? KH_OK : kh_err_set(err, KH_ENOMEM, "out of memory");
}

struct fetch_arg {
    const char *id;
    json_t *rec;
    char *raw;
    size_t len;
};

static kh_status fetch_cb(kh_store_txn *tx, void *p, kh_err *err)
{
    struct fetch_arg *a = p;
    if (kh_store_txn_get(tx, a->id, &a->rec, err))
        return err->code;
    const char *hx = json_string_value(json_object_get(a->rec, "response_blob"));
    if (!hx)
        return KH_OK;
    kh_hash h;
    if (kh_hash_parse(hx, &h, err) || kh_store_txn_blob_size(tx, &h, &a->len, err))
        return err->code;
    a->raw = malloc(a->len + 1);
    if (!a->raw)
        return kh_err_set(err, KH_ENOMEM, "out of memory reading a %zu-byte stream", a->len);
    if (kh_store_txn_read_blob(tx, &h, a->raw, a->len, err))
        return err->code;
    a->raw[a->len] = '\0';
    return KH_OK;
}

static void replay_store(kh_llm *c, llm_job *j, const char *run)
{
    char msg[2048];
    kh_store *s = llm_client_store(c);
    if (!s) {
        finish_fail(j, "config", KH_ESTATE,
                    "replay from the store needs a store: kh.llm.record_to(db) in Lua, --store "
                    "PATH (or the default store) with khlua llm ask");
        return;
    }
    json_t *runs = llm_client_replay_runs(c);
    json_t *calls = json_object_get(runs, run);
    kh_err err;
    if (!calls) {
        struct load_arg a = {run, NULL};
        if (!runs || kh_store_view(s, load_cb, &a, &err)) {
            json_decref(a.out);
            snprintf(msg, sizeof msg, "replay from run %s: %s", run,
                     runs ? err.msg : "out of memory");
            finish_fail(j, "replay", runs ? err.code : KH_ENOMEM, msg);
            return;
        }
        json_object_set_new(runs, run, a.out);
        calls = a.out;
    }
    size_t n = json_array_size(calls), m = 0, i;
    json_t *v;
    if (!n) {
        snprintf(msg, sizeof msg, "run %s has no successful live model calls in the store %s",
                 run, kh_store_path(s));
        finish_fail(j, "replay", KH_ENOTFOUND, msg);
        return;
    }
    json_array_foreach(calls, i, v) {
        const char *fp = json_string_value(json_object_get(v, "fingerprint"));
        m += fp && !strcmp(fp, j->fingerprint);
    }
    /* The counters are keyed like directories; \001 keeps them apart. */
    char key[4600];
    const char *pick = NULL;
    if (m) {
        snprintf(key, sizeof key, "\001%s\001%s\001%s", kh_store_path(s), run, j->fingerprint);
        size_t k = (size_t)llm_replay_next(c, key) % m;
        json_array_foreach(calls, i, v) {
            const char *fp = json_string_value(json_object_get(v, "fingerprint"));
            if (fp && !strcmp(fp, j->fingerprint) && k-- == 0) {
                pick = json_string_value(json_object_get(v, "id"));
                break;
            }
        }
    } else {
        snprintf(key, sizeof key, "\001%s\001%s", kh_store_path(s), run);
        pick = json_string_value(
            json_object_get(json_array_get(calls, (size_t)llm_replay_next(c, key) % n), "id"));
    }
    struct fetch_arg a = {pick, NULL, NULL, 0};
    if (!pick || kh_store_view(s, fetch_cb, &a, &err)) {
        snprintf(msg, sizeof msg, "replay from run %s: %s", run,
                 pick ? err.msg : "a cached call has no id");
        finish_fail(j, "replay", pick ? err.code : KH_ECORRUPT, msg);
        json_decref(a.rec);
        free(a.raw);
        return;
    }
    int dialect = dialect_of(json_string_value(json_object_get(a.rec, "dialect")));
    json_t *usage = NULL;
    if (dialect != D_NONE && a.raw) {
        if (reparse(j, dialect, a.raw, a.len, pick, msg, sizeof msg)) {
            json_decref(a.rec);
            free(a.raw);
            finish_fail(j, "replay", KH_EPARSE, msg);
            return;
        }
        usage = llm_wire_usage(dialect, j->st.usage_raw);
    } else {
        const char *t = json_string_value(json_object_get(a.rec, "text"));
        usage = take_recorded_text(j, a.rec, t ? t : "");
    }
    json_t *extra = json_pack("{s:s, s:s}", "replay_of", pick, "replay_run", run);
    json_t *model = json_object_get(a.rec, "model");
    if (json_is_string(model))
        json_object_set(extra, "model", model);
    char *raw = a.raw ? a.raw : kh_strdup("");
    replay_finish(j, usage, raw, a.raw ? a.len : 0, dialect, extra);
    json_decref(a.rec);
}

/* ---- replay from a directory ---------------------------------------------- */

static void replay_run(kh_llm *c, llm_job *j)
{
    const json_t *rp = json_object_get(j->req, "replay");
    const char *run = json_string_value(json_object_get(rp, "run"));
    if (json_is_true(json_object_get(rp, "store")) && run) {
        replay_store(c, j, run);
        return;
    }
    const char *dir = json_string_value(json_object_get(rp, "dir"));
    char msg[16384];
    if (!dir) {
        finish_fail(j, "config", KH_EINVAL, "provider replay needs request.replay.dir");
        return;
    }
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(msg, sizeof msg, "replay directory %s: %s", dir, strerror(errno));
        finish_fail(j, "replay", KH_ENOTFOUND, msg);
        return;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    char pick[4096] = "";
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || !(has_suffix(de->d_name, ".json") ||
                                      has_suffix(de->d_name, ".txt")))
            continue;
        if (!strncmp(de->d_name, j->fingerprint, 16) && de->d_name[16] == '.')
            snprintf(pick, sizeof pick, "%s", de->d_name);
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn)
                break;
            names = nn;
        }
        names[n] = kh_strdup(de->d_name);
        if (names[n])
            n++;
    }
    closedir(d);
    if (!pick[0] && n) {
        /* replay.index (1-based, the k-th call of a run): that reply, so a
         * resumed run continues where the stopped one was; else the next one
         * this process has not served from dir */
        qsort(names, n, sizeof *names, cmp_str);
        json_int_t k = json_integer_value(json_object_get(rp, "index"));
        size_t at = k > 0 ? (size_t)(k - 1) : (size_t)llm_replay_next(c, dir);
        snprintf(pick, sizeof pick, "%s", names[at % n]);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (!pick[0]) {
        snprintf(msg, sizeof msg, "no recorded replies (*.json, *.txt) in %s", dir);
        finish_fail(j, "replay", KH_ENOTFOUND, msg);
        return;
    }
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, pick);
    size_t len = 0;
    char *data = read_file(path, (size_t)64 << 20, &len);
    if (!data) {
        snprintf(msg, sizeof msg, "cannot read %s", path);
        finish_fail(j, "replay", KH_EIO, msg);
        return;
    }
    json_t *usage = NULL;
    int dialect = D_NONE;
    if (has_suffix(pick, ".json")) {
        json_error_t je;
        json_t *rec = json_loadb(data, len, 0, &je);
        if (!json_is_object(rec)) {
            snprintf(msg, sizeof msg, "%s: not a JSON object (line %d: %s)", path, je.line, je.text);
            json_decref(rec);
            free(data);
            finish_fail(j, "replay", KH_EPARSE, msg);
            return;
        }
        dialect = dialect_of(json_string_value(json_object_get(rec, "dialect")));
        /* A recorded raw stream next to the record is parsed again, through
         * the same code a live stream takes. */
        char sse_path[8300];
        snprintf(sse_path, sizeof sse_path, "%.*s.sse", (int)(strlen(path) - 5), path);
        size_t slen = 0;
        char *sse = dialect != D_NONE ? read_file(sse_path, (size_t)256 << 20, &slen) : NULL;
        if (sse) {
            if (reparse(j, dialect, sse, slen, sse_path, msg, sizeof msg)) {
                free(sse);
                free(data);
                json_decref(rec);
                finish_fail(j, "replay", KH_EPARSE, msg);
                return;
            }
            usage = llm_wire_usage(dialect, j->st.usage_raw);
            free(data);
            data = sse;
            len = slen;
        } else {
            const char *t = json_string_value(json_object_get(rec, "text"));
            if (!t) {
                snprintf(msg, sizeof msg, "%s: a replay record needs a \"text\" string", path);
                free(data);
                json_decref(rec);
                finish_fail(j, "replay", KH_EPARSE, msg);
                return;
            }
            usage = take_recorded_text(j, rec, t);
        }
        json_decref(rec);
    } else {
        llm_buf_add(&j->st.text, data, len);
        llm_job_delta(j, "text", data, len);
        snprintf(j->st.finish, sizeof j->st.finish, "stop");
    }
    replay_finish(j, usage, data, len, dialect, json_pack("{s:s}", "replay_file", path));
}

/* ---- command ---------------------------------------------------------------
 * The agent runs as a child in its own process group (so a deadline or a
 * cancel kills whatever it started), stdin from a prompt file, stdout and
 * stderr into one non-blocking pipe that the poll loop watches beside the
 * HTTP transfers: several agents can run at once. */

/* Files under root (relative paths) with their size and mtime. */
static void walk(const char *root, const char *rel, json_t *out, int depth)
{
    if (depth > 16 || json_object_size(out) >= WALK_MAX_FILES)
        return;
    char path[8192];
    snprintf(path, sizeof path, "%s%s%s", root, *rel ? "/" : "", rel);
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) && json_object_size(out) < WALK_MAX_FILES) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") || !strcmp(de->d_name, ".git"))
            continue;
        char r2[4096], p2[8192];
        snprintf(r2, sizeof r2, "%s%s%s", rel, *rel ? "/" : "", de->d_name);
        snprintf(p2, sizeof p2, "%s/%s", root, r2);
        struct stat st;
        if (lstat(p2, &st) < 0)
            continue;
        if (S_ISDIR(st.st_mode))
            walk(root, r2, out, depth + 1);
        else if (S_ISREG(st.st_mode))
            json_object_set_new(out, r2, json_pack("{s:I, s:I}", "size", (json_int_t)st.st_size,
                                                   "mtime_ns",
                                                   (json_int_t)st.st_mtim.tv_sec * 1000000000 +
                                                       st.st_mtim.tv_nsec));
    }
    closedir(d);
}

static void command_start(llm_job *j)
{
    const json_t *cmd = json_object_get(j->req, "command");
    const json_t *av = json_object_get(cmd, "argv");
    char msg[16384];
    if (!json_is_object(cmd) || !json_is_array(av) || json_array_size(av) == 0) {
        finish_fail(j, "config", KH_EINVAL,
                    "provider command needs request.command.argv, a non-empty array of strings");
        return;
    }
    j->cmd_timeout = 600;
    json_t *tv = json_object_get(cmd, "timeout");
    if (tv) {
        if (!json_is_number(tv) || json_number_value(tv) <= 0) {
            finish_fail(j, "config", KH_EINVAL, "request.command.timeout must be a positive number");
            return;
        }
        j->cmd_timeout = json_number_value(tv);
    }
    j->cmd_max = (size_t)16 << 20;
    json_t *mo = json_object_get(cmd, "max_output");
    if (json_is_integer(mo) && json_integer_value(mo) > 0)
        j->cmd_max = (size_t)json_integer_value(mo);
    size_t argc = json_array_size(av);
    for (size_t i = 0; i < argc; i++)
        if (!json_is_string(json_array_get(av, i))) {
            finish_fail(j, "config", KH_EINVAL, "request.command.argv must hold only strings");
            return;
        }
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = "/tmp";
    char ws[4096];
    const char *given = json_string_value(json_object_get(cmd, "workspace"));
    if (given) {
        struct stat st;
        if (stat(given, &st) < 0 || !S_ISDIR(st.st_mode)) {
            snprintf(msg, sizeof msg, "request.command.workspace %s is not a directory", given);
            finish_fail(j, "config", KH_EINVAL, msg);
            return;
        }
        snprintf(ws, sizeof ws, "%s", given);
    } else {
        snprintf(ws, sizeof ws, "%s/khlua-agent-XXXXXX", tmp);
        if (!mkdtemp(ws)) {
            snprintf(msg, sizeof msg, "cannot make a workspace under %s: %s", tmp, strerror(errno));
            finish_fail(j, "command", KH_EIO, msg);
            return;
        }
    }
    j->cmd_ws = kh_strdup(ws);
    j->cmd_own_ws = !given;
    char pp[4096];
    snprintf(pp, sizeof pp, "%s/khlua-prompt-XXXXXX", tmp);
    int fd = mkstemp(pp);
    char *prompt = prompt_text(j->req);
    size_t plen = prompt ? strlen(prompt) : 0;
    if (fd < 0 || !prompt || !j->cmd_ws || write(fd, prompt, plen) != (ssize_t)plen) {
        snprintf(msg, sizeof msg, "cannot write the prompt file %s: %s", pp, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(pp);
        }
        free(prompt);
        finish_fail(j, "command", KH_EIO, msg);
        return;
    }
    close(fd);
    free(prompt);
    j->cmd_prompt = kh_strdup(pp);
    j->cmd_before = json_object();
    walk(ws, "", j->cmd_before, 0);

    char **argv = calloc(argc + 1, sizeof *argv);
    int fds[2] = {-1, -1}, efd[2] = {-1, -1};
    if (!argv || pipe2(fds, O_CLOEXEC) < 0 || pipe2(efd, O_CLOEXEC) < 0) {
        snprintf(msg, sizeof msg, "cannot start the agent: %s", strerror(errno));
        free(argv);
        for (int k = 0; k < 2; k++) {
            if (fds[k] >= 0)
                close(fds[k]);
            if (efd[k] >= 0)
                close(efd[k]);
        }
        finish_fail(j, "command", KH_EIO, msg);
        return;
    }
    for (size_t i = 0; i < argc; i++)
        argv[i] = (char *)json_string_value(json_array_get(av, i));
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        int in = open(pp, O_RDONLY);
        if (in < 0 || dup2(in, 0) < 0 || dup2(fds[1], 1) < 0 || dup2(fds[1], 2) < 0 ||
            chdir(ws) < 0) {
            int e = errno;
            if (write(efd[1], &e, sizeof e) < 0) {
            }
            _exit(126);
        }
        signal(SIGPIPE, SIG_DFL);
        execvp(argv[0], argv);
        int e = errno;
        if (write(efd[1], &e, sizeof e) < 0) {
        }
        _exit(127);
    }
    free(argv);
    close(fds[1]);
    close(efd[1]);
    if (pid < 0) {
        snprintf(msg, sizeof msg, "fork: %s", strerror(errno));
        close(fds[0]);
        close(efd[0]);
        finish_fail(j, "command", KH_EIO, msg);
        return;
    }
    setpgid(pid, pid); /* also here: no race with the child's own call */
    int child_errno = 0;
    ssize_t n = read(efd[0], &child_errno, sizeof child_errno); /* EOF once exec succeeded */
    close(efd[0]);
    if (n == (ssize_t)sizeof child_errno) {
        close(fds[0]);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
        snprintf(msg, sizeof msg, "cannot run agent %s: %s",
                 json_string_value(json_array_get(av, 0)), strerror(child_errno));
        finish_fail(j, "command", KH_ENOTFOUND, msg);
        return;
    }
    fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
    j->cmd_pid = pid;
    j->cmd_fd = fds[0];
    j->cmd_deadline = kh_now() + j->cmd_timeout;
    j->queued = 0;
}

int llm_command_fds(kh_llm *c, struct curl_waitfd *fds, int max)
{
    int n = 0;
    for (llm_job *j = llm_jobs(c); j && n < max; j = j->next)
        if (j->cmd_pid > 0 && j->cmd_fd >= 0) {
            fds[n].fd = j->cmd_fd;
            fds[n].events = CURL_WAIT_POLLIN;
            fds[n].revents = 0;
            n++;
        }
    return n;
}

void llm_command_kill(llm_job *j)
{
    if (j->cmd_pid > 0) {
        kill(-j->cmd_pid, SIGKILL);
        kill(j->cmd_pid, SIGKILL);
        while (waitpid(j->cmd_pid, NULL, 0) < 0 && errno == EINTR) {
        }
        j->cmd_pid = 0;
    }
    if (j->cmd_fd >= 0) {
        close(j->cmd_fd);
        j->cmd_fd = -1;
    }
    if (j->cmd_prompt) {
        unlink(j->cmd_prompt);
        free(j->cmd_prompt);
        j->cmd_prompt = NULL;
    }
    if (j->cmd_ws && j->cmd_own_ws)
        rmdir(j->cmd_ws); /* only succeeds when the agent never wrote anything */
    free(j->cmd_ws);
    j->cmd_ws = NULL;
    json_decref(j->cmd_before);
    j->cmd_before = NULL;
}

static void command_finish(llm_job *j, int status)
{
    json_t *after = json_object(), *files = json_array();
    walk(j->cmd_ws, "", after, 0);
    const char *k;
    json_t *v;
    json_object_foreach(after, k, v) {
        if (json_equal(v, json_object_get(j->cmd_before, k)))
            continue; /* there before and untouched */
        char p[8192];
        snprintf(p, sizeof p, "%s/%s", j->cmd_ws, k);
        json_t *f = json_pack("{s:s, s:O}", "path", k, "size", json_object_get(v, "size"));
        size_t len = 0;
        char *data = json_integer_value(json_object_get(v, "size")) <= (json_int_t)FILE_CONTENT_MAX
                         ? read_file(p, FILE_CONTENT_MAX, &len) : NULL;
        if (data) {
            char *s = kh_utf8_sanitize(data, len, NULL);
            json_object_set_new(f, "content", json_string(s ? s : ""));
            free(s);
            free(data);
        }
        json_array_append_new(files, f);
    }
    json_decref(after);
    kh_child_result res;
    memset(&res, 0, sizeof res);
    res.timed_out = j->cmd_timed_out;
    res.seconds = kh_now() - j->t_attempt;
    if (WIFEXITED(status)) {
        res.exited = 1;
        res.exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
        res.signaled = 1;
        res.signal = WTERMSIG(status);
    }
    char how[128];
    kh_child_describe(&res, how, sizeof how);
    int ok = res.exited && res.exit_code == 0 && !res.timed_out;
    char *text = kh_utf8_sanitize(j->raw.p ? j->raw.p : "", j->raw.len, NULL);
    const json_t *av = json_object_get(json_object_get(j->req, "command"), "argv");
    json_t *r = llm_record_base(j);
    json_object_set_new(r, "ok", json_boolean(ok));
    json_object_set_new(r, "text", json_string(text ? text : ""));
    json_object_set_new(r, "reasoning", json_string(""));
    json_object_set_new(r, "finish_reason", json_string(ok ? "stop" : "error"));
    json_object_set_new(r, "truncated", json_boolean(j->cmd_truncated));
    json_object_set_new(r, "usage", llm_wire_usage(D_NONE, NULL));
    json_object_set_new(r, "first_token_s", j->st.t_first ? json_real(j->st.t_first - j->t_attempt)
                                                          : json_null());
    json_object_set_new(r, "command", json_pack("{s:O, s:s, s:s, s:f, s:b, s:b}", "argv", av,
                                                "workspace", j->cmd_ws, "ended", how, "seconds",
                                                res.seconds, "timed_out", res.timed_out,
                                                "output_truncated", j->cmd_truncated));
    json_object_set_new(r, "files", files);
    if (!ok) {
        char msg[512];
        snprintf(msg, sizeof msg, "agent command %s: %s", json_string_value(json_array_get(av, 0)),
                 how);
        json_object_set_new(r, "error", llm_error_json(res.timed_out ? "timeout" : "command",
                                                       res.timed_out ? KH_ETIMEOUT : KH_ECHILD,
                                                       msg, 0, NULL));
    }
    free(text);
    j->cmd_own_ws = 0;   /* the record names the workspace: keep it */
    llm_command_kill(j); /* the child is reaped already: this frees the rest */
    llm_job_finish(j, r);
}

void llm_command_pump(llm_job *j)
{
    char buf[65536];
    int eof = 0;
    for (;;) {
        ssize_t n = read(j->cmd_fd, buf, sizeof buf);
        if (n > 0) {
            if (!j->st.t_first)
                j->st.t_first = kh_now();
            size_t keep = (size_t)n;
            if (j->raw.len + keep > j->cmd_max) {
                keep = j->cmd_max > j->raw.len ? j->cmd_max - j->raw.len : 0;
                j->cmd_truncated = 1;
            }
            if (keep && llm_buf_add(&j->raw, buf, keep) == 0)
                llm_job_delta(j, "text", buf, keep);
            continue;
        }
        if (n == 0)
            eof = 1;
        else if (errno == EINTR)
            continue;
        else if (errno != EAGAIN && errno != EWOULDBLOCK)
            eof = 1;
        break;
    }
    int status = 0;
    if (eof) {
        /* stdout closed: the agent (and anything it left behind) is done */
        kill(-j->cmd_pid, SIGKILL); /* stragglers in its group */
        while (waitpid(j->cmd_pid, &status, 0) < 0 && errno == EINTR) {
        }
        j->cmd_pid = 0;
        command_finish(j, status);
        return;
    }
    if (kh_now() > j->cmd_deadline) {
        j->cmd_timed_out = 1;
        kill(-j->cmd_pid, SIGKILL);
        kill(j->cmd_pid, SIGKILL);
        while (waitpid(j->cmd_pid, &status, 0) < 0 && errno == EINTR) {
        }
        j->cmd_pid = 0;
        command_finish(j, status);
    }
}

void llm_offline_run(kh_llm *c, llm_job *j)
{
    j->attempt = 1;
    j->t_attempt = kh_now();
    if (j->kind == 'r')
        replay_run(c, j);
    else
        command_start(j);
}
