/* hostcc.c: nvcc and the system C compiler as child processes (see
 * hostcc.h).  Owns the fixed flag sets, the provenance record and the staged
 * compile of host candidates; the child process mechanics belong to proc.c,
 * what a candidate's compile may read and emit to ccguard.c. */
#include "compile/hostcc.h"

#include "compile/ccguard.h"
#include "compile/compile.h"
#include "core/proc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void kh_hostcc_result_free(kh_hostcc_result *res)
{
    if (!res)
        return;
    free(res->command);
    free(res->compiler);
    free(res->version);
    free(res->log);
    memset(res, 0, sizeof *res);
}

/* Append s to a shell-quoted command line. */
static int append_quoted(char **buf, size_t *len, size_t *cap, const char *s)
{
    size_t need = *len + strlen(s) * 4 + 4;
    if (need > *cap) {
        size_t nc = need * 2;
        char *b = realloc(*buf, nc);
        if (!b)
            return -1;
        *buf = b;
        *cap = nc;
    }
    char *p = *buf + *len;
    if (*len)
        *p++ = ' ';
    int plain = s[0] != '\0';
    for (const char *q = s; *q; q++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:+,%@",
                    *q))
            plain = 0;
    if (plain) {
        p += sprintf(p, "%s", s);
    } else {
        *p++ = '\'';
        for (const char *q = s; *q; q++) {
            if (*q == '\'') {
                memcpy(p, "'\\''", 4);
                p += 4;
            } else {
                *p++ = *q;
            }
        }
        *p++ = '\'';
        *p = '\0';
    }
    *len = (size_t)(p - *buf);
    return 0;
}

/* The line of `compiler --version` that names the release. */
static char *compiler_version(const char *compiler)
{
    char *argv[] = {(char *)compiler, "--version", NULL};
    kh_child_result r;
    kh_err err;
    if (kh_proc_run(argv, 20.0, 64 * 1024, &r, &err))
        return kh_strdup("unknown");
    char *pick = NULL;
    if (r.exited && r.exit_code == 0 && r.out) {
        const char *line = strstr(r.out, "release");
        if (line) {
            while (line > r.out && line[-1] != '\n')
                line--;
        } else {
            line = r.out;
        }
        size_t n = strcspn(line, "\n");
        pick = kh_utf8_sanitize(line, n, NULL);
    }
    kh_child_result_free(&r);
    return pick ? pick : kh_strdup("unknown");
}

/* $CC (a path, or a name on PATH), else cc: malloc'ed, NULL when missing. */
static char *find_cc(void)
{
    const char *cc = getenv("CC");
    if (cc && strchr(cc, '/'))
        return access(cc, X_OK) == 0 ? kh_strdup(cc) : NULL;
    return kh_which(cc && cc[0] ? cc : "cc", NULL);
}

kh_status kh_hostcc_build(kh_engine *e, kh_hostcc_kind kind, const char *src_path,
                          const char *out_path, const char *arch, const char *const *flags,
                          size_t n_flags, double deadline_s, kh_hostcc_result *res,
                          kh_err *err)
{
    memset(res, 0, sizeof *res);
    if (!src_path || !out_path)
        return kh_err_set(err, KH_EINVAL, "hostcc: source and output paths are required");
    if (n_flags > 64)
        return kh_err_set(err, KH_EINVAL, "hostcc: too many flags (%zu, at most 64)", n_flags);
    struct stat sb;
    if (stat(src_path, &sb) != 0)
        return kh_err_set(err, KH_ENOTFOUND, "hostcc: no source file %s", src_path);
    if (!arch || !arch[0])
        arch = kh_compile_default_arch();
    char archflag[64];
    snprintf(archflag, sizeof archflag, "-arch=%s", arch);

    if (kind == KH_HOSTCC_CC_SO) {
        res->compiler = find_cc();
    } else {
        char dir[600];
        snprintf(dir, sizeof dir, "%s/bin", kh_engine_cuda_home(e));
        res->compiler = kh_which("nvcc", dir);
    }
    if (!res->compiler) {
        res->log = kh_strdup("");
        return kh_err_set(err, KH_ENOTFOUND, "hostcc: %s not found",
                          kind == KH_HOSTCC_CC_SO ? "the C compiler (cc or $CC)" : "nvcc");
    }
    const char *argv[96];
    size_t n = 0;
    argv[n++] = res->compiler;
    if (kind == KH_HOSTCC_NVCC_SO) {
        static const char *const f[] = {"-shared", "-Xcompiler", "-fPIC", "-O3", "-std=c++17",
                                        "-lineinfo"};
        for (size_t i = 0; i < KH_ARRAY_LEN(f); i++)
            argv[n++] = f[i];
        argv[n++] = archflag;
    } else if (kind == KH_HOSTCC_NVCC_CUBIN) {
        static const char *const f[] = {"-cubin", "-std=c++17", "-lineinfo"};
        for (size_t i = 0; i < KH_ARRAY_LEN(f); i++)
            argv[n++] = f[i];
        argv[n++] = archflag;
    } else {
        static const char *const f[] = {"-shared", "-fPIC", "-O2", "-std=c11"};
        for (size_t i = 0; i < KH_ARRAY_LEN(f); i++)
            argv[n++] = f[i];
    }
    for (size_t i = 0; i < n_flags; i++)
        argv[n++] = flags[i];
    argv[n++] = "-o";
    argv[n++] = out_path;
    argv[n++] = src_path;
    argv[n] = NULL;

    size_t len = 0, cap = 0;
    for (size_t i = 0; i < n; i++)
        if (append_quoted(&res->command, &len, &cap, argv[i])) {
            kh_hostcc_result_free(res);
            return kh_err_set(err, KH_ENOMEM, "out of memory");
        }
    res->version = compiler_version(res->compiler);

    unlink(out_path); /* so a stale file never passes for this build's output */
    kh_child_result r;
    kh_status st = kh_proc_run((char *const *)argv, deadline_s > 0 ? deadline_s : 300.0,
                               4u << 20, &r, err);
    if (st) {
        res->log = kh_strdup("");
        return st;
    }
    res->seconds = r.seconds;
    res->log = kh_utf8_sanitize(r.out ? r.out : "", r.out ? r.out_len : 0, NULL);
    char how[128];
    kh_child_describe(&r, how, sizeof how);
    int timed_out = r.timed_out, exited0 = r.exited && r.exit_code == 0;
    kh_child_result_free(&r);
    if (!res->log) {
        kh_hostcc_result_free(res);
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    if (timed_out)
        return kh_err_set(err, KH_ETIMEOUT, "hostcc: %s %s", res->compiler, how);
    if (!exited0 || stat(out_path, &sb) != 0)
        return kh_err_set(err, KH_ECOMPILE, "hostcc: %s failed (%s)", res->compiler, how);
    res->ok = 1;
    return KH_OK;
}

/* ---- host candidates ------------------------------------------------------ */

/* The system include directories of a compiler, asked once per compiler
 * (`cc -xc -E -v /dev/null`) and kept for the life of the process.  NULL
 * with err set when the compiler does not say. */
static const char *const *system_dirs(const char *compiler, kh_err *err)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static struct {
        char *compiler;
        char **dirs;
    } known[8];
    const char *const *found = NULL;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < KH_ARRAY_LEN(known) && known[i].compiler && !found; i++)
        if (!strcmp(known[i].compiler, compiler))
            found = (const char *const *)known[i].dirs;
    pthread_mutex_unlock(&mu);
    if (found)
        return found;
    char *argv[] = {(char *)compiler, "-xc", "-E", "-v", "/dev/null", NULL};
    kh_child_result r;
    if (kh_proc_run(argv, 30.0, 1 << 20, &r, err))
        return NULL;
    char **dirs = r.exited && r.exit_code == 0 ? kh_ccguard_sysdirs(r.out) : NULL;
    kh_child_result_free(&r);
    if (!dirs || !dirs[0]) {
        kh_ccguard_strv_free(dirs);
        kh_err_set(err, KH_ENOTFOUND, "hostcc: %s does not list its system include directories",
                   compiler);
        return NULL;
    }
    pthread_mutex_lock(&mu);
    size_t i = 0;
    while (i < KH_ARRAY_LEN(known) && known[i].compiler && strcmp(known[i].compiler, compiler))
        i++;
    if (i < KH_ARRAY_LEN(known) && !known[i].compiler && (known[i].compiler = kh_strdup(compiler))) {
        known[i].dirs = dirs;
        found = (const char *const *)dirs;
    } else if (i < KH_ARRAY_LEN(known) && known[i].compiler) {
        found = (const char *const *)known[i].dirs; /* another thread was first */
    }
    pthread_mutex_unlock(&mu);
    if (found != (const char *const *)dirs)
        kh_ccguard_strv_free(dirs);
    if (!found)
        kh_err_set(err, KH_ENOMEM, "hostcc: too many compilers");
    return found;
}


/* One stage of a candidate's compile: run argv until `end`, append its
 * command to res->command and what it printed to *log.  *ok: it exited 0. */
static kh_status stage(kh_hostcc_result *res, const char *const *argv, double end, char **log,
                       int *ok, kh_err *err)
{
    *ok = 0;
    size_t len = res->command ? strlen(res->command) : 0, cap = len + 1;
    if (len && append_quoted(&res->command, &len, &cap, "&&"))
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    for (size_t i = 0; argv[i]; i++)
        if (append_quoted(&res->command, &len, &cap, argv[i]))
            return kh_err_set(err, KH_ENOMEM, "out of memory");
    double left = end - kh_now();
    if (left <= 0)
        return kh_err_set(err, KH_ETIMEOUT, "hostcc: %s timed out", res->compiler);
    kh_child_result r;
    /* 4 GiB of address space: a compile that reads an endless file runs out
     * of memory at once instead of growing until the deadline */
    kh_status st = kh_proc_run_limited((char *const *)argv, left, 4u << 20, (size_t)4 << 30, &r,
                                       err);
    if (st)
        return st;
    res->seconds += r.seconds;
    size_t old = *log ? strlen(*log) : 0;
    char *more = kh_utf8_sanitize(r.out ? r.out : "", r.out ? r.out_len : 0, NULL);
    char *joined = more ? realloc(*log, old + strlen(more) + 1) : NULL;
    if (joined) {
        memcpy(joined + old, more, strlen(more) + 1);
        *log = joined;
    }
    free(more);
    char how[128];
    kh_child_describe(&r, how, sizeof how);
    int timed_out = r.timed_out;
    *ok = r.exited && r.exit_code == 0;
    kh_child_result_free(&r);
    if (!joined)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    if (timed_out)
        return kh_err_set(err, KH_ETIMEOUT, "hostcc: %s %s", res->compiler, how);
    if (!*ok)
        kh_err_set(err, KH_ECOMPILE, "hostcc: %s failed (%s)", res->compiler, how);
    return KH_OK;
}

/* A fatal error deletes the preprocessor's list of the files it read: list
 * them again (-M -MG: missing headers and all), keeping nothing it prints.
 * KH_ECOMPILE, *rejected set, when even that leaves no list. */
static kh_status list_again(kh_hostcc_result *res, const char *src_path, const char *dpath,
                            double end, char **deps, int *rejected, kh_err *err)
{
    const char *mg[] = {res->compiler, "-std=c11", "-O2", "-fPIC", "-M", "-MG", "-MF", dpath,
                        "-o", "/dev/null", "-xc", src_path, NULL};
    char *mglog = kh_strdup("");
    int mg_ok = 0;
    kh_err merr = {KH_ENOMEM, "out of memory"};
    kh_status ms = mglog ? stage(res, mg, end, &mglog, &mg_ok, &merr) : KH_ENOMEM;
    free(mglog);
    if (ms == KH_ETIMEOUT || ms == KH_ENOMEM)
        return kh_err_set(err, ms, "%s", merr.msg);
    if (kh_read_file(dpath, deps, NULL)) {
        kh_status st = kh_err_set(err, KH_ECOMPILE,
                                  "the preprocessor failed before it could list the files it "
                                  "read, so its log is withheld");
        *rejected = 1;
        return st;
    }
    return KH_OK;
}

/* The last stage: assemble spath and link it into out_path, with flags
 * (libraries) after it; res->ok when the shared object is there. */
static kh_status link_stage(kh_hostcc_result *res, const char *out_path, const char *spath,
                            const char *const *flags, size_t n_flags, double end, char **log,
                            kh_err *err)
{
    const char *ld[48] = {res->compiler, "-shared", "-fPIC", "-O2", "-o",
                          out_path,      "-x",      "assembler", spath, "-x", "none"};
    size_t n = 11;
    for (size_t i = 0; i < n_flags; i++)
        ld[n++] = flags[i];
    ld[n] = NULL;
    int ok = 0;
    kh_status st = stage(res, ld, end, log, &ok, err);
    if (st || !ok)
        return st ? st : KH_ECOMPILE;
    struct stat sb;
    if (stat(out_path, &sb) != 0)
        return kh_err_set(err, KH_ECOMPILE, "hostcc: %s wrote no %s", res->compiler, out_path);
    res->ok = 1;
    return KH_OK;
}

/* res's log and command once the stages are over, and the status to answer
 * with: what the compiler printed is kept (through the guard) only once
 * every file the preprocessor read was allowed. */
static kh_status candidate_result(kh_hostcc_result *res, kh_ccguard *g, const char *log,
                                  int rejected, int log_released, kh_status st, kh_err *err)
{
    if (rejected) /* a rejection quotes nothing the compiler printed */
        res->log = kh_strdup(err->msg);
    else if (g && log && log_released)
        res->log = kh_ccguard_log(g, log);
    else
        res->log = kh_strdup("");
    if (!res->command)
        res->command = kh_strdup("");
    if (st == KH_ENOMEM || !res->log || !res->command) {
        kh_hostcc_result_free(res); /* as kh_hostcc_build: nothing to free on KH_ENOMEM */
        st = kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    if (st)
        res->ok = 0;
    return st;
}

kh_status kh_hostcc_build_candidate(kh_engine *e, const char *src_path, const char *out_path,
                                    const char *const *own, const char *const *flags,
                                    size_t n_flags, double deadline_s, kh_hostcc_result *res,
                                    kh_err *err)
{
    (void)e;
    memset(res, 0, sizeof *res);
    if (!src_path || !out_path || src_path[0] != '/')
        return kh_err_set(err, KH_EINVAL, "hostcc: an absolute source path and an output "
                                          "path are required");
    if (n_flags > 32)
        return kh_err_set(err, KH_EINVAL, "hostcc: too many flags (%zu, at most 32)", n_flags);
    struct stat sb;
    if (stat(src_path, &sb) != 0)
        return kh_err_set(err, KH_ENOTFOUND, "hostcc: no source file %s", src_path);
    if (!(res->compiler = find_cc())) {
        res->log = kh_strdup("");
        return kh_err_set(err, KH_ENOTFOUND, "hostcc: the C compiler (cc or $CC) not found");
    }
    res->version = compiler_version(res->compiler);
    double end = kh_now() + (deadline_s > 0 ? deadline_s : 300.0);
    const char *const *sys = system_dirs(res->compiler, err);
    size_t n_own = 0;
    while (own && own[n_own])
        n_own++;
    const char **ownv = calloc(n_own + 2, sizeof *ownv);
    char *dpath = malloc(strlen(out_path) + 16), *ipath = malloc(strlen(out_path) + 16);
    char *spath = malloc(strlen(out_path) + 16);
    kh_ccguard *g = NULL;
    char *log = NULL, *deps = NULL, *pre = NULL, *as = NULL;
    size_t pre_len = 0, as_len = 0;
    kh_status st = KH_OK;
    /* Until the files the preprocessor read are checked, nothing it printed
     * is kept: a diagnostic on the candidate's own line can quote a macro of
     * another file, and a compile that times out leaves no list to check. */
    int ok = 0, rejected = 0, log_released = 0;
    if (!sys) {
        st = err->code;
        goto out;
    }
    if (!ownv || !dpath || !ipath || !spath || !(log = kh_strdup(""))) {
        st = kh_err_set(err, KH_ENOMEM, "out of memory");
        goto out;
    }
    ownv[0] = src_path;
    for (size_t i = 0, k = 1; i < n_own; i++)
        if (strcmp(own[i], src_path))
            ownv[k++] = own[i];
    if (!(g = kh_ccguard_new(sys, ownv, err))) {
        st = err->code;
        goto out;
    }
    sprintf(dpath, "%s.khlua.d", out_path);
    sprintf(ipath, "%s.khlua.i", out_path);
    sprintf(spath, "%s.khlua.s", out_path);
    if (kh_ccguard_add_generated(g, ipath) || kh_ccguard_add_generated(g, spath)) {
        st = kh_err_set(err, KH_ENOMEM, "out of memory");
        goto out;
    }
    unlink(out_path); /* so a stale file never passes for this build's output */
    int clang = strstr(res->version, "clang") != NULL;
    const char *diag[3] = {"-fno-diagnostics-show-caret", "-fdiagnostics-color=never",
                           "-fmessage-length=0"};
    if (clang) {
        diag[0] = "-fno-caret-diagnostics";
        diag[1] = "-fno-color-diagnostics";
        diag[2] = "-fno-diagnostics-fixit-info";
    }

    /* 0. the candidate's own text: nothing that passes it off as a header's */
    if ((st = kh_ccguard_check_sources(g, err))) {
        rejected = st == KH_ECOMPILE;
        goto out;
    }
    /* 1. preprocess, listing every file read; the log waits for the check */
    const char *pp[] = {res->compiler, "-std=c11", "-O2", "-fPIC", diag[0], diag[1], diag[2],
                        "-E", "-MD", "-MF", dpath, "-o", ipath, "-xc", src_path, NULL};
    int pp_ok = 0;
    if ((st = stage(res, pp, end, &log, &pp_ok, err)))
        goto out;
    int missing_ok = 0;
    if (kh_read_file(dpath, &deps, NULL)) {
        /* a fatal error deletes the list: list again, missing headers and all */
        if ((st = list_again(res, src_path, dpath, end, &deps, &rejected, err)))
            goto out;
        missing_ok = 1;
    }
    if (pp_ok && kh_read_file(ipath, &pre, &pre_len)) {
        st = kh_err_set(err, KH_EIO, "hostcc: cannot read %s", ipath);
        goto out;
    }
    if ((st = kh_ccguard_check_deps(g, deps, pre, missing_ok, err))) {
        rejected = st == KH_ECOMPILE;
        goto out;
    }
    log_released = 1; /* every file it read is allowed: what it said may be kept */
    if (!pp_ok) {
        st = kh_err_set(err, KH_ECOMPILE, "hostcc: %s failed (preprocessing)", res->compiler);
        goto out;
    }
    if ((st = kh_ccguard_check_preprocessed(g, pre, pre_len, err))) {
        rejected = st == KH_ECOMPILE;
        goto out;
    }
    /* 2. compile what was checked (no header is read again) to assembly */
    const char *cc[] = {res->compiler, "-std=c11", "-O2", "-fPIC", diag[0], diag[1], diag[2],
                        "-S", "-o", spath, "-x", "cpp-output", ipath, NULL};
    if ((st = stage(res, cc, end, &log, &ok, err)) || !ok) {
        st = st ? st : KH_ECOMPILE;
        goto out;
    }
    if (kh_read_file(spath, &as, &as_len)) {
        st = kh_err_set(err, KH_EIO, "hostcc: cannot read %s", spath);
        goto out;
    }
    if ((st = kh_ccguard_check_assembly(as, as_len, err))) {
        rejected = st == KH_ECOMPILE;
        goto out;
    }
    /* 3. assemble and link */
    st = link_stage(res, out_path, spath, flags, n_flags, end, &log, err);

out:
    st = candidate_result(res, g, log, rejected, log_released, st, err);
    const char *temps[] = {dpath, ipath, spath};
    for (size_t i = 0; i < KH_ARRAY_LEN(temps); i++)
        if (temps[i])
            unlink(temps[i]);
    if (st)
        unlink(out_path);
    kh_ccguard_free(g);
    free(ownv);
    free(dpath);
    free(ipath);
    free(spath);
    free(log);
    free(deps);
    free(pre);
    free(as);
    return st;
}
