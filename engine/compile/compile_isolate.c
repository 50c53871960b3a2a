/* compile_isolate.c: isolated compiles (compile_int.h): a forked child with
 * a hard deadline, the PCH folders it must not leave behind, and the warm
 * precompiled header this process makes for it first.  NVRTC itself is
 * compile_nvrtc.c's; when to isolate, and what the result means, compile.c's.
 *
 * NVRTC polls the flow callback between phases, not inside template
 * instantiation (a measured recursion bomb ran 67 s past a 3 s deadline), so
 * an in-process compile cannot be bounded.  The child inherits this process's
 * precompiled headers (fork copies the NVRTC heap), compiles, writes the
 * result to a pipe and exits; the parent kills it at the deadline. */
#include "compile/compile_int.h"

#include "compile/srccheck.h"

#include "core/proc.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

typedef struct child_job {
    kh_compiler *c;
    const kh_nvrtc_api *nv;
    const char *src, *name;
    const nvrtc_headers *hdr;
    const optlist *opts;
    double deadline;
    int want_pch;
    const char *tmpdir; /* the child's TMPDIR, or "" */
} child_job;

static int write_all(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0)
            return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static int child_compile(void *arg, int fd)
{
    child_job *j = arg;
    nvrtc_out o;
    kh_err err;
    if (j->tmpdir[0])
        setenv("TMPDIR", j->tmpdir, 1);
    if (compile_nvrtc_run(j->c, j->nv, j->src, j->name, j->hdr, j->opts, j->deadline,
                          j->want_pch, &o, &err))
        return 3;
    int32_t hdr[3] = {(int32_t)o.r, o.why, o.pch};
    uint64_t ln = o.log_len, cn = o.cubin_len;
    double tm[3] = {o.create, o.compile, o.extract};
    int bad = write_all(fd, hdr, sizeof hdr) || write_all(fd, tm, sizeof tm) ||
              write_all(fd, &ln, sizeof ln) || write_all(fd, o.log ? o.log : "", ln) ||
              write_all(fd, &cn, sizeof cn) || write_all(fd, o.cubin ? (void *)o.cubin : "", cn);
    return bad ? 4 : 0;
}

/* NVRTC writes its automatic PCH under $TMPDIR/__nvrtc_auto_pch_<pid>_N/ and
 * removes what it made at exit.  A child must leave nothing behind: a killed
 * one cannot clean up, and one that creates a PCH while this process already
 * has a PCH folder writes into *this process's* folder (it inherited the
 * name), which NVRTC then fails to remove.  So each child gets a TMPDIR of
 * its own, removed after it, and files that appear in this process's folders
 * during a child's compile are removed too. */
static const char AUTO_PCH[] = "__nvrtc_auto_pch_";

static const char *tmp_base(void)
{
    const char *t = getenv("TMPDIR");
    return t && t[0] ? t : "/tmp";
}

/* Call fn(path, ud) for each file in tmp/__nvrtc_auto_pch_<who>* (who "" for
 * every process), then, if rm_dirs, remove those folders. */
static void each_pch_file(const char *tmp, const char *who, int rm_dirs,
                          void (*fn)(const char *path, void *ud), void *ud)
{
    char prefix[96];
    snprintf(prefix, sizeof prefix, "%s%s", AUTO_PCH, who);
    DIR *d = opendir(tmp);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, prefix, strlen(prefix)))
            continue;
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", tmp, de->d_name);
        DIR *d2 = opendir(dir);
        if (d2) {
            struct dirent *f;
            while ((f = readdir(d2))) {
                if (!strcmp(f->d_name, ".") || !strcmp(f->d_name, ".."))
                    continue;
                char path[1400];
                snprintf(path, sizeof path, "%s/%s", dir, f->d_name);
                fn(path, ud);
            }
            closedir(d2);
        }
        if (rm_dirs)
            rmdir(dir);
    }
    closedir(d);
}

static void unlink_fn(const char *path, void *ud)
{
    (void)ud;
    unlink(path);
}

typedef struct snapshot {
    char *list; /* "\npath\npath\n" */
    size_t len, cap;
} snapshot;

static void snap_fn(const char *path, void *ud)
{
    snapshot *s = ud;
    size_t n = strlen(path);
    if (s->len + n + 3 > s->cap) {
        size_t cap = (s->cap + n + 3) * 2;
        char *l = realloc(s->list, cap);
        if (!l)
            return;
        s->list = l;
        s->cap = cap;
    }
    if (!s->len)
        s->list[s->len++] = '\n';
    memcpy(s->list + s->len, path, n);
    s->len += n;
    s->list[s->len++] = '\n';
    s->list[s->len] = '\0';
}

static void unlink_new_fn(const char *path, void *ud)
{
    const snapshot *s = ud;
    char key[1410];
    snprintf(key, sizeof key, "\n%s\n", path);
    if (!s->list || !strstr(s->list, key))
        unlink(path);
}

static void remove_child_pch(const char *child_tmp, const snapshot *mine)
{
    char me[32];
    snprintf(me, sizeof me, "%ld_", (long)getpid());
    if (child_tmp[0]) {
        each_pch_file(child_tmp, "", 1, unlink_fn, NULL);
        rmdir(child_tmp);
    }
    each_pch_file(tmp_base(), me, 0, unlink_new_fn, (void *)mine);
}

static int read_bytes(const char **p, const char *end, void *dst, size_t n)
{
    if ((size_t)(end - *p) < n)
        return -1;
    memcpy(dst, *p, n);
    *p += n;
    return 0;
}

kh_status compile_nvrtc_isolated(kh_compiler *c, const kh_nvrtc_api *nv, const char *src,
                                 const char *name, const nvrtc_headers *headers,
                                 const optlist *opts, double deadline, int want_pch,
                                 nvrtc_out *o, kh_err *err)
{
    child_job job = {c, nv, src, name, headers, opts, deadline, want_pch, ""};
    child_job *j = &job;
    memset(o, 0, sizeof *o);
    char me[32], child_tmp[600];
    snprintf(me, sizeof me, "%ld_", (long)getpid());
    snapshot mine = {0};
    each_pch_file(tmp_base(), me, 0, snap_fn, &mine);
    snprintf(child_tmp, sizeof child_tmp, "%s/khlua-nvrtc-XXXXXX", tmp_base());
    if (!mkdtemp(child_tmp))
        child_tmp[0] = '\0';
    j->tmpdir = child_tmp;
    kh_child_result res;
    /* a little grace beyond the deadline: the child's own flow callback
     * usually ends it, with a log */
    kh_status st = kh_proc_fork_call(child_compile, j, j->deadline + 0.5, 256u << 20, &res, err);
    remove_child_pch(child_tmp, &mine);
    free(mine.list);
    if (st)
        return st;
    if (res.timed_out || res.signaled) {
        char how[128];
        kh_child_describe(&res, how, sizeof how);
        kh_child_result_free(&res);
        if (res.timed_out) {
            o->pch = -1;
            o->why = 1;
            o->r = NVRTC_ERROR_CANCELLED;
            o->compile = res.seconds;
            return KH_OK;
        }
        return kh_err_set(err, KH_ECHILD, "the compiler process died (%s)", how);
    }
    const char *p = res.out, *end = res.out + res.out_len;
    int32_t hdr[3];
    double tm[3];
    uint64_t ln, cn;
    if (!res.exited || res.exit_code != 0 || read_bytes(&p, end, hdr, sizeof hdr) ||
        read_bytes(&p, end, tm, sizeof tm) || read_bytes(&p, end, &ln, sizeof ln) ||
        ln > (uint64_t)(end - p)) {
        char how[128];
        kh_child_describe(&res, how, sizeof how);
        kh_child_result_free(&res);
        return kh_err_set(err, KH_ECHILD, "the compiler process failed (%s)", how);
    }
    o->r = (nvrtcResult)hdr[0];
    o->why = hdr[1];
    o->pch = hdr[2];
    o->create = tm[0];
    o->compile = tm[1];
    o->extract = tm[2];
    o->log_len = ln;
    if (!(o->log = malloc(ln + 1)))
        goto oom;
    memcpy(o->log, p, ln);
    o->log[ln] = '\0';
    p += ln;
    if (read_bytes(&p, end, &cn, sizeof cn) || cn > (uint64_t)(end - p)) {
        compile_nvrtc_out_free(o);
        kh_child_result_free(&res);
        return kh_err_set(err, KH_ECHILD, "the compiler process sent a truncated result");
    }
    o->cubin_len = cn;
    if (cn) {
        if (!(o->cubin = malloc(cn)))
            goto oom;
        memcpy(o->cubin, p, cn);
    }
    kh_child_result_free(&res);
    return KH_OK;
oom:
    compile_nvrtc_out_free(o);
    kh_child_result_free(&res);
    return kh_err_set(err, KH_ENOMEM, "out of memory");
}

/* Make sure this process holds the PCH for the source's directive prefix, by
 * compiling the prefix alone here (#include/#define/#undef/#pragma lines
 * only: no code of the candidate's runs, no macro is evaluated).  The prefix
 * ends before the first #include of one of the candidate's headers, and it
 * compiles without them: their code is the candidate's, which runs only in
 * the child, and a PCH holding a header of theirs would be served to the next
 * candidate whose header of that name says something else (compile.h).
 * Failure is not an error: the child then compiles cold. */
int compile_warm_prefix(kh_compiler *c, const kh_nvrtc_api *nv, const char *src, size_t len,
                        const kh_compile_req *req, const char *name, const optlist *opts,
                        double deadline)
{
    int warm = 0;
    char *prefix = kh_srccheck_pch_prefix(src, len, req->headers, req->n_headers);
    if (!prefix)
        return 0;
    uint64_t h = XXH3_64bits(prefix, strlen(prefix));
    for (size_t i = 0; i < c->n_warm; i++)
        if (c->warm[i] == h) {
            free(prefix);
            return 1;
        }
    /* the body is punctuation only: the prefix's #defines may redefine any
     * identifier (even `void`), and nothing of theirs may expand here */
    static const char body[] = ";\n";
    char *prog = malloc(strlen(prefix) + sizeof body);
    if (prog) {
        sprintf(prog, "%s%s", prefix, body);
        nvrtc_out o;
        kh_err err;
        if (!compile_nvrtc_run(c, nv, prog, name, NULL, opts, deadline, 1, &o, &err)) {
            /* created now, or not attempted because a held PCH matched */
            if (o.r == NVRTC_SUCCESS &&
                (o.pch == NVRTC_SUCCESS || o.pch == NVRTC_ERROR_NO_PCH_CREATE_ATTEMPTED)) {
                if (c->n_warm == KH_ARRAY_LEN(c->warm))
                    c->n_warm = 0; /* forget; NVRTC's own heap decides anyway */
                c->warm[c->n_warm++] = h;
                warm = 1;
            }
            compile_nvrtc_out_free(&o);
        }
        free(prog);
    }
    free(prefix);
    return warm;
}

/* Drop the PCH options: a child must never create a PCH, because the files
 * would land in this process's PCH folder, which NVRTC then fails to remove. */
void compile_drop_pch_options(optlist *o)
{
    size_t w = 0;
    for (size_t i = 0; i < o->n; i++) {
        if (!strcmp(o->v[i], "-pch") || !strcmp(o->v[i], "--pch-messages=false") ||
            !strcmp(o->v[i], "-diag-suppress=629,630"))
            free(o->v[i]);
        else
            o->v[w++] = o->v[i];
    }
    o->n = w;
}
