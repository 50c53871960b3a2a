/* sanitizer.c: finding compute-sanitizer, the launch template that puts it in
 * front of a gpu worker, and the parser of its text report (sanitizer.h).
 * Owns nothing at run time; eval_sanitize.c starts the worker and reads the log.
 *
 * The report format (compute-sanitizer 2021 to 2025): every line starts with
 * "=========".  A record begins with a line indented by one space ("=========
 * Invalid __global__ write of size 4 bytes", "========= Error: Race reported
 * between ...", "========= Uninitialized __global__ memory read ..."), its
 * details are indented further ("=========     at k(float *)+0x70", older
 * versions "at 0x70 in k(float*)" or "in file.cu:13:k(float*)"), and a bare
 * "=========" ends it.  Summaries: "ERROR SUMMARY: N error(s)" and, for
 * racecheck, "RACECHECK SUMMARY: N hazard(s) displayed (E errors, W
 * warnings)". */
#include "eval/sanitizer.h"

#include "core/proc.h"
#include "worker/supervisor.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *kh_san_check_name(const char *tool)
{
    static const char *const names[][2] = {{"memcheck", "sanitizer:memcheck"},
                                           {"racecheck", "sanitizer:racecheck"},
                                           {"initcheck", "sanitizer:initcheck"},
                                           {"synccheck", "sanitizer:synccheck"}};
    for (size_t i = 0; tool && i < KH_ARRAY_LEN(names); i++)
        if (!strcmp(tool, names[i][0]))
            return names[i][1];
    return NULL;
}

kh_status kh_san_find(kh_engine *e, char *path, size_t n, kh_err *err)
{
    const char *env = getenv("KHLUA_COMPUTE_SANITIZER");
    if (env && *env) {
        if (access(env, X_OK))
            return kh_err_set(err, KH_ENOTFOUND, "KHLUA_COMPUTE_SANITIZER=%s is not an "
                              "executable", env);
        snprintf(path, n, "%s", env);
        return KH_OK;
    }
    const char *home = e ? kh_engine_cuda_home(e) : NULL;
    char dir[4096] = "";
    if (home && *home)
        snprintf(dir, sizeof dir, "%s/bin:%s/compute-sanitizer", home, home);
    char *p = kh_which("compute-sanitizer", dir[0] ? dir : NULL);
    if (!p)
        return kh_err_set(err, KH_ENOTFOUND,
                          "compute-sanitizer not found (looked in $KHLUA_COMPUTE_SANITIZER, "
                          "%s/bin and $PATH); it ships with the CUDA toolkit",
                          home && *home ? home : "$CUDA_HOME");
    snprintf(path, n, "%s", p);
    free(p);
    return KH_OK;
}

static int has_space(const char *s)
{
    for (; s && *s; s++)
        if (isspace((unsigned char)*s))
            return 1;
    return 0;
}

kh_status kh_san_template(const char *sanitizer, const char *tool, const char *log_path,
                          const char *extra, const char *base, char *out, size_t n,
                          kh_err *err)
{
    if (!kh_san_check_name(tool))
        return kh_err_set(err, KH_EINVAL, "unknown compute-sanitizer tool '%s' (memcheck, "
                          "racecheck, initcheck, synccheck)", tool ? tool : "(null)");
    if (has_space(sanitizer) || has_space(log_path))
        return kh_err_set(err, KH_EINVAL, "the sanitizer's path and its log path must not "
                          "contain whitespace (worker launch templates are split on it): '%s', "
                          "'%s'", sanitizer, log_path);
    if (!base)
        base = KH_LAUNCH_LOCAL;
    const char *at = strstr(base, "{exe}");
    if (!at)
        return kh_err_set(err, KH_EINVAL, "the worker launch template has no {exe}: '%s'", base);
    /* --report-api-errors no: the worker's own probing calls (a kernel name
     * looked up and not found) are not the candidate's errors.  analysis:
     * one "Race reported between" record per race, not one per access. */
    int w = snprintf(out, n, "%.*s%s --tool %s --log-file %s --print-limit 20 "
                     "--report-api-errors no%s%s%s {exe}%s",
                     (int)(at - base), base, sanitizer, tool, log_path,
                     !strcmp(tool, "racecheck") ? " --racecheck-report analysis" : "",
                     extra && *extra ? " " : "", extra && *extra ? extra : "",
                     at + strlen("{exe}"));
    if (w < 0 || (size_t)w >= n)
        return kh_err_set(err, KH_EINVAL, "the sanitizer's launch template is too long");
    return KH_OK;
}

/* Does s name the kernel `name` (a whole identifier in a kernel position)? */
static int names_kernel(const char *s, const char *name)
{
    size_t l = strlen(name);
    if (!l)
        return 0;
    for (const char *p = strstr(s, name); p; p = strstr(p + 1, name)) {
        char before = p == s ? ' ' : p[-1], after = p[l];
        if (isalnum((unsigned char)before) || before == '_')
            continue;
        /* where the report names a kernel: "k(float *, int)", "k+0x70",
         * "k<128>(...)", or a bare "k" at the end of a line; the same word
         * elsewhere ("write of size") is not a kernel */
        if (after == '(' || after == '+' || after == '<' || after == '\n' || after == 0)
            return 1;
    }
    return 0;
}

typedef struct rec {
    char text[4096];
    size_t len;
    int open;
    int warning;
} rec;

static void rec_close(rec *c, const char *const *kernels, size_t nk, kh_san_report *r)
{
    if (!c->open)
        return;
    c->open = 0;
    int mine = 0;
    for (size_t i = 0; i < nk && !mine; i++)
        mine = kernels[i] && names_kernel(c->text, kernels[i]);
    if (!mine) {
        r->ignored++;
        return;
    }
    if (c->warning) {
        r->warnings++;
        return;
    }
    if (!r->errors++)
        snprintf(r->first, sizeof r->first, "%s", c->text);
}

static void rec_add(rec *c, const char *line, size_t len)
{
    while (len && (line[len - 1] == '\r' || line[len - 1] == ' '))
        len--;
    size_t room = sizeof c->text - c->len - 1;
    if (c->len && room) {
        c->text[c->len++] = '\n';
        room--;
    }
    if (len > room)
        len = room;
    memcpy(c->text + c->len, line, len);
    c->len += len;
    c->text[c->len] = 0;
}

void kh_san_parse(const char *text, const char *tool, const char *const *kernels, size_t nk,
                  kh_san_report *r)
{
    memset(r, 0, sizeof *r);
    r->summary_count = -1;
    int race = tool && !strcmp(tool, "racecheck");
    rec c;
    memset(&c, 0, sizeof c);
    for (const char *p = text ? text : ""; *p;) {
        size_t ll = strcspn(p, "\n");
        const char *line = p;
        p += ll + (p[ll] == '\n');
        if (ll < 9 || strncmp(line, "=========", 9))
            continue; /* the worker's own output, if it shares the log */
        const char *rest = line + 9;
        size_t rl = ll - 9;
        size_t ind = 0;
        while (ind < rl && rest[ind] == ' ')
            ind++;
        if (ind == rl || rest[ind] == '\r') { /* a bare "=========" ends a record */
            rec_close(&c, kernels, nk, r);
            continue;
        }
        const char *body = rest + ind;
        size_t bl = rl - ind;
        if (ind > 1) { /* a detail of the current record */
            if (c.open)
                rec_add(&c, body, bl);
            continue;
        }
        rec_close(&c, kernels, nk, r);
        if (!strncmp(body, "COMPUTE-SANITIZER", 17) || !strncmp(body, "LEAK SUMMARY", 12))
            continue;
        if (!strncmp(body, "ERROR SUMMARY:", 14)) {
            r->summary = 1;
            if (!race || r->summary_count < 0)
                r->summary_count = strtol(body + 14, NULL, 10);
            continue;
        }
        if (!strncmp(body, "RACECHECK SUMMARY:", 18)) {
            /* "N hazards displayed (E errors, W warnings)" */
            r->summary = 1;
            const char *q = strchr(body, '(');
            r->summary_count = q ? strtol(q + 1, NULL, 10) : strtol(body + 18, NULL, 10);
            continue;
        }
        c.open = 1;
        c.len = 0;
        c.text[0] = 0;
        c.warning = race && (!strncmp(body, "Warning", 7) || !strncmp(body, "WARN", 4));
        rec_add(&c, body, bl);
    }
    rec_close(&c, kernels, nk, r);
}
