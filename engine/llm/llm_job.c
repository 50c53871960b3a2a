/* llm_job.c: one call in flight and what every part of the client does to
 * it (llm_job.h): its buffers and stream state, the delta hook, the record's
 * common fields and the finish that redacts keys from the record and the raw
 * stream, and the client's replay counters and store.  The bottom of the llm
 * units: the client loop (llm_client.c), the wire formats (llm_wire.c) and
 * the offline providers (llm_offline.c) call it; it calls none of them. */
#include "llm/llm_job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const llm_dialect_names[] = {"chat", "responses", "anthropic", "none"};

int llm_buf_add(llm_buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

void llm_buf_free(llm_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

void llm_stream_reset(llm_stream *st)
{
    llm_buf_free(&st->text);
    llm_buf_free(&st->reasoning);
    json_decref(st->usage_raw);
    json_decref(st->error);
    memset(st, 0, sizeof *st);
}

/* ---- keys and errors -------------------------------------------------------- */

size_t kh_llm_redact(char *s, size_t n, const char *secret)
{
    size_t k = secret ? strlen(secret) : 0, count = 0;
    if (k < 4 || !s)
        return 0;
    for (size_t i = 0; i + k <= n;) {
        char *hit = memmem(s + i, n - i, secret, k);
        if (!hit)
            break;
        memset(hit, '*', k);
        count++;
        i = (size_t)(hit - s) + k;
    }
    return count;
}

/* Redact every string in a JSON value (in place: strings are replaced). */
static void redact_json(json_t *v, const char *secret)
{
    size_t i;
    const char *k;
    json_t *x;
    void *tmp;
    if (json_is_object(v)) {
        json_object_foreach_safe(v, tmp, k, x) {
            if (json_is_string(x)) {
                if (strstr(json_string_value(x), secret)) {
                    char *d = kh_strdup(json_string_value(x));
                    if (d) {
                        kh_llm_redact(d, strlen(d), secret);
                        json_object_set_new(v, k, json_string(d));
                        free(d);
                    }
                }
            } else {
                redact_json(x, secret);
            }
        }
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, x) {
            if (json_is_string(x)) {
                if (strstr(json_string_value(x), secret)) {
                    char *d = kh_strdup(json_string_value(x));
                    if (d) {
                        kh_llm_redact(d, strlen(d), secret);
                        json_array_set_new(v, i, json_string(d));
                        free(d);
                    }
                }
            } else {
                redact_json(x, secret);
            }
        }
    }
}

const char *llm_job_key(const llm_job *j)
{
    if (!j->o.api_key_env[0])
        return NULL;
    const char *k = getenv(j->o.api_key_env);
    return k && *k ? k : NULL;
}

json_t *llm_error_json(const char *kind, kh_status code, const char *msg, long http_status,
                       const char *type)
{
    json_t *e = json_pack("{s:s, s:s, s:s}", "kind", kind, "code", kh_status_name(code),
                          "message", msg ? msg : "");
    if (http_status)
        json_object_set_new(e, "http_status", json_integer(http_status));
    if (type)
        json_object_set_new(e, "type", json_string(type));
    return e;
}

void llm_job_delta(llm_job *j, const char *kind, const char *s, size_t n)
{
    if (j->client->delta)
        j->client->delta(j->client->delta_ud, j->id, kind, s, n);
}

/* ---- the client's state ------------------------------------------------------ */

llm_job *llm_jobs(kh_llm *c)
{
    return c->jobs;
}

struct kh_store *llm_client_store(kh_llm *c)
{
    return c->store;
}

json_t *llm_client_replay_runs(kh_llm *c)
{
    if (!c->replay_runs)
        c->replay_runs = json_object();
    return c->replay_runs;
}

int llm_replay_next(kh_llm *c, const char *dir)
{
    for (replay_counter *r = c->replays; r; r = r->nx)
        if (!strcmp(r->dir, dir))
            return r->next++;
    replay_counter *r = calloc(1, sizeof *r);
    if (!r)
        return 0;
    r->dir = kh_strdup(dir);
    if (!r->dir) {
        free(r);
        return 0;
    }
    r->next = 1;
    r->nx = c->replays;
    c->replays = r;
    return 0;
}

/* ---- the record ------------------------------------------------------------ */

json_t *llm_record_base(llm_job *j)
{
    json_t *label = json_object_get(j->req, "label");
    json_t *r = json_pack("{s:I, s:s, s:s, s:b, s:s, s:O, s:I}", "id", (json_int_t)j->id,
                          "provider", j->provider, "dialect", llm_dialect_names[j->dialect],
                          "replay", j->kind == 'r', "fingerprint", j->fingerprint, "warnings",
                          j->warnings, "retries", (json_int_t)(j->attempt > 0 ? j->attempt - 1 : 0));
    const char *model = json_string_value(json_object_get(j->req, "model"));
    if (model)
        json_object_set_new(r, "model", json_string(model));
    if (label)
        json_object_set(r, "label", label);
    static const char *const links[] = {"run", "round"};
    for (size_t i = 0; i < KH_ARRAY_LEN(links); i++) {
        json_t *v = json_object_get(j->req, links[i]);
        if (v)
            json_object_set(r, links[i], v);
    }
    json_object_set(r, "attempts", j->attempts);
    /* HTTP calls record their wire body (http_finish); the offline providers
     * the caller's request, so every transcript says what was asked. */
    if (j->kind != 'h')
        json_object_set_new(r, "request", json_deep_copy(j->req));
    json_object_set_new(r, "submitted_at", json_real(kh_wall_now() - (kh_now() - j->t_submit)));
    json_object_set_new(r, "latency_s", json_real(kh_now() - j->t_submit));
    return r;
}

void llm_job_finish(llm_job *j, json_t *record)
{
    kh_llm_result *res = calloc(1, sizeof *res);
    if (!res) {
        json_decref(record);
        return; /* out of memory: the job stays; poll retries finishing it */
    }
    res->id = j->id;
    res->record = record;
    res->raw = j->raw.p ? j->raw.p : kh_strdup("");
    res->raw_len = j->raw.len;
    memset(&j->raw, 0, sizeof j->raw);
    /* The call's own key, and the standard key variables too: an agent
     * command or a server may echo any of them, and a record must never
     * carry one (the store would refuse it, losing the transcript). */
    const char *keys[] = {llm_job_key(j), getenv("ANTHROPIC_API_KEY"), getenv("OPENAI_API_KEY"),
                          getenv("KHLUA_API_KEY")};
    for (size_t i = 0; i < KH_ARRAY_LEN(keys); i++) {
        if (!keys[i] || strlen(keys[i]) < (i ? 8u : 1u))
            continue;
        redact_json(record, keys[i]);
        if (res->raw)
            kh_llm_redact(res->raw, res->raw_len, keys[i]);
    }
    j->result = res;
    j->queued = 0;
}
