/* eval_verdict.c: a workload's verdict (docs/evaluation.md, "Verdict").
 * Owns its status and failed check (the first failure decides; its detail
 * scrubbed, since a worker's or compiler's words are the candidate's), the
 * header khlua's fields start with, the Trace object FlashInfer-Bench reads
 * (status, correctness, performance, log) with khlua's fields, and naming
 * a dead worker's fault.  The checks that fail it are the stages'; storing
 * it is eval_record.c's. */
#include "eval/eval_int.h"

#include "core/scrub.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static json_t *num(double x)
{
    if (isnan(x))
        return json_string("nan");
    if (isinf(x))
        return json_string(x > 0 ? "inf" : "-inf");
    return json_real(x);
}

void eval_fail(verdict *v, const char *status, const char *check, const char *fmt, ...)
{
    if (v->failed || strcmp(v->status, "PASSED"))
        return;
    v->status = status;
    v->failed = check;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->detail, sizeof v->detail, fmt, ap);
    va_end(ap);
    /* a detail quotes what a worker or a compiler said, which a candidate
     * can choose: no secret reaches the verdict, its log or the store */
    char *clean = kh_scrub_text(v->detail, strlen(v->detail), sizeof v->detail - 1,
                                KH_SCRUB_TAIL);
    if (clean)
        snprintf(v->detail, sizeof v->detail, "%s", clean);
    else
        v->detail[0] = '\0';
    free(clean);
}

/* The kind of a dead worker's fault, from its last words or its signal. */
const char *eval_fault_kind(const char *msg)
{
    const char *k = strstr(msg, "khlua-fault: kind=");
    static char kind[48];
    if (k) {
        k += strlen("khlua-fault: kind=");
        size_t n = strcspn(k, " \n;");
        snprintf(kind, sizeof kind, "%.*s", (int)(n < 47 ? n : 47), k);
        return kind;
    }
    /* AddressSanitizer builds: its hard_rss_limit_mb report ends with the
     * process memory map */
    if (strstr(msg, "rss limit") || strstr(msg, "out of memory") || strstr(msg, "out-of-memory") ||
        strstr(msg, "End of process memory map"))
        return "out_of_memory";
    if (strstr(msg, "SIGSYS"))
        return "forbidden_syscall"; /* the host jail's seccomp filter */
    if (strstr(msg, "SIGSEGV"))
        return "segfault";
    if (strstr(msg, "SIGABRT"))
        return "abort";
    if (strstr(msg, "SIGBUS"))
        return "bus_error";
    if (strstr(msg, "SIGKILL"))
        return "killed";
    if (strstr(msg, "exited with code"))
        return "exit";
    return "crash";
}

void eval_verdict_begin(wctx *c, wstate *s)
{
    const kh_eval_opts *o = c->o;
    const kh_task_solution *sol = c->sol;
    verdict *v = &s->v;
    memset(v, 0, sizeof *v);
    v->status = "PASSED";
    kh_check_result_init(&v->acc);
    v->checks = json_object();
    json_t *kl = s->kl = json_object();
    s->evj = json_object();
    json_t *seeds = json_array();
    for (size_t t = 0; t < c->ntrials; t++)
        json_array_append_new(seeds, json_integer((json_int_t)c->seeds[t]));
    json_object_set_new(kl, "seeds", seeds);
    json_object_set_new(kl, "base_seed", json_integer((json_int_t)c->base_seed));
    const int timed = o->timing && !c->shape_of;
    json_object_set_new(kl, "protocol", json_string(timed ? o->protocol : "none"));
    if (c->shape_of)
        json_object_set_new(kl, "shape_of", json_string(c->shape_of->uuid));
    if (c->shapes_info)
        json_object_set_new(kl, "shapes", json_incref(c->shapes_info));
    json_object_set_new(kl, "parity", json_boolean(o->parity));
    json_object_set_new(kl, "backend", json_string(eval_is_host(sol) ? "host"
                                                   : eval_is_so(sol) ? "cuda_so"
                                                                     : "cuda"));
    json_object_set_new(kl, "evaluator", json_string(kh_check_evaluator_name(c->evaluator)));
    {
        /* where the verdict was made: the store refuses an evaluation
         * without a host or a GPU UUID (the GPU's is added from the reply) */
        char host[256] = "";
        if (gethostname(host, sizeof host - 1) != 0 || !host[0])
            snprintf(host, sizeof host, "unknown");
        json_object_set_new(kl, "host", json_string(host));
    }
}

/* khlua.phases: per stage that did anything, the coordinator's seconds in
 * it and its worker requests (phase_cost, eval_int.h): where a workload's
 * time went.  The verdict's own stage is still running here, so its
 * recording is not in it. */
static double usec(double s) { return round(s * 1e6) / 1e6; }

static json_t *phases_json(const wstate *s)
{
    static const char *const names[WL_DONE] = {
        "build", "reference", "candidate", "compare", "tvd", "timed_refs", "timing",
        "ref_timing", "sanitize", "verdict"};
    json_t *o = json_object();
    for (int k = 0; o && k < WL_DONE; k++) {
        const phase_cost *p = &s->ph[k];
        if (!p->requests && p->coord_s <= 0)
            continue;
        json_t *x = json_pack("{s:f, s:I}", "coordinator_s", usec(p->coord_s), "requests",
                              (json_int_t)p->requests);
        if (x && p->requests)
            json_object_update_new(x, json_pack("{s:f, s:f, s:f, s:f, s:I, s:I}", "worker_s",
                                                usec(p->worker_s), "wait_s", usec(p->wait_s),
                                                "kernel_s", usec(p->kernel_s), "active_s",
                                                usec(p->active_s), "bytes_sent",
                                                (json_int_t)p->bytes_sent, "bytes_back",
                                                (json_int_t)p->bytes_back));
        if (x && p->steps[0] + p->steps[1] + p->steps[2] > 0) {
            json_t *w = json_object();
            for (int q = 0; q < KH_WORKER_STEPS; q++)
                json_object_set_new(w, eval_worker_steps[q], json_real(usec(p->steps[q])));
            json_object_set_new(x, "worker_steps", w);
        }
        if (x)
            json_object_set_new(o, names[k], x);
    }
    return o;
}

kh_status eval_verdict_end(wctx *c, wstate *s, kh_err *err)
{
    const kh_eval_opts *o = c->o;
    const kh_task_solution *sol = c->sol, *ref = c->ref;
    verdict *v = &s->v;
    json_t *kl = s->kl, *ev = s->evj;
    if (c->shape_of && v->failed && strcmp(v->failed, "shapes")) {
        /* a drawn shape: the check that decided is the shape check; the
         * detail keeps which comparison failed there */
        char d2[sizeof v->detail];
        snprintf(d2, sizeof d2, "on shape %s (from workload %s), %s: %s", c->w->uuid,
                 c->shape_of->uuid, v->failed, v->detail);
        snprintf(v->detail, sizeof v->detail, "%s", d2);
        v->failed = "shapes";
    }
    /* where the reference outputs came from (timed outputs' seeds included) */
    if (!ref)
        json_object_set_new(kl, "reference",
                            json_pack("{s:s, s:s?, s:i, s:i, s:f}", "kind", "python", "source",
                                      c->pyref_source, "python_runs", c->pyref_runs,
                                      "store_hits", c->pyref_cached, "python_seconds",
                                      c->pyref_seconds));
    else
        json_object_set_new(kl, "reference", json_pack("{s:s, s:s}", "kind", "trusted", "name",
                                                       ref->name));
    json_object_set_new(ev, "status", json_string(v->status));
    if (!strcmp(v->status, "PASSED") || !strcmp(v->status, "INCORRECT_NUMERICAL")) {
        json_t *cj = json_pack("{s:o, s:o}", "max_relative_error", num(v->acc.max_rel_error),
                               "max_absolute_error", num(v->acc.max_abs_error));
        if (c->evaluator == KH_EVAL_LOWBIT)
            json_object_set_new(cj, "extra", json_pack("{s:o}", "matched_ratio",
                                                       num(v->acc.matched_ratio)));
        if (s->samp_extra) { /* FIB's Correctness.extra for sampling */
            json_object_set_new(cj, "extra", s->samp_extra);
            s->samp_extra = NULL;
        }
        json_object_set_new(ev, "correctness", cj);
    }
    if (s->perf && !strcmp(v->status, "PASSED")) {
        json_object_set_new(ev, "performance", s->perf);
        s->perf = NULL;
    }
    {
        char ts[64];
        time_t now = time(NULL);
        struct tm tmv;
        gmtime_r(&now, &tmv);
        strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tmv);
        json_object_set_new(ev, "timestamp", json_string(ts));
        json_object_set_new(ev, "environment",
                            json_pack("{s:s, s:{}}", "hardware",
                                      eval_is_host(sol) ? "host" : "cuda", "libs"));
    }
    if (!json_object_get(ev, "log"))
        json_object_set_new(ev, "log", json_string(v->detail));
    json_object_set_new(kl, "checks", v->checks);
    v->checks = NULL;
    json_object_set_new(kl, "coordinator_seconds", json_real(c->coord_s + kh_now() - c->call_t0));
    json_object_set_new(kl, "phases", phases_json(s));
    double kernel_s = 0, active_s = 0;
    for (int k = 0; k < WL_DONE; k++) {
        kernel_s += s->ph[k].kernel_s;
        active_s += s->ph[k].active_s;
    }
    /* the GPU's kernel time on this workload, every request's (the busy
     * fraction's numerator: docs/evaluation.md) */
    json_object_set_new(kl, "gpu_kernel_seconds", json_real(usec(kernel_s)));
    /* the GPU's active time: the kernels above and the timing phase's
     * batches whole, the evaluator's own work in them included (the active
     * fraction's numerator: docs/evaluation.md) */
    json_object_set_new(kl, "gpu_active_seconds", json_real(usec(active_s)));
    json_object_set_new(kl, "failed_check", v->failed ? json_string(v->failed) : json_null());
    json_object_set_new(kl, "detail", json_string(v->detail));
    if (v->has_correctness)
        json_object_set_new(kl, "figures",
                            json_pack("{s:o, s:o, s:I, s:I}", "matched_ratio",
                                      num(v->acc.matched_ratio), "norm_error",
                                      num(v->acc.norm_error), "max_ulp_error",
                                      (json_int_t)(v->acc.max_ulp_error > INT64_MAX
                                                       ? -1 : (json_int_t)v->acc.max_ulp_error),
                                      "elements", (json_int_t)v->acc.numel));
    json_object_set_new(kl, "hashes",
                        json_pack("{s:s, s:s?, s:s?, s:s}", "source", c->sol_hash, "artifact",
                                  s->a && s->a->ok ? s->a->hash : NULL, "reference",
                                  s->ref_hash[0] ? s->ref_hash : NULL, "task", c->task_hash));
    json_object_set_new(ev, "khlua", kl);
    s->kl = NULL;
    s->trace = json_pack("{s:s, s:O, s:s, s:o}", "definition", c->d->name, "workload",
                         c->w->json, "solution", sol->name, "evaluation", ev);
    s->evj = NULL;
    if (!s->trace)
        return kh_err_set(err, KH_ENOMEM, "out of memory for a verdict");
    eval_record_trace(c->ev, o, c->d, sol, s->trace, s->samples);
    return KH_OK;
}
