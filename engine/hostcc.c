/* hostcc.c: nvcc and the system C compiler as child processes (see
 * hostcc.h).  Owns the fixed flag sets and the provenance record; the child
 * process mechanics belong to proc.c. */
#include "hostcc.h"

#include "compile.h"
#include "proc.h"

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
        const char *cc = getenv("CC");
        if (cc && strchr(cc, '/'))
            res->compiler = access(cc, X_OK) == 0 ? kh_strdup(cc) : NULL;
        else
            res->compiler = kh_which(cc && cc[0] ? cc : "cc", NULL);
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
