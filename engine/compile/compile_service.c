/* compile_service.c: the compile service (see compile_service.h).  Owns job
 * routing over the pool of compile servers, the store-backed cache (look-up
 * before dispatch, the "compile" record after), and the answers for servers
 * that die or hang.  Compiling is compile.c's; the wire form of requests and
 * artifacts compile_wire.c's; processes, deadlines and respawns are
 * supervisor.c's. */
#include "compile/compile_service.h"

#include "compile/srccheck.h"
#include "worker/supervisor.h"

#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#define WARM_SETS 16 /* include prefixes remembered per server */

typedef struct server_slot {
    int pid;                   /* the process the sets below belong to */
    uint64_t warm[WARM_SETS];  /* include-prefix hashes it compiled */
    size_t n_warm, next;
} server_slot;

struct kh_compile_service {
    kh_engine *e;
    kh_compiler *local;  /* keys, and the compiles of the in-process mode */
    kh_pool *pool;       /* NULL in process */
    size_t n;
    server_slot slot[KH_COMPILE_SERVICE_MAX_SERVERS];
    double grace;
    kh_compile_service_stats st;
    /* The servers' TMPDIR: NVRTC keeps its automatic PCH in
     * $TMPDIR/__nvrtc_auto_pch_<pid>_N/ and removes it at a clean exit only,
     * so a killed server's files are removed here (local servers only). */
    char tmp[600];
    char tmp_env[620];
    const char **env;
};

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    remove(path);
    return 0;
}

static void rm_tree(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Folders of live services, removed at exit too: a Lua script that ends with
 * os.exit never frees the services it holds.  Only the process that made a
 * folder removes it (a forked child exiting must not). */
#define MAX_LIVE 64
static struct {
    pid_t owner;
    char path[600];
} g_live[MAX_LIVE];
static int g_atexit;

static void remove_live_at_exit(void)
{
    for (int i = 0; i < MAX_LIVE; i++)
        if (g_live[i].path[0] && g_live[i].owner == getpid())
            rm_tree(g_live[i].path);
}

static void live_add(const char *path)
{
    if (!g_atexit)
        g_atexit = atexit(remove_live_at_exit) == 0;
    for (int i = 0; i < MAX_LIVE; i++)
        if (!g_live[i].path[0]) {
            g_live[i].owner = getpid();
            snprintf(g_live[i].path, sizeof g_live[i].path, "%s", path);
            return;
        }
}

static void live_remove(const char *path)
{
    for (int i = 0; i < MAX_LIVE; i++)
        if (!strcmp(g_live[i].path, path))
            g_live[i].path[0] = '\0';
}

/* Remove what a dead server left in the servers' TMPDIR. */
static void remove_pch_of(kh_compile_service *s, int pid)
{
    if (!s->tmp[0] || pid <= 0)
        return;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "__nvrtc_auto_pch_%d_", pid);
    DIR *d = opendir(s->tmp);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, prefix, strlen(prefix)))
            continue;
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", s->tmp, de->d_name);
        rm_tree(path);
    }
    closedir(d);
}

size_t kh_compile_service_default_servers(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1)
        cores = 1;
    return cores < 4 ? (size_t)cores : 4;
}

kh_compile_service *kh_compile_service_new(kh_engine *e, const kh_compile_service_opts *o,
                                           kh_err *err)
{
    kh_compile_service_opts d = {0};
    if (!o)
        o = &d;
    size_t n = o->servers ? o->servers : kh_compile_service_default_servers();
    if (n > KH_COMPILE_SERVICE_MAX_SERVERS) {
        kh_err_set(err, KH_EINVAL, "compile service: %zu servers (at most %d)", n,
                   KH_COMPILE_SERVICE_MAX_SERVERS);
        return NULL;
    }
    if (o->grace_s < 0) {
        kh_err_set(err, KH_EINVAL, "compile service: negative grace");
        return NULL;
    }
    kh_compile_service *s = calloc(1, sizeof *s);
    if (!s) {
        kh_err_set(err, KH_ENOMEM, "out of memory");
        return NULL;
    }
    s->e = e;
    s->grace = o->grace_s > 0 ? o->grace_s : 2.0;
    if (!(s->local = kh_compile_new(e, err))) {
        free(s);
        return NULL;
    }
    if (!o->in_process) {
        const char *const *env = o->env;
        if (!o->launch || !o->launch[0]) {
            /* a TMPDIR of this service's own (a remote launch has its own disks) */
            const char *t = getenv("TMPDIR");
            snprintf(s->tmp, sizeof s->tmp, "%s/khlua-csrv-XXXXXX", t && t[0] ? t : "/tmp");
            size_t ne = 0;
            while (o->env && o->env[ne])
                ne++;
            int made = mkdtemp(s->tmp) != NULL;
            if (!made || !(s->env = calloc(ne + 2, sizeof *s->env))) {
                kh_err_set(err, made ? KH_ENOMEM : KH_EIO, "compile service: cannot make a "
                           "temporary folder for the servers under %s",
                           t && t[0] ? t : "/tmp");
                if (made)
                    rmdir(s->tmp);
                kh_compile_free(s->local);
                free(s);
                return NULL;
            }
            for (size_t i = 0; i < ne; i++)
                s->env[i] = o->env[i];
            live_add(s->tmp);
            snprintf(s->tmp_env, sizeof s->tmp_env, "TMPDIR=%s", s->tmp);
            s->env[ne] = s->tmp_env;
            env = s->env;
        }
        kh_wproc_opts wo = {.role = "compile", .launch = o->launch, .exe = o->exe,
                            .env = env, .hello_timeout_s = 60};
        if (!(s->pool = kh_pool_new(&wo, n, err))) {
            if (s->tmp[0]) {
                rm_tree(s->tmp);
                live_remove(s->tmp);
            }
            free(s->env);
            kh_compile_free(s->local);
            free(s);
            return NULL;
        }
        s->n = n;
    }
    s->st.servers = s->n;
    return s;
}

kh_status kh_compile_service_prestart(kh_compile_service *s, size_t n, kh_err *err)
{
    return s->pool ? kh_pool_prestart(s->pool, n, err) : KH_OK;
}

void kh_compile_service_free(kh_compile_service *s)
{
    if (!s)
        return;
    kh_pool_free(s->pool);
    if (s->tmp[0]) {
        rm_tree(s->tmp); /* the servers are gone: nothing of theirs is in use */
        live_remove(s->tmp);
    }
    free(s->env);
    kh_compile_free(s->local);
    free(s);
}

void kh_compile_service_stats_get(const kh_compile_service *s, kh_compile_service_stats *st)
{
    *st = s->st;
    if (s->pool) {
        kh_pool_stats ps;
        kh_pool_stats_get(s->pool, &ps);
        st->started = ps.started;
        st->deaths = ps.deaths;
        st->timeouts = ps.timeouts;
    }
}

const char *kh_compile_service_tmpdir(const kh_compile_service *s) { return s->tmp; }

int kh_compile_service_server_pid(const kh_compile_service *s, size_t i)
{
    return s->pool ? kh_pool_slot_pid(s->pool, i) : 0;
}

/* ---- the store cache -------------------------------------------------------- */

typedef struct put_ctx {
    const kh_artifact *a;
    const kh_compile_req *req;
    json_t *rec;
} put_ctx;

static kh_status put_fn(kh_store_txn *tx, void *arg, kh_err *err)
{
    put_ctx *c = arg;
    kh_hash h;
    char hx[33];
    kh_status st;
    if (c->a->cubin_len) {
        if ((st = kh_store_txn_put_blob(tx, c->a->cubin, c->a->cubin_len, &h, err)))
            return st;
        kh_hash_hex(&h, hx);
        json_object_set_new(c->rec, "binary_blob", json_string(hx));
    }
    if ((st = kh_store_txn_put_blob(tx, c->a->log, c->a->log_len, &h, err)))
        return st;
    kh_hash_hex(&h, hx);
    json_object_set_new(c->rec, "log_blob", json_string(hx));
    if ((st = kh_store_txn_put_blob(tx, c->req->source, c->req->source_len, &h, err)))
        return st;
    kh_hash_hex(&h, hx);
    json_object_set_new(c->rec, "source_blob", json_string(hx));
    if (c->req->n_headers) {
        /* the candidate's other sources, by name: the key covers them ("text_blob":
         * the store finds blob references by the suffix, gc keeps them) */
        json_t *hs = json_array();
        if (!hs)
            return kh_err_set(err, KH_ENOMEM, "out of memory");
        json_object_set_new(c->rec, "headers", hs);
        for (size_t i = 0; i < c->req->n_headers; i++) {
            const kh_source *x = &c->req->headers[i];
            if ((st = kh_store_txn_put_blob(tx, x->text, x->len, &h, err)))
                return st;
            kh_hash_hex(&h, hx);
            if (json_array_append_new(hs, json_pack("{s:s, s:s}", "name", x->name, "text_blob", hx)))
                return kh_err_set(err, KH_ENOMEM, "out of memory");
        }
    }
    char id[KH_STORE_ID_MAX];
    st = kh_store_txn_put(tx, c->rec, 0, id, err);
    if (st == KH_ESTATE) /* written meanwhile (the same key is the same compile) */
        return KH_OK;
    return st;
}

/* Record a compiler verdict: OK or a compile error. */
static void store_put(kh_compile_service *s, kh_store *store, const kh_compile_req *req,
                      const kh_artifact *a)
{
    json_t *rec = kh_artifact_to_json(a);
    if (!rec) {
        s->st.store_errors++;
        return;
    }
    char id[64], host[256] = "";
    snprintf(id, sizeof id, "compile-%s", a->hash);
    gethostname(host, sizeof host - 1);
    json_object_del(rec, "log");       /* in log_blob */
    json_object_del(rec, "cache_hit"); /* of this answer, not of the compile */
    json_object_set_new(rec, "type", json_string("compile"));
    json_object_set_new(rec, "id", json_string(id));
    json_object_set_new(rec, "status", json_string(a->ok ? "ok" : "compile_error"));
    json_object_set_new(rec, "key", json_string(a->hash));
    json_object_set_new(rec, "name", json_string(req->name ? req->name : "candidate.cu"));
    json_object_set_new(rec, "provenance",
                    json_pack("{s:s, s:s, s:O, s:s, s:s, s:s, s:i, s:s, s:b}", "compiler",
                              "nvrtc", "version", a->nvrtc_version, "options",
                              json_object_get(rec, "options"), "arch", a->arch, "served_by",
                              a->served_by ? a->served_by : "in-process", "host", host,
                              "server_pid", a->server_pid, "khlua", KH_VERSION, "trusted",
                              req->trusted));
    put_ctx c = {a, req, rec};
    kh_err err;
    if (kh_store_update(store, put_fn, &c, &err)) {
        s->st.store_errors++;
        snprintf(s->st.last_store_error, sizeof s->st.last_store_error, "%s", err.msg);
    } else {
        s->st.store_writes++;
    }
    json_decref(rec);
}

/* A store hit: KH_OK / KH_ECOMPILE with *out; KH_ENOTFOUND on a miss (or an
 * unreadable entry, counted as a store error: the job then compiles). */
static kh_status store_get(kh_compile_service *s, kh_store *store, const char *hash,
                           kh_artifact **out, kh_err *err)
{
    char id[64];
    snprintf(id, sizeof id, "compile-%s", hash);
    json_t *rec = NULL;
    kh_err gerr;
    kh_status st = kh_store_get(store, id, &rec, &gerr);
    if (st) {
        if (st != KH_ENOTFOUND) {
            s->st.store_errors++;
            snprintf(s->st.last_store_error, sizeof s->st.last_store_error, "%s", gerr.msg);
        }
        return KH_ENOTFOUND;
    }
    void *cubin = NULL, *log = NULL;
    size_t cubin_len = 0, log_len = 0;
    kh_hash h;
    const char *bb = json_string_value(json_object_get(rec, "binary_blob"));
    const char *lb = json_string_value(json_object_get(rec, "log_blob"));
    const char *status = json_string_value(json_object_get(rec, "status"));
    int ok = status && !strcmp(status, "ok");
    st = KH_OK;
    if (!status || (ok && !bb) || !lb)
        st = kh_err_set(&gerr, KH_ECORRUPT, "record %s lacks status, binary_blob or log_blob",
                        id);
    if (!st && ok && !(st = kh_hash_parse(bb, &h, &gerr)))
        st = kh_store_get_blob(store, &h, &cubin, &cubin_len, &gerr);
    if (!st && !(st = kh_hash_parse(lb, &h, &gerr)))
        st = kh_store_get_blob(store, &h, &log, &log_len, &gerr);
    kh_artifact *a = NULL;
    if (!st) {
        json_object_set_new(rec, "log", json_stringn(log_len ? log : "", log_len));
        json_object_set_new(rec, "ok", json_boolean(ok));
        st = kh_artifact_from_json(rec, cubin, cubin_len, &a, &gerr);
    }
    free(cubin);
    free(log);
    json_decref(rec);
    if (st) {
        s->st.store_errors++;
        snprintf(s->st.last_store_error, sizeof s->st.last_store_error, "%s", gerr.msg);
        return KH_ENOTFOUND;
    }
    a->served_by = "store";
    a->cache_hit = 1;
    s->st.store_hits++;
    *out = a;
    if (ok)
        return KH_OK;
    char line[600];
    const char *e = strstr(a->log, "error");
    const char *b = e ? e : a->log;
    while (e && b > a->log && b[-1] != '\n')
        b--;
    snprintf(line, sizeof line, "%.*s", (int)strcspn(b, "\n"), b);
    return kh_err_set(err, KH_ECOMPILE, "%s", line[0] ? line : "compile error (cached)");
}

/* ---- jobs ------------------------------------------------------------------- */

enum { J_PENDING, J_RUNNING, J_DONE };

typedef struct job {
    const kh_compile_req *req;
    kh_compile_result *res;
    int state;
    char hash[33];
    unsigned char key[16];
    uint64_t inc;  /* hash of the #include prefix; 0: none */
    size_t slot;
    double deadline;
    json_t *params;
} job;

/* A failed artifact carrying only a log (a static-check report, or what
 * happened to a server). */
static kh_artifact *bare_artifact(kh_compile_service *s, const job *j, const char *log)
{
    kh_artifact *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    memcpy(a->key, j->key, 16);
    memcpy(a->hash, j->hash, 33);
    const kh_nvrtc_api *nv = kh_engine_nvrtc(s->e, NULL);
    if (nv)
        snprintf(a->nvrtc_version, sizeof a->nvrtc_version, "%d.%d", nv->major, nv->minor);
    a->arch = kh_strdup(j->req->arch && j->req->arch[0] ? j->req->arch
                                                        : kh_compile_default_arch());
    a->log = kh_utf8_sanitize(log, strlen(log), &a->log_len);
    a->pch = "off";
    if (!a->arch || !a->log) {
        kh_artifact_free(a);
        return NULL;
    }
    return a;
}

static void finish(job *j, kh_status st, const kh_err *err, kh_artifact *a)
{
    j->state = J_DONE;
    j->res->status = st;
    j->res->a = a;
    if (st && err)
        j->res->err = *err;
    else
        kh_err_clear(&j->res->err);
}

/* A compiler verdict (from a server or from here): cache it, then check the
 * manifest. */
static void verdict(kh_compile_service *s, kh_store *store, job *j, kh_status st,
                    const kh_err *err, kh_artifact *a)
{
    if (a && store && !j->req->no_cache && (st == KH_OK || (st == KH_ECOMPILE && !a->ok)))
        store_put(s, store, j->req, a);
    kh_err kerr = *err;
    if (st == KH_OK && a && a->ok)
        st = kh_compile_check_kernels(j->req, a, &kerr);
    finish(j, st, &kerr, a);
}

/* Static checks, key and store look-up.  Leaves the job pending, or done. */
static void prepare(kh_compile_service *s, kh_store *store, job *j)
{
    const kh_compile_req *req = j->req;
    kh_err err;
    kh_status st;
    s->st.jobs++;
    double t0 = kh_now();
    if ((st = kh_compile_key(s->local, req, j->key, &err))) {
        finish(j, st, &err, NULL);
        return;
    }
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        j->hash[2 * i] = hx[j->key[i] >> 4];
        j->hash[2 * i + 1] = hx[j->key[i] & 15];
    }
    j->hash[32] = '\0';
    double tk = kh_now() - t0, tc = kh_now();
    if (!req->trusted || req->n_headers) {
        char *report = NULL;
        st = kh_compile_check(s->local, req, &report, &err);
        if (st == KH_ECOMPILE) {
            kh_artifact *a = bare_artifact(s, j, report ? report : err.msg);
            free(report);
            kh_err_prefix(&err, "static check");
            finish(j, a ? st : KH_ENOMEM, &err, a);
            return;
        }
        free(report);
        if (st) {
            finish(j, st, &err, NULL);
            return;
        }
    }
    if (store && !req->no_cache) {
        kh_artifact *a = NULL;
        tc = kh_now() - tc;
        st = store_get(s, store, j->hash, &a, &err);
        if (st != KH_ENOTFOUND) {
            /* this answer's timings, as for an in-memory hit (the record
             * keeps the compile's) */
            a->t = (kh_compile_timings){.check = tc, .key = tk, .total = kh_now() - t0};
            if (st == KH_OK && a->ok)
                st = kh_compile_check_kernels(req, a, &err);
            finish(j, st, &err, a);
            return;
        }
    }
    /* a server compiles in its own process and drops -pch where the PCH
     * could hold a header of the candidate's (compile.h): no warm PCH to
     * route such a job to */
    char *prefix = NULL;
    if (!req->no_pch && !kh_srccheck_pch_may_hold(req->source, req->source_len, req->headers,
                                                  req->n_headers))
        prefix = kh_srccheck_pch_prefix(req->source, req->source_len, req->headers,
                                        req->n_headers);
    j->inc = prefix ? XXH3_64bits(prefix, strlen(prefix)) | 1 : 0;
    free(prefix);
}

static void compile_here(kh_compile_service *s, kh_store *store, job *j)
{
    kh_compile_req r = *j->req;
    r.kernels = NULL; /* checked after the cache, like a server's answer */
    r.n_kernels = 0;
    r.isolate = r.isolate || !r.trusted;
    kh_artifact *a = NULL;
    kh_err err;
    kh_err_clear(&err);
    kh_status st = kh_compile_build(s->local, &r, &a, &err);
    if (a)
        a->served_by = "in-process";
    if (st == KH_ETIMEOUT || st == KH_EINTR || !a)
        finish(j, st, &err, a);
    else
        verdict(s, store, j, st, &err, a);
}

/* Which idle server to prefer: one whose PCH holds this job's includes. */
static size_t route(kh_compile_service *s, const job *j)
{
    if (!j->inc)
        return (size_t)-1;
    for (size_t i = 0; i < s->n; i++) {
        int pid = kh_pool_slot_pid(s->pool, i);
        if (!pid || pid != s->slot[i].pid || kh_pool_slot_busy(s->pool, i))
            continue;
        for (size_t k = 0; k < s->slot[i].n_warm; k++)
            if (s->slot[i].warm[k] == j->inc)
                return i;
    }
    return (size_t)-1;
}

static void remember_warm(kh_compile_service *s, size_t i, int pid, uint64_t inc)
{
    server_slot *sl = &s->slot[i];
    if (sl->pid != pid) {
        sl->pid = pid;
        sl->n_warm = sl->next = 0;
    }
    if (!inc)
        return;
    for (size_t k = 0; k < sl->n_warm; k++)
        if (sl->warm[k] == inc)
            return;
    sl->warm[sl->next] = inc;
    sl->next = (sl->next + 1) % WARM_SETS;
    if (sl->n_warm < WARM_SETS)
        sl->n_warm++;
}

static kh_status dispatch(kh_compile_service *s, job *j, kh_err *err)
{
    if (!j->params) {
        kh_compile_req r = *j->req;
        r.kernels = NULL;
        r.n_kernels = 0;
        if (!(j->params = kh_compile_req_to_json(&r)))
            return kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    size_t prefer = route(s, j);
    double dl = j->req->deadline_s > 0 ? j->req->deadline_s : KH_COMPILE_DEFAULT_DEADLINE;
    j->deadline = dl;
    kh_status st;
    const void *payload = j->req->source;
    size_t plen = j->req->source_len;
    void *joined = NULL;
    if (j->req->n_headers) {
        if ((st = kh_compile_req_payload(j->req, &joined, &plen, err)))
            return st;
        payload = joined;
    }
    /* A server killed while idle is found out only when its request cannot
     * be written (KH_EIO): the pool has reaped it, so try the next one. */
    for (int tries = 0;; tries++) {
        st = kh_pool_submit(s->pool, "build", j->params, payload, plen, dl + s->grace, prefer,
                            &j->slot, err);
        if (st != KH_EIO || tries == 2)
            break;
        prefer = (size_t)-1;
    }
    free(joined); /* written to the server by now */
    if (st)
        return st;
    if (prefer != (size_t)-1 && prefer == j->slot)
        s->st.warm_routed++;
    s->st.dispatched++;
    j->state = J_RUNNING;
    return KH_OK;
}

static void server_answer(kh_compile_service *s, kh_store *store, job *j, kh_pool_done *d)
{
    kh_err err;
    const char *name = j->req->name && j->req->name[0] ? j->req->name : "candidate.cu";
    if (d->d.status == KH_OK) {
        json_t *r = json_object_get(d->d.reply.head, "result");
        const char *status = json_string_value(json_object_get(r, "status"));
        const char *msg = json_string_value(json_object_get(r, "message"));
        kh_artifact *a = NULL;
        kh_status st = kh_artifact_from_json(json_object_get(r, "artifact"), d->d.reply.payload,
                                             d->d.reply.payload_len, &a, &err);
        if (st) {
            kh_err_prefix(&err, "compile server (pid %d) sent a bad answer", d->pid);
            finish(j, KH_ECHILD, &err, NULL);
            return;
        }
        a->served_by = "server";
        a->server_pid = d->pid;
        st = KH_OK;
        for (int c = 1; status && c < KH_STATUS_COUNT; c++)
            if (!strcmp(status, kh_status_name((kh_status)c)))
                st = (kh_status)c;
        if (st)
            kh_err_set(&err, st, "%s", msg && msg[0] ? msg : kh_status_name(st));
        else
            kh_err_clear(&err);
        if (!d->d.worker_died && (st == KH_OK || st == KH_ECOMPILE))
            remember_warm(s, d->slot, d->pid, j->inc);
        if (st == KH_OK || st == KH_ECOMPILE)
            verdict(s, store, j, st, &err, a);
        else
            finish(j, st, &err, a);
        return;
    }
    if (!d->d.worker_died) { /* the server refused the request (EINVAL, ENOMEM) */
        finish(j, d->d.status, &d->d.err, NULL);
        return;
    }
    s->slot[d->slot].pid = 0; /* its PCH died with it */
    remove_pch_of(s, d->pid);
    char log[1400];
    kh_status st;
    if (d->d.status == KH_ETIMEOUT) {
        st = kh_err_set(&err, KH_ETIMEOUT,
                        "compile of %s passed its deadline of %.1f s (plus %.1f s grace): "
                        "compile server pid %d was killed and will be replaced",
                        name, j->deadline, s->grace, d->pid);
    } else {
        st = kh_err_set(&err, KH_ECOMPILE,
                        "compile server pid %d died while compiling %s (%s); it will be "
                        "replaced", d->pid, name, d->d.err.msg);
    }
    snprintf(log, sizeof log, "%s\n", err.msg);
    kh_artifact *a = bare_artifact(s, j, log);
    if (a) {
        a->served_by = "server";
        a->server_pid = d->pid;
        a->t.total = d->d.seconds;
    }
    finish(j, a ? st : KH_ENOMEM, &err, a);
}

void kh_compile_service_build_many(kh_compile_service *s, kh_store *store,
                                   const kh_compile_req *reqs, size_t n, kh_compile_result *res)
{
    job *jobs = calloc(n ? n : 1, sizeof *jobs);
    kh_pool_done *done = calloc(s->n ? s->n : 1, sizeof *done);
    if (!jobs || !done) {
        for (size_t i = 0; i < n; i++) {
            memset(&res[i], 0, sizeof res[i]);
            res[i].status = kh_err_set(&res[i].err, KH_ENOMEM, "out of memory");
        }
        free(jobs);
        free(done);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        memset(&res[i], 0, sizeof res[i]);
        jobs[i].req = &reqs[i];
        jobs[i].res = &res[i];
        if (kh_engine_stop_requested(s->e)) {
            kh_err err;
            finish(&jobs[i], kh_err_set(&err, KH_EINTR, "compile interrupted"), &err, NULL);
            continue;
        }
        prepare(s, store, &jobs[i]);
        if (jobs[i].state == J_PENDING && !s->pool)
            compile_here(s, store, &jobs[i]);
    }
    size_t next = 0, running = 0;
    while (s->pool) {
        /* start what the idle servers can take, in order */
        while (next < n) {
            job *j = &jobs[next];
            if (j->state != J_PENDING) {
                next++;
                continue;
            }
            kh_err err;
            if (kh_engine_stop_requested(s->e)) {
                finish(j, kh_err_set(&err, KH_EINTR, "compile interrupted"), &err, NULL);
                continue;
            }
            kh_status st = dispatch(s, j, &err);
            if (st == KH_ESTATE && running > 0)
                break; /* every server busy: wait for one */
            if (st) {
                finish(j, st, &err, NULL);
                continue;
            }
            running++;
            next++;
        }
        if (!running)
            break;
        size_t nd = kh_pool_wait(s->pool, 0.25, done, s->n);
        for (size_t k = 0; k < nd; k++) {
            for (size_t i = 0; i < n; i++)
                if (jobs[i].state == J_RUNNING && jobs[i].slot == done[k].slot) {
                    server_answer(s, store, &jobs[i], &done[k]);
                    running--;
                    break;
                }
            kh_msg_free(&done[k].d.reply);
        }
    }
    for (size_t i = 0; i < n; i++)
        json_decref(jobs[i].params);
    free(jobs);
    free(done);
}

kh_status kh_compile_service_build(kh_compile_service *s, kh_store *store,
                                   const kh_compile_req *req, kh_artifact **out, kh_err *err)
{
    kh_compile_result r;
    kh_compile_service_build_many(s, store, req, 1, &r);
    *out = r.a;
    if (r.status && err)
        *err = r.err;
    return r.status;
}
