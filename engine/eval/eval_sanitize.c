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

/* In worker w, under the tool: one correctness trial (the first seed), then
 * the timing phase too, as the evaluation runs it (the same protocol, call
 * count, fresh inputs per call, module reloaded first), unverified: a
 * kernel that misbehaves only there, or only after N calls, is under the
 * tool as well.  *worker: "ok", or what the call said (in wmsg). */
static kh_status sanitize_call(wctx *c, const kh_task_solution *sol, const art *a, kh_wproc *w,
                               double dl, char *wmsg, size_t wn, const char **worker,
                               kh_err *err)
{
    size_t saved = c->ntrials;
    c->ntrials = 1;
    json_t *p = NULL;
    kh_status st = eval_request(c, sol, a, 1, &p, err);
    c->ntrials = saved;
    *worker = "ok";
    if (!st) {
        eval_add_timing(c, p, 0);
        json_t *tm = json_object_get(p, "timing");
        json_object_set_new(tm, "timeout_s", json_real(dl));
        json_object_set_new(tm, "cold", json_false());
        json_object_set_new(p, "checks", json_pack("{s:b, s:b}", "poison", 1,
                                                   "reload_before_timing", 1));
        json_object_set_new(p, "guard_bytes", json_integer(0));
        json_object_set_new(p, "deadline_s", json_real(dl));
        kh_msg reply;
        memset(&reply, 0, sizeof reply);
        kh_err werr;
        kh_status ws = kh_wproc_call(w, "evaluate", p, c->pl, c->pl_len, dl + 5, &reply, &werr);
        if (ws) {
            snprintf(wmsg, wn, "%s", werr.msg);
            *worker = wmsg;
        }
        kh_msg_free(&reply);
    }
    json_decref(p);
    return st;
}

/* Run sol once under each tool of o->sanitize, in a gpu worker of its own
 * started through the launch template with compute-sanitizer in front, and
 * judge the tool's report: one correctness trial, then the timing phase of
 * the evaluation's protocol (every call on fresh inputs, after a reload).
 * Only records naming the candidate's kernels count (the worker's own
 * generator and checksum kernels run under the tool too).  Buffers get no guard bands here ("guard_bytes": 0): memcheck must
 * see the allocation's true end.  Outputs are poisoned (so initcheck does
 * not blame the worker's copy of an unwritten output), workspaces zeroed
 * only when the manifest says so (a kernel reading workspace it never wrote
 * is what initcheck is for).  The tools' own failures (no report) are
 * recorded as "incomplete", not blamed on the candidate. */
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
    for (const char *q = c->o->sanitize; *q && !st && !v->failed;) {
        size_t l = strcspn(q, ",");
        char tool[32];
        snprintf(tool, sizeof tool, "%.*s", (int)(l < 31 ? l : 31), q);
        q += l + (q[l] == ',');
        const char *check = kh_san_check_name(tool);
        if (!check)
            continue; /* validated in kh_eval_run; empty items are skipped */
        const char *tmp = getenv("TMPDIR");
        char dir[4096], log[4200], tmpl[8192];
        snprintf(dir, sizeof dir, "%s/khlua-san-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dir))
            return kh_err_set(err, KH_EIO, "sanitize: mkdtemp: %s", strerror(errno));
        snprintf(log, sizeof log, "%s/%s.log", dir, tool);
        if ((st = kh_san_template(cs, tool, log, getenv("KHLUA_SANITIZER_FLAGS"), c->ev->launch,
                                  tmpl, sizeof tmpl, err))) {
            rmdir(dir);
            return st;
        }
        double t0 = kh_now();
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
        kh_wproc *w = kh_wproc_start(&wo, &werr);
        unsigned char *text = NULL;
        size_t tn = 0;
        if (!w) {
            kh_err rerr;
            if (eval_read_whole(log, &text, &tn, &rerr) == KH_OK)
                text[tn] = 0; /* read_whole leaves room after the bytes */
            st = kh_err_set(err, KH_ENODEV, "sanitize: no gpu worker under compute-sanitizer "
                            "%s: %s%s%.400s", tool, werr.msg, text ? "; its log: " : "",
                            text ? (char *)text : "");
            free(text);
            unlink(log);
            rmdir(dir);
            return st;
        }
        const char *worker = "ok";
        char wmsg[600];
        st = sanitize_call(c, sol, a, w, dl, wmsg, sizeof wmsg, &worker, err);
        /* the report is complete once the tool has exited */
        kh_wproc_stop(w, 60);
        if (st) {
            unlink(log);
            rmdir(dir);
            return st;
        }
        kh_err rerr;
        if (eval_read_whole(log, &text, &tn, &rerr) == KH_OK)
            text[tn] = 0; /* read_whole leaves room after the bytes */
        unlink(log);
        rmdir(dir);
        kh_san_report sr;
        kh_san_parse(text ? (char *)text : "", tool, kernels, nk, &sr);
        free(text);
        const char *state = sr.errors ? "errors" : sr.summary ? "clean" : "incomplete";
        json_object_set_new(all, tool,
                            json_pack("{s:s, s:i, s:i, s:i, s:I, s:s, s:s, s:f}", "status", state,
                                      "errors", sr.errors, "warnings", sr.warnings, "ignored",
                                      sr.ignored, "summary_count", (json_int_t)sr.summary_count,
                                      "report", sr.first, "worker", worker, "seconds",
                                      kh_now() - t0));
        json_object_set_new(v->checks, check,
                            json_string(sr.errors ? "failed" : sr.summary ? "ok" : "incomplete"));
        if (sr.errors)
            eval_fail(v, "RUNTIME_ERROR", check, "compute-sanitizer %s: %d error%s in the candidate's "
                 "kernels; the first: %.480s", tool, sr.errors, sr.errors == 1 ? "" : "s",
                 sr.first);
    }
    return KH_OK;
}
