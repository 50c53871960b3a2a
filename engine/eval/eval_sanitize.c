/* eval_sanitize.c: compute-sanitizer at promotion time (docs/evaluation.md).
 * Owns running a candidate that PASSED once under each tool asked for, in a
 * gpu worker of its own started through the launch template with the tool
 * in front, and turning the tool's report (parsed by sanitizer.c) into the
 * verdict's checks.  Finding the tool and reading its log format are
 * sanitizer.c's. */
#include "eval/eval_int.h"

#include "eval/sanitizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The request each tool's worker runs: one correctness trial (the first
 * seed), then the timing phase too, as the evaluation runs it (the same
 * protocol and call count, module reloaded first), unverified: a kernel
 * that misbehaves only there, or only after N calls, is under the tool as
 * well.  Its input sets are drawn once each ("draw_once"), then taken in
 * turn: under a tool every store of the worker's generator is instrumented
 * too, and nothing here is timed or judged.  *params: the request's (the
 * payload is c->pl, c->pl_len). */
static kh_status sanitize_params(wctx *c, const kh_task_solution *sol, const art *a, double dl,
                                 json_t **params, kh_err *err)
{
    size_t saved = c->ntrials;
    c->ntrials = 1;
    json_t *p = NULL;
    kh_status st = eval_request(c, sol, a, 1, &p, err);
    c->ntrials = saved;
    if (st) {
        json_decref(p);
        return st;
    }
    eval_add_timing(c, p, 0);
    json_t *tm = json_object_get(p, "timing");
    json_object_set_new(tm, "timeout_s", json_real(dl));
    json_object_set_new(tm, "cold", json_false());
    json_object_set_new(tm, "draw_once", json_true());
    json_object_set_new(p, "checks", json_pack("{s:b, s:b}", "poison", 1,
                                               "reload_before_timing", 1));
    json_object_set_new(p, "guard_bytes", json_integer(0));
    json_object_set_new(p, "deadline_s", json_real(dl));
    *params = p;
    return KH_OK;
}

#define MAX_TOOLS 4 /* memcheck, racecheck, initcheck, synccheck */

/* One tool's run: its worker, the log the tool writes, what the call said. */
typedef struct san_run {
    char tool[32];
    const char *check;
    char dir[4096], log[4200];
    kh_wproc *w;
    double t0, t_ready, t_sub, t_done; /* spawned, hello read, request sent, reply read */
    char worker[600]; /* "ok", or what the worker's call said */
} san_run;

/* The tool's log (NUL-terminated, or NULL), removed with its folder. */
static unsigned char *take_log(san_run *r, size_t *n)
{
    unsigned char *text = NULL;
    kh_err rerr;
    if (r->log[0] && eval_read_whole(r->log, &text, n, &rerr) == KH_OK)
        text[*n] = 0; /* read_whole leaves room after the bytes */
    if (r->log[0])
        unlink(r->log);
    if (r->dir[0])
        rmdir(r->dir);
    r->log[0] = r->dir[0] = 0;
    return text;
}

static void runs_free(san_run *rs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (rs[i].w)
            kh_wproc_stop(rs[i].w, 5);
        rs[i].w = NULL;
        size_t tn = 0;
        free(take_log(&rs[i], &tn));
    }
}

/* r's worker did not start (werr): the error, with the tool's log. */
static kh_status no_worker(san_run *r, const kh_err *werr, kh_err *err)
{
    size_t tn = 0;
    unsigned char *text = take_log(r, &tn);
    kh_status st = kh_err_set(err, KH_ENODEV, "sanitize: no gpu worker under compute-sanitizer "
                              "%s: %s%s%.400s", r->tool, werr->msg, text ? "; its log: " : "",
                              text ? (char *)text : "");
    free(text);
    return st;
}

/* Spawn r's worker under its tool (cs: compute-sanitizer); san_ready reads
 * its hello. */
static kh_status san_spawn(wctx *c, const char *cs, san_run *r, kh_err *err)
{
    const char *tmp = getenv("TMPDIR");
    char dir[4096], tmpl[8192];
    snprintf(dir, sizeof dir, "%s/khlua-san-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir))
        return kh_err_set(err, KH_EIO, "sanitize: mkdtemp: %s", strerror(errno));
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    snprintf(r->log, sizeof r->log, "%s/%s.log", dir, r->tool);
    kh_status st = kh_san_template(cs, r->tool, r->log, getenv("KHLUA_SANITIZER_FLAGS"),
                                   c->ev->launch, tmpl, sizeof tmpl, err);
    if (st)
        return st;
    r->t0 = kh_now();
    kh_wproc_opts wo = {.role = "gpu", .launch = tmpl, .exe = c->ev->exe,
                        .hello_timeout_s = 180, .exit_grace_s = 60};
    /* no CUPTI: it and the sanitizer both instrument the process, and
     * nothing is timed here */
    const char *envs[3] = {"KHLUA_NO_CUPTI=1", NULL, NULL};
#ifdef KH_ASAN
    /* compute-sanitizer injects its library with LD_PRELOAD, ahead of
     * AddressSanitizer's runtime, which then refuses to start */
    char asan[1200];
    const char *cur = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof asan, "ASAN_OPTIONS=%s%sverify_asan_link_order=0", cur ? cur : "",
             cur && *cur ? ":" : "");
    envs[1] = asan;
#endif
    wo.env = envs;
    kh_err werr;
    r->w = kh_wproc_spawn(&wo, &werr);
    return r->w ? KH_OK : no_worker(r, &werr, err);
}

/* r's worker's hello (san_spawn started it). */
static kh_status san_ready(san_run *r, kh_err *err)
{
    kh_err werr;
    r->w = kh_wproc_ready(r->w, &werr);
    r->t_ready = kh_now();
    return r->w ? KH_OK : no_worker(r, &werr, err);
}

/* Run sol once under each tool of o->sanitize, each in a gpu worker of its
 * own started through the launch template with compute-sanitizer in front,
 * the tools side by side (their workers start together and run their
 * requests at once: nothing is timed here, and a tool's start, its own and
 * the CUDA context's under it, is most of its cost), and judge each tool's
 * report, in the order asked: one correctness trial, then the timing phase
 * of the evaluation's protocol (every call on fresh inputs, after a
 * reload).  Only records naming the candidate's kernels count (the
 * worker's own generator and checksum kernels run under the tool too).
 * Buffers get no guard bands here ("guard_bytes": 0): memcheck must
 * see the allocation's true end.  Outputs are poisoned (so initcheck does
 * not blame the worker's copy of an unwritten output), workspaces zeroed
 * only when the manifest says so (a kernel reading workspace it never wrote
 * is what initcheck is for).  The tools' own failures (no report) are
 * recorded as "incomplete", not blamed on the candidate; the first tool in
 * order that finds errors fails the candidate. */
kh_status eval_sanitize(wctx *c, const kh_task_solution *sol, const art *a, verdict *v,
                        json_t *kl, kh_err *err)
{
    char cs[4096];
    kh_status st = kh_san_find(c->ev->e, cs, sizeof cs, err);
    if (st)
        return kh_err_prefix(err, "sanitize");
    const kh_task_manifest *m = sol->manifest;
    const char *kernels[64];
    size_t nk = 0;
    for (size_t l = 0; l < m->nlaunches && nk < 64; l++)
        kernels[nk++] = m->launches[l].kernel;
    json_t *all = json_object();
    json_object_set_new(kl, "sanitizer", all);
    double dl = c->o->sanitize_deadline_s > 0 ? c->o->sanitize_deadline_s : 4 * c->o->deadline_s;
    san_run rs[MAX_TOOLS];
    size_t n = 0;
    memset(rs, 0, sizeof rs);
    for (const char *q = c->o->sanitize; *q && n < MAX_TOOLS;) {
        size_t l = strcspn(q, ",");
        snprintf(rs[n].tool, sizeof rs[n].tool, "%.*s", (int)(l < 31 ? l : 31), q);
        q += l + (q[l] == ',');
        /* validated in kh_eval_run; empty items are skipped */
        if ((rs[n].check = kh_san_check_name(rs[n].tool)))
            n++;
    }
    if (!n)
        return KH_OK;
    /* every tool's worker starts at once, then each one's hello is read */
    for (size_t i = 0; i < n && !st; i++)
        st = san_spawn(c, cs, &rs[i], err);
    for (size_t i = 0; i < n && !st; i++)
        st = san_ready(&rs[i], err);
    json_t *params = NULL;
    if (!st)
        st = sanitize_params(c, sol, a, dl, &params, err);
    for (size_t i = 0; i < n && !st; i++) {
        snprintf(rs[i].worker, sizeof rs[i].worker, "ok");
        rs[i].t_sub = rs[i].t_done = kh_now();
        kh_err werr;
        /* a request not sent leaves its worker idle: nothing to wait for */
        if (kh_wproc_submit(rs[i].w, "evaluate", params, c->pl, c->pl_len, dl + 5, &werr))
            snprintf(rs[i].worker, sizeof rs[i].worker, "%s", werr.msg);
    }
    json_decref(params);
    if (st) {
        runs_free(rs, n);
        return st;
    }
    /* the requests run side by side; the deadlines are kh_wproc_wait's */
    for (;;) {
        kh_wproc *busy[MAX_TOOLS];
        size_t nb = 0;
        for (size_t i = 0; i < n; i++)
            if (kh_wproc_busy(rs[i].w))
                busy[nb++] = rs[i].w;
        if (!nb)
            break;
        kh_wdone done[MAX_TOOLS];
        size_t nd = kh_wproc_wait(busy, nb, 1.0, done, MAX_TOOLS);
        for (size_t d = 0; d < nd; d++) {
            for (size_t i = 0; i < n; i++) {
                if (rs[i].w != done[d].w)
                    continue;
                rs[i].t_done = kh_now();
                if (done[d].status)
                    snprintf(rs[i].worker, sizeof rs[i].worker, "%s", done[d].err.msg);
            }
            kh_msg_free(&done[d].reply);
        }
    }
    /* every tool asked to exit at once (each writes its report as it
     * leaves, which takes a good part of a second), then each one awaited */
    for (size_t i = 0; i < n; i++)
        kh_wproc_ask_exit(rs[i].w, 60);
    for (size_t i = 0; i < n; i++) {
        san_run *r = &rs[i];
        /* the report is complete once the tool has exited */
        kh_wproc_stop(r->w, 60);
        r->w = NULL;
        size_t tn = 0;
        unsigned char *text = take_log(r, &tn);
        kh_san_report sr;
        kh_san_parse(text ? (char *)text : "", r->tool, kernels, nk, &sr);
        free(text);
        const char *state = sr.errors ? "errors" : sr.summary ? "clean" : "incomplete";
        /* seconds: spawn to the tool's exit; start_s: spawn to the
         * worker's hello (the tool's start and the context under it);
         * run_s: the request, sent to answered */
        json_object_set_new(all, r->tool,
                            json_pack("{s:s, s:i, s:i, s:i, s:I, s:s, s:s, s:f, s:f, s:f}",
                                      "status", state, "errors", sr.errors, "warnings",
                                      sr.warnings, "ignored", sr.ignored, "summary_count",
                                      (json_int_t)sr.summary_count, "report", sr.first, "worker",
                                      r->worker, "seconds", kh_now() - r->t0, "start_s",
                                      r->t_ready - r->t0, "run_s", r->t_done - r->t_sub));
        json_object_set_new(v->checks, r->check,
                            json_string(sr.errors ? "failed" : sr.summary ? "ok" : "incomplete"));
        /* eval_fail keeps the first failure: the first tool in order */
        if (sr.errors)
            eval_fail(v, "RUNTIME_ERROR", r->check, "compute-sanitizer %s: %d error%s in the "
                      "candidate's kernels; the first: %.480s", r->tool, sr.errors,
                      sr.errors == 1 ? "" : "s", sr.first);
    }
    return KH_OK;
}
