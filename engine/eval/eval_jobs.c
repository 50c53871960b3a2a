/* eval_jobs.c: the scheduler (eval_int.h).  Owns the jobs a run's stages
 * file (eval_post), starting them on idle workers of the pools (a
 * workload's gpu jobs in its GPU group: docs/scale-out.md), collecting
 * their replies and where they ran, and dropping them once their workload
 * is done.  What a request holds is eval_request.c's; what a reply means,
 * the stages'. */
#include "eval/eval_int.h"

#include <stdlib.h>
#include <string.h>

static void job_free(job *j)
{
    json_decref(j->params);
    free(j->pl);
    kh_msg_free(&j->res.reply);
    json_decref(j->placement);
    free(j);
}

/* Drop the jobs of workload wl (all when wl is SIZE_MAX). */
void eval_drop_jobs(kh_eval *ev, size_t wl)
{
    for (job **pj = &ev->jobs; *pj;) {
        job *j = *pj;
        if (wl == SIZE_MAX || j->wl == wl) {
            *pj = j->next;
            job_free(j);
        } else {
            pj = &j->next;
        }
    }
}

/* The job keeps a copy of the request and its payload; the stage that
 * filed it reads the reply once eval_run_jobs has run it. */
kh_status eval_post(wctx *c, wstate *s, int host, const json_t *params, const art *a,
                    kh_err *err)
{
    /* artifact first in the payload */
    if (c->pl_len < a->len || memcmp(c->pl, a->bytes, a->len))
        return kh_err_set(err, KH_ESTATE, "request payload out of order");
    if (s->nposted == EVAL_MAX_POSTED)
        return kh_err_set(err, KH_ESTATE, "more than %d requests filed at once",
                          (int)EVAL_MAX_POSTED);
    job *j = calloc(1, sizeof *j);
    if (!j || !(j->pl = malloc(c->pl_len ? c->pl_len : 1))) {
        free(j);
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    j->host = host;
    j->wl = c->wl;
    j->stage = (int)s->stage;
    j->t_post = kh_now();
    j->params = json_incref((json_t *)params);
    memcpy(j->pl, c->pl, c->pl_len);
    j->pl_len = c->pl_len;
    /* in filing order: the workloads' requests start in workload order */
    job **pj = &c->ev->jobs;
    while (*pj)
        pj = &(*pj)->next;
    *pj = j;
    s->posted[s->nposted++] = j;
    return KH_OK;
}

/* Start queued jobs on idle workers: a workload's GPU jobs only in its GPU
 * group; live idle workers before empty slots, so the pool does not start
 * more processes than the work needs.  wl_group[wl] holds the workload's
 * position in its task package until its first GPU job starts, then its
 * group: position mod the number of groups.  So the GPU of a workload does
 * not depend on what else is evaluated: the candidate and the incumbent,
 * evaluated in two calls (the promotion gate's paired comparison), meet on
 * one GPU for every workload. */
static void dispatch(kh_eval *ev, const kh_eval_opts *o, int *wl_group)
{
    for (job *j = ev->jobs; j; j = j->next) {
        if (j->state != JOB_QUEUED)
            continue;
        kh_err perr;
        kh_err_clear(&perr);
        kh_pool *p = eval_pool_for(ev, j->host, o->host_memory_bytes, &perr);
        if (!p) {
            j->res.st = perr.code ? perr.code : KH_ECHILD;
            j->res.err = perr;
            j->res.not_run = 1;
            j->state = JOB_DONE;
            j->t_done = kh_now();
            continue;
        }
        size_t n = kh_pool_size(p), k = eval_group_size(ev, j->host), pick = n;
        int want = -1;
        if (!j->host) {
            if (wl_group[j->wl] < 0) /* the position, encoded */
                wl_group[j->wl] = (int)((size_t)(-wl_group[j->wl] - 1) % (n / k));
            want = wl_group[j->wl];
        }
        for (int live = 1; live >= 0 && pick == n; live--)
            for (size_t sl = 0; sl < n && pick == n; sl++)
                if ((want < 0 || sl / k == (size_t)want) && !kh_pool_slot_busy(p, sl) &&
                    (kh_pool_slot_pid(p, sl) != 0) == live)
                    pick = sl;
        if (pick == n)
            continue; /* all busy: next round */
        kh_pool_stats before, after;
        kh_pool_stats_get(p, &before);
        /* the worker's own limits (CPU time) sit above the deadline, so an
         * overrun is seen here first, as a TIMEOUT */
        double dl = json_number_value(json_object_get(j->params, "deadline_s"));
        kh_status st = kh_pool_submit_to(p, "evaluate", j->params, j->pl, j->pl_len,
                                         (dl > 0 ? dl : o->deadline_s) + 1, pick, &j->res.err);
        kh_pool_stats_get(p, &after);
        if (st) {
            /* No request went out: the pool could not start a worker (no
             * GPU, the role's init failed, a role that keeps dying).  Not
             * the candidate's doing, so not a verdict. */
            j->res.st = st;
            j->res.not_run = after.calls == before.calls;
            j->state = JOB_DONE;
            j->t_done = kh_now();
            continue;
        }
        j->state = JOB_RUNNING;
        j->slot = pick;
    }
}

/* Collect finished requests of pool p. */
static size_t collect(kh_eval *ev, kh_pool *p, int host, double wait_s)
{
    kh_pool_done d[64];
    size_t nd = kh_pool_wait(p, wait_s, d, KH_ARRAY_LEN(d));
    for (size_t i = 0; i < nd; i++) {
        job *j = ev->jobs;
        while (j && !(j->state == JOB_RUNNING && j->host == host && j->slot == d[i].slot))
            j = j->next;
        if (!j) {
            kh_msg_free(&d[i].d.reply);
            continue;
        }
        j->res.st = d[i].d.status;
        j->res.err = d[i].d.err;
        j->res.reply = d[i].d.reply;
        j->res.seconds = d[i].d.seconds;
        j->t_done = kh_now();
        j->placement = eval_placement_json(ev, p, d[i].slot, d[i].d.w);
        j->state = JOB_DONE;
        /* a candidate that crashed its host worker broke that process, not
         * the machine: as in the candidate's stage, no backoff for the next one */
        if (host && d[i].d.worker_died && d[i].d.status == KH_ECHILD && !d[i].d.reply.head)
            kh_pool_reset(p);
    }
    return nd;
}

/* Run every queued job, in parallel across the workers; returns when all are
 * done (KH_EINTR on Ctrl-C: the workers in flight are stopped). */
kh_status eval_run_jobs(kh_eval *ev, const kh_eval_opts *o, int *wl_group, kh_err *err)
{
    for (;;) {
        if (kh_engine_stop_requested(ev->e)) {
            eval_free_pools(ev);
            ev->place_key[0] = '\0';
            return kh_err_set(err, KH_EINTR, "evaluation interrupted");
        }
        dispatch(ev, o, wl_group);
        size_t fh = ev->host ? kh_pool_in_flight(ev->host) : 0;
        size_t fg = ev->gpu ? kh_pool_in_flight(ev->gpu) : 0;
        if (!fh && !fg) {
            for (job *j = ev->jobs; j; j = j->next)
                if (j->state == JOB_QUEUED)
                    return kh_err_set(err, KH_ESTATE, "a worker request could not be placed");
            return KH_OK;
        }
        double w = fh && fg ? 0.01 : 0.25;
        if (fh)
            collect(ev, ev->host, 1, w);
        if (fg)
            collect(ev, ev->gpu, 0, w);
    }
}
