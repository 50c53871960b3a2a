/* eval.c: the coordinator's side of evaluation (eval.h, docs/evaluation.md):
 * the public API and one run's driver.  Owns the evaluator's life, checking
 * the options, finding the solution, its definition and reference,
 * choosing the workloads (listed, and shapes drawn off the list), the run's
 * base seed and the per-workload seeds derived from it, and stepping every
 * workload through its stages (eval_stage.c) with their worker requests
 * run in parallel between steps (eval_jobs.c).  Everything else is the
 * eval_*.c units' (eval_int.h says which owns what); running anything a
 * candidate wrote is the workers' (role_host.c, role_gpu.c). */
#include "eval/eval_int.h"

#include "eval/pyref.h"
#include "eval/sanitizer.h"
#include "eval/shapes.h"
#include "gpu/bench.h"
#include "task/rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

kh_eval *kh_eval_new(kh_engine *e, const kh_eval_config *cfg, kh_err *err)
{
    kh_eval *ev = calloc(1, sizeof *ev);
    if (!ev) {
        kh_err_set(err, KH_ENOMEM, "out of memory");
        return NULL;
    }
    ev->e = e;
    ev->store = cfg ? cfg->store : NULL;
    ev->host_as = cfg && cfg->host_as_bytes ? cfg->host_as_bytes : (uint64_t)8 << 30;
    if ((cfg && cfg->exe && !(ev->exe = eval_dupstr(cfg->exe))) ||
        (cfg && cfg->launch && !(ev->launch = eval_dupstr(cfg->launch)))) {
        kh_eval_free(ev);
        kh_err_set(err, KH_ENOMEM, "out of memory");
        return NULL;
    }
    return ev;
}

void kh_eval_free(kh_eval *ev)
{
    if (!ev)
        return;
    kh_pool_free(ev->host);
    kh_pool_free(ev->gpu);
    for (peak *p = ev->peaks, *nx; p; p = nx) {
        nx = p->next;
        free(p);
    }
    if (ev->own_store)
        kh_store_close(ev->store);
    kh_compile_service_free(ev->cs);
    for (art *a = ev->arts, *n; a; a = n) {
        n = a->next;
        free(a->bytes);
        free(a->log);
        free(a);
    }
    eval_refs_free(ev);
    for (refperf *p = ev->perfs, *n; p; p = n) {
        n = p->next;
        free(p->def);
        free(p->uuid);
        free(p->protocol);
        free(p);
    }
    free(ev->exe);
    free(ev->launch);
    free(ev);
}

/* ---- one run --------------------------------------------------------------- */
static uint64_t fnv(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; s && *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int is_file(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static kh_status check_opts(const kh_eval_opts *o, kh_err *err)
{
    kh_protocol proto;
    if (!o->protocol || !kh_protocol_parse(o->protocol, &proto))
        return kh_err_set(err, KH_EINVAL, "eval: unknown protocol '%s' (official, screen, precise)",
                          o->protocol ? o->protocol : "(null)");
    for (const char *q = o->sanitize ? o->sanitize : ""; *q;) {
        size_t l = strcspn(q, ",");
        char tool[32];
        snprintf(tool, sizeof tool, "%.*s", (int)(l < 31 ? l : 31), q);
        if (l && !kh_san_check_name(tool))
            return kh_err_set(err, KH_EINVAL, "eval: unknown sanitizer tool '%.*s' (memcheck, "
                              "racecheck, initcheck, synccheck)", (int)l, q);
        q += l + (q[l] == ',');
    }
    if (o->trials < 1 || o->trials > 64)
        return kh_err_set(err, KH_EINVAL, "eval: trials must be 1 to 64, got %d", o->trials);
    return KH_OK;
}

/* What a run evaluates: the candidate (a solution of the package, or a
 * Solution parsed from text into S), its definition, and the definition's
 * trusted reference (NULL: its Python run). */
typedef struct run_sol {
    kh_task_set *S;
    const kh_task_solution *sol, *ref;
    const kh_task_def *d;
} run_sol;

static kh_status parse_solution(const kh_task_set *P, const kh_eval_solution *s,
                                const char *solution, const char *task_path, run_sol *r,
                                kh_err *err)
{
    kh_status st;
    if (s->json) {
        /* a Solution from anywhere, parsed in memory against the package's
         * definitions: its definition is the package's */
        if ((st = kh_task_solution_from_text(P, solution, s->json, s->json_len, &r->S, err)))
            return st;
        if (kh_task_nsolutions(r->S) != 1) {
            /* not JSON, or not a Solution: the first error, file:line */
            const kh_task_problem *p = NULL;
            for (size_t i = 0; !p && i < kh_task_nproblems(r->S); i++)
                if (kh_task_problem_at(r->S, i)->severity == KH_TASK_ERROR)
                    p = kh_task_problem_at(r->S, i);
            char buf[1024];
            return p ? kh_err_set(err, KH_EPARSE, "%s", kh_task_problem_format(p, buf, sizeof buf))
                     : kh_err_set(err, KH_EINVAL, "%s: expected one Solution, found none",
                                  solution);
        }
        r->sol = kh_task_solution_at(r->S, 0);
    } else {
        r->sol = kh_task_find_solution(P, solution);
        if (!r->sol)
            return kh_err_set(err, KH_ENOTFOUND, "no solution named '%s' in %s (nor a file by "
                              "that name)", solution, task_path);
    }
    return KH_OK;
}

/* The solution, its definition and reference, refused with a reason where
 * khlua will not run them. */
static kh_status find_solution(const kh_task_set *P, const kh_eval_solution *s,
                               const char *solution, const char *task_path,
                               const kh_eval_opts *o, run_sol *r, kh_err *err)
{
    kh_status st = parse_solution(P, s, solution, task_path, r, err);
    if (st)
        return st;
    const kh_task_solution *sol = r->sol;
    const kh_task_def *d = sol->definition ? kh_task_find_def(P, sol->definition) : NULL;
    if (!d)
        return kh_err_set(err, KH_ENOTFOUND, "solution '%s': definition '%s' is not in %s",
                          sol->name ? sol->name : "?", sol->definition ? sol->definition : "?",
                          task_path);
    if (sol->manifest && sol->manifest->host && o->gpus && *o->gpus)
        /* said, not ignored: a host solution runs in host workers */
        return kh_err_set(err, KH_EINVAL, "--gpus %s: solution '%s' runs on the host backend "
                          "(its workers are --host-workers)", o->gpus,
                          sol->name ? sol->name : "?");
    if (kh_task_unrunnable(sol))
        return kh_err_set(err, KH_EUNSUPPORTED, "solution '%s' %s", sol->name ? sol->name : "?",
                          kh_task_unrunnable(sol));
    if (sol->manifest->so && r->S)
        /* host code in the gpu worker: only a package's own solutions (people's
         * code, e.g. a cuBLAS anchor), never a Solution file, which is how
         * candidates arrive (policies/lib/evaluate.lua) */
        return kh_err_set(err, KH_EUNSUPPORTED,
                          "solution '%s' is a cuda_so shared object (host code): khlua runs "
                          "those only from the task package's own solutions, not from a "
                          "Solution file", sol->name ? sol->name : "?");
    /* The trusted khlua reference when the definition names one, else the
     * definition's own Python run (pyref.h), computed once per seed. */
    if (!d->reference && !kh_pyref_available(d))
        return kh_err_set(err, KH_ENOTFOUND,
                          "definition '%s' names no trusted reference (khlua.reference) and has "
                          "no Python reference (\"reference\" defining run)", d->name);
    const kh_task_solution *ref = d->reference ? kh_task_find_solution(P, d->reference) : NULL;
    if (d->reference && (!ref || !ref->manifest))
        return kh_err_set(err, KH_ENOTFOUND, "the trusted reference '%s' of '%s' is %s",
                          d->reference, d->name,
                          ref ? "not a khlua solution (no manifest)" : "not in the task");
    r->d = d;
    r->ref = ref;
    return KH_OK;
}

/* The workloads of a run: the listed ones asked for, in package order, then
 * the drawn shapes (shape_from[i]: the listed workload shape i came from). */
typedef struct wl_list {
    const kh_task_workload **ws;
    const kh_task_workload **shape_from; /* NULL when no shapes were asked for */
    size_t n, nlisted;
    kh_shapes shapes;                    /* owns the drawn workloads */
} wl_list;

static void wl_list_free(wl_list *l)
{
    free(l->ws);
    free(l->shape_from);
    kh_shapes_free(&l->shapes);
}

/* Is uuid among the comma-separated sel? */
static int selected(const char *sel, const char *uuid)
{
    size_t ul = strlen(uuid);
    for (const char *q = sel; *q;) {
        size_t l = strcspn(q, ",");
        if (l == ul && !strncmp(q, uuid, l))
            return 1;
        q += l + (q[l] == ',');
    }
    return 0;
}

/* o->workloads: all, the first N, or uuids (every one must exist). */
static kh_status select_workloads(const kh_task_set *P, const kh_task_def *d, const char *sel,
                                  const char *task_path, wl_list *l, kh_err *err)
{
    size_t nw = kh_task_nworkloads(P), n = 0;
    const kh_task_workload **ws = l->ws = calloc(nw ? nw : 1, sizeof *ws);
    if (!ws)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    char *endp;
    long firstn = strtol(sel, &endp, 10);
    int by_count = *endp == 0 && endp != sel;
    if (by_count && firstn < 1)
        return kh_err_set(err, KH_EINVAL, "--workloads: a count must be >= 1");
    for (size_t i = 0; i < nw; i++) {
        const kh_task_workload *w = kh_task_workload_at(P, i);
        /* a trace line names a workload that was run: not one to run */
        if (!w->definition || strcmp(w->definition, d->name) || !w->axes_ok || !w->uuid ||
            w->is_trace)
            continue;
        if (!strcmp(sel, "all") || (by_count && (long)n < firstn))
            ws[n++] = w;
        else if (!by_count && selected(sel, w->uuid))
            ws[n++] = w;
    }
    if (!by_count && strcmp(sel, "all")) {
        /* every uuid asked for must exist */
        for (const char *q = sel; *q;) {
            size_t len = strcspn(q, ",");
            int found = 0;
            for (size_t i = 0; i < n && !found; i++)
                found = strlen(ws[i]->uuid) == len && !strncmp(q, ws[i]->uuid, len);
            if (!found)
                return kh_err_set(err, KH_ENOTFOUND, "workload '%.*s' of '%s' is not in %s",
                                  (int)len, q, d->name, task_path);
            q += len + (q[len] == ',');
        }
    }
    if (n == 0)
        return kh_err_set(err, KH_ENOTFOUND, "no workloads of '%s' in %s", d->name, task_path);
    if (by_count && (size_t)firstn > n)
        /* asked for more than there are: said, not silently fewer */
        return kh_err_set(err, KH_EINVAL, "--workloads %ld: '%s' has %zu workload%s in %s",
                          firstn, d->name, n, n == 1 ? "" : "s", task_path);
    l->n = l->nlisted = n;
    return KH_OK;
}

/* Admissible shapes not in the list, checked for correctness after the
 * listed workloads (drawn from the secret base seed); *info: {asked,
 * drawn, note}. */
static kh_status add_shapes(const kh_task_set *P, const kh_task_def *d, int nshapes,
                            uint64_t base_seed, wl_list *l, json_t **info, kh_err *err)
{
    size_t nw = kh_task_nworkloads(P), n = l->n;
    const kh_task_workload **all = calloc(nw ? nw : 1, sizeof *all);
    size_t na = 0;
    for (size_t i = 0; all && i < nw; i++)
        all[na++] = kh_task_workload_at(P, i);
    kh_status st = all ? kh_shapes_draw(d, all, na, (size_t)nshapes,
                                        kh_rng_derive_seed(base_seed, 0x5BA9E, 0), &l->shapes,
                                        err)
                       : kh_err_set(err, KH_ENOMEM, "out of memory");
    free(all);
    if (st)
        return st;
    const kh_task_workload **grown = realloc(l->ws, (n + l->shapes.n) * sizeof *l->ws);
    if (grown)
        l->ws = grown;
    l->shape_from = calloc(n + l->shapes.n, sizeof *l->shape_from);
    if (!grown || !l->shape_from)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    for (size_t i = 0; i < l->shapes.n; i++) {
        l->ws[n + i] = &l->shapes.w[i];
        l->shape_from[n + i] = l->shapes.from[i];
    }
    l->n += l->shapes.n;
    *info = json_pack("{s:i, s:I, s:s}", "asked", nshapes, "drawn", (json_int_t)l->shapes.n,
                      "note", l->shapes.note);
    return KH_OK;
}

/* The definition's evaluator and tolerances (the caller's win); the
 * sampling evaluator's validation calls and threshold. */
static kh_status set_evaluator(wctx *c, kh_err *err)
{
    const kh_task_def *d = c->d;
    const kh_eval_opts *o = c->o;
    c->evaluator = kh_check_evaluator_for(d->name, d->op_type, &c->copts);
    if (d->evaluator) {
        static const struct { const char *n; kh_check_evaluator e; } evs[] = {
            {"default", KH_EVAL_DEFAULT}, {"lowbit", KH_EVAL_LOWBIT},
            {"dsa_sparse_attention", KH_EVAL_DSA_ATTENTION}, {"dsa_topk_indexer", KH_EVAL_DSA_TOPK},
            {"sampling", KH_EVAL_SAMPLING}};
        for (size_t i = 0; i < KH_ARRAY_LEN(evs); i++)
            if (!strcmp(d->evaluator, evs[i].n))
                c->evaluator = evs[i].e;
    }
    c->copts.atol = d->atol;
    c->copts.rtol = d->rtol;
    c->copts.required_ratio = d->required_matched_ratio;
    if (o->atol >= 0)
        c->copts.atol = o->atol;
    if (o->rtol >= 0)
        c->copts.rtol = o->rtol;
    if (o->required_matched_ratio >= 0)
        c->copts.required_ratio = o->required_matched_ratio;
    if (c->evaluator != KH_EVAL_SAMPLING)
        return KH_OK;
    c->smethod = kh_check_sampling_method(d->name);
    const char *why = eval_sampling_unsupported(d, c->smethod);
    if (why)
        return kh_err_set(err, KH_EUNSUPPORTED, "definition '%s' (sampling evaluator): %s",
                          d->name, why);
    c->ntrials = (size_t)d->sampling_validation_trials;
    c->tvd_threshold = d->sampling_tvd_threshold;
    return KH_OK;
}

/* The run's context: the candidate's hash and standing, where safetensors
 * inputs are found, the trials, and the base seed (opts.seed, else drawn
 * from the OS CSPRNG). */
static kh_status set_run(wctx *c, kh_eval *ev, const kh_task *t, const run_sol *r,
                         const kh_eval_opts *o, kh_err *err)
{
    const char *task_path = t->path;
    char *txt = json_dumps(json_object_get(r->sol->json, "sources"),
                           JSON_COMPACT | JSON_SORT_KEYS);
    eval_hex128(txt ? txt : "", txt ? strlen(txt) : 0, c->sol_hash);
    free(txt);
    /* a solution whose file holds an error (a binding naming what the
     * definition lacks is left out of its argument list) never runs: the
     * candidate's verdict, not an error of the evaluation */
    kh_err se;
    if (kh_task_solution_errors(r->S ? r->S : t->set, r->sol, &se))
        snprintf(c->bad_solution, sizeof c->bad_solution, "%s", se.msg);
    c->ev = ev;
    c->o = o;
    c->d = r->d;
    c->sol = r->sol;
    c->ref = r->ref;
    c->base = task_path;
    snprintf(c->task_hash, sizeof c->task_hash, "%016llx", (unsigned long long)t->fp.hash);
    if (is_file(task_path)) {
        snprintf(c->base_dir, sizeof c->base_dir, "%s", task_path);
        char *sl = strrchr(c->base_dir, '/');
        if (sl)
            *sl = 0;
        else
            snprintf(c->base_dir, sizeof c->base_dir, ".");
        c->base = c->base_dir;
    }
    c->ntrials = (size_t)o->trials;
    c->ref_gpu = r->ref && !eval_is_host(r->ref);
    c->base_seed = o->seed & INT64_MAX;
    if (o->seed == KH_EVAL_SEED_RANDOM)
        return kh_secure_seed(&c->base_seed, err);
    return KH_OK;
}

/* The workload's position among its definition's in the package: its GPU
 * group, whatever else is evaluated (dispatch in eval_jobs.c). */
static size_t package_pos(const kh_task_set *P, const kh_task_def *d, const kh_task_workload *w)
{
    size_t nw = kh_task_nworkloads(P);
    for (size_t k = 0, pos = 0; k < nw; k++) {
        const kh_task_workload *x = kh_task_workload_at(P, k);
        if (x == w)
            return pos;
        pos += x->definition && !strcmp(x->definition, d->name) && x->axes_ok && x->uuid;
    }
    return 0;
}

/* c holds workload s while it advances: its seeds, derived from the base
 * seed and the workload (trial t: derive(base, fnv(uuid), t); the timing
 * inputs' and the verified calls' schedule's seeds of their own), and its
 * Python reference's figures and coordinator time so far. */
static void wl_enter(wctx *c, const wstate *s)
{
    c->w = s->w;
    c->wl = s->wl;
    c->shape_of = s->shape_of;
    uint64_t wh = fnv(s->w->uuid);
    for (size_t k = 0; k < c->ntrials; k++)
        c->seeds[k] = kh_rng_derive_seed(c->base_seed, wh, k) & INT64_MAX; /* JSON, Lua */
    c->timing_seed = kh_rng_derive_seed(c->base_seed, wh, 0x71AE) & INT64_MAX;
    c->sample_seed = kh_rng_derive_seed(c->base_seed, wh, 0x5A3E) & INT64_MAX;
    c->pyref_source = s->py.source;
    c->pyref_seconds = s->py.seconds;
    c->pyref_runs = s->py.runs;
    c->pyref_cached = s->py.cached;
    c->coord_s = s->py.coord_s;
    c->call_t0 = kh_now();
}

static void wl_leave(const wctx *c, wstate *s)
{
    s->py = (pyref_stat){c->pyref_source, c->pyref_seconds, c->pyref_runs, c->pyref_cached,
                         c->coord_s + kh_now() - c->call_t0};
}

/* Every workload to its verdict: each advances until it waits on worker
 * requests, then the requests of all run in parallel (eval_run_jobs), and
 * each waiting one advances again.  outs[i]: workload i's trace. */
static kh_status run_workloads(wctx *c, const kh_task_set *P, const wl_list *l, wstate *ws,
                               int *groups, json_t **outs, kh_err *err)
{
    kh_eval *ev = c->ev;
    const kh_eval_opts *o = c->o;
    size_t n = l->n, ndone = 0;
    for (size_t i = 0; i < n; i++) {
        ws[i].wl = i;
        ws[i].w = l->ws[i];
        ws[i].shape_of = l->shape_from && i >= l->nlisted ? l->shape_from[i] : NULL;
        groups[i] = -1 - (int)package_pos(P, c->d, l->ws[i]); /* dispatch makes it a group */
    }
    eval_drop_jobs(ev, SIZE_MAX);
    kh_status st = KH_OK;
    while (!st) {
        size_t waiting = 0;
        for (size_t i = 0; i < n && !st; i++) {
            wstate *s = &ws[i];
            if (s->stage == WL_DONE)
                continue;
            if (kh_engine_stop_requested(ev->e)) {
                st = kh_err_set(err, KH_EINTR, "evaluation interrupted");
                break;
            }
            wl_enter(c, s);
            st = eval_advance(c, s, err);
            wl_leave(c, s);
            if (st || s->stage != WL_DONE) {
                waiting += !st;
                continue;
            }
            outs[i] = s->trace;
            s->trace = NULL;
            eval_wstate_free(s);
            eval_drop_jobs(ev, i); /* its replies are no longer needed */
            ndone++;
            if (o->progress)
                o->progress(o->progress_ud, ndone, n, outs[i]);
        }
        if (st || !waiting)
            break;
        st = eval_run_jobs(ev, o, groups, err);
    }
    eval_drop_jobs(ev, SIZE_MAX);
    return st;
}

/* A file of the package that changed on disk since it was loaded is named
 * in every trace (the loaded version is what was used). */
static void note_changes(const kh_task *t, json_t *arr, kh_err *err)
{
    kh_task_fp fp1;
    if (kh_task_fingerprint(t->path, &fp1, err) != KH_OK)
        return;
    const char *changed = kh_task_fp_diff(&t->fp, &fp1);
    size_t ti;
    json_t *tr;
    json_array_foreach(arr, ti, tr) {
        json_t *kl = json_object_get(json_object_get(tr, "evaluation"), "khlua");
        if (!kl)
            continue;
        if (changed)
            json_object_set_new(kl, "task_changed",
                                json_sprintf("%s changed on disk during the evaluation; the "
                                             "version loaded at its start was used", changed));
    }
    if (changed)
        fprintf(stderr, "khlua: warning: %s/%s changed on disk during the evaluation; the "
                "version loaded at its start was used\n", t->path, changed);
    kh_task_fp_free(&fp1);
}

/* The workers a fresh evaluation needs, started at once so that their
 * starts overlap: the GPU workers (their CUDA context is most of a fresh
 * evaluation's start) while the candidate compiles, and one compile server
 * for it.  A failure here is not reported: the first request starts the
 * worker again and reports it. */
static void prestart_workers(wctx *c)
{
    kh_err perr;
    kh_err_clear(&perr);
    if (!eval_is_host(c->sol) || c->ref_gpu) {
        kh_pool *p = eval_pool_for(c->ev, 0, 0, &perr);
        if (p)
            kh_pool_prestart(p, SIZE_MAX, &perr);
    }
    if (!c->bad_solution[0] && !eval_is_host(c->sol) && !eval_is_so(c->sol) &&
        eval_compile_service(c->ev, &perr) == KH_OK)
        kh_compile_service_prestart(c->ev->cs, 1, &perr);
}

/* The workloads chosen, the run set up, every workload evaluated; *traces
 * in workload order. */
static kh_status run(kh_eval *ev, const kh_task *t, const run_sol *r, const kh_eval_opts *o,
                     json_t **traces, kh_err *err)
{
    wl_list l = {.shapes = KH_SHAPES_INIT};
    kh_timeline("eval begin %s", r->d ? r->d->name : "");
    wctx *c = calloc(1, sizeof *c);
    kh_status st = c ? KH_OK : kh_err_set(err, KH_ENOMEM, "out of memory");
    if (!st)
        st = select_workloads(t->set, r->d, o->workloads && *o->workloads ? o->workloads : "all",
                              t->path, &l, err);
    if (!st)
        st = set_run(c, ev, t, r, o, err);
    if (!st && o->shapes > 0)
        st = add_shapes(t->set, r->d, o->shapes, c->base_seed, &l, &c->shapes_info, err);
    if (!st)
        st = set_evaluator(c, err);
    if (!st)
        prestart_workers(c);
    wstate *ws = st ? NULL : calloc(l.n, sizeof *ws);
    json_t **outs = st ? NULL : calloc(l.n, sizeof *outs);
    int *groups = st ? NULL : malloc(l.n * sizeof *groups);
    if (!st && (!ws || !outs || !groups))
        st = kh_err_set(err, KH_ENOMEM, "out of memory");
    if (!st)
        st = run_workloads(c, t->set, &l, ws, groups, outs, err);
    json_t *arr = st ? NULL : json_array();
    for (size_t i = 0; outs && i < l.n; i++) {
        if (arr)
            json_array_append_new(arr, outs[i]);
        else
            json_decref(outs[i]);
    }
    for (size_t i = 0; ws && i < l.n; i++)
        eval_wstate_free(&ws[i]);
    free(ws);
    free(outs);
    free(groups);
    if (c) {
        free(c->pl);
        eval_in_free(c);
        eval_probs_free(c);
        json_decref(c->shapes_info);
        free(c);
    }
    wl_list_free(&l);
    if (arr)
        note_changes(t, arr, err);
    *traces = arr;
    kh_timeline("eval end");
    return st;
}

kh_status kh_eval_run(kh_eval *ev, const char *task_path, const char *solution,
                      const kh_eval_opts *o, json_t **traces, kh_err *err)
{
    *traces = NULL;
    if (!task_path || !solution)
        return kh_err_set(err, KH_EINVAL, "eval: a task and a solution are required");
    kh_task *t = NULL;
    kh_task_opts to = {0};
    kh_status st = kh_task_open(task_path, &to, &t, err);
    if (st)
        return st;
    kh_eval_solution s = {.name = solution};
    unsigned char *text = NULL;
    if (is_file(solution)) {
        /* a Solution file from anywhere: its definition is the package's */
        size_t len = 0;
        if ((st = eval_read_whole(solution, &text, &len, err))) {
            kh_task_close(t);
            return st;
        }
        s = (kh_eval_solution){.json = (const char *)text, .json_len = len, .label = solution};
    }
    st = kh_eval_run_task(ev, t, &s, o, traces, err);
    free(text);
    kh_task_close(t);
    return st;
}

kh_status kh_eval_run_task(kh_eval *ev, const kh_task *t, const kh_eval_solution *s,
                           const kh_eval_opts *o, json_t **traces, kh_err *err)
{
    kh_eval_opts defo;
    if (!o) {
        kh_eval_opts_default(&defo);
        o = &defo;
    }
    *traces = NULL;
    if (!t || !t->set || !s || !!s->name == !!s->json)
        return kh_err_set(err, KH_EINVAL, "eval: a task and a solution (a name in it or a "
                          "Solution JSON) are required");
    const char *solution = s->name ? s->name : s->label ? s->label : "solution";
    kh_status st = check_opts(o, err);
    if (st || (st = eval_place(ev, o, err)))
        return st;
    eval_refs_trim(ev);
    /* the package as loaded, once (kh_task_open): its hash goes with every
     * verdict, and a file that has changed on disk since is named there
     * (nothing is read again: the loaded version is what is used).  A
     * package with errors (a JSON syntax error, a bad workload line) is
     * refused, the first error named with its file and line. */
    run_sol r = {0};
    if (!(st = kh_task_check_errors(t->set, t->path, err)) &&
        !(st = find_solution(t->set, s, solution, t->path, o, &r, err)))
        st = run(ev, t, &r, o, traces, err);
    kh_task_set_free(r.S);
    return st;
}
