/* llm_client.c: the model client's engine room (llm.h's kh_llm_*).  Owns the
 * libcurl multi loop (many streamed calls on one thread), the attempt state
 * machine (classify, back off, retry), the per-provider circuit breaker and
 * quota stop, timeouts and cancellation.  Wire formats live in llm_wire.c;
 * the command and replay providers in llm_offline.c; a job's record, with
 * keys redacted, and the state every unit shares in llm_job.c. */
#include "llm/llm_job.h"
#include "llm/llm_offline.h"
#include "llm/llm_wire.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define RAW_MAX ((size_t)256 << 20) /* one response body; beyond it the call fails */

struct llm_provider {
    char *key; /* provider name + base URL */
    int consecutive; /* failures in a row that count toward the breaker */
    double open_until;
    int inflight;
    char *quota_msg; /* set once a quota / spend-limit 429 was seen */
    llm_provider *next;
};

/* ---- small helpers -------------------------------------------------------- */

static double rand01(kh_llm *c)
{
    /* xorshift64*: jitter needs no cryptographic strength */
    c->rng ^= c->rng >> 12;
    c->rng ^= c->rng << 25;
    c->rng ^= c->rng >> 27;
    return (double)((c->rng * 0x2545F4914F6CDD1DULL) >> 11) / 9007199254740992.0;
}

double kh_llm_backoff(int attempt, double base, double cap, double u)
{
    double hi = base;
    for (int i = 0; i < attempt && hi < cap; i++)
        hi *= 2;
    if (hi > cap)
        hi = cap;
    return u * hi;
}

static double parse_http_date(const char *s)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *e = strptime(s, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    if (!e)
        return -1;
    return (double)timegm(&tm) - kh_wall_now();
}

double kh_llm_retry_after(const char *after_ms, const char *after, double cap)
{
    double v = -1;
    char *end;
    if (after_ms && *after_ms) {
        double ms = strtod(after_ms, &end);
        if (end != after_ms && ms == ms)
            v = ms / 1000.0;
    }
    if (v < 0 && after && *after) {
        double s = strtod(after, &end);
        while (end && isspace((unsigned char)*end))
            end++;
        if (end != after && !*end)
            v = s;
        else
            v = parse_http_date(after); /* a date in the past is negative: ignored */
    }
    if (!(v > 0) || v > cap)
        return -1;
    return v;
}

static const char *err_str(const json_t *e, const char *k)
{
    return json_string_value(json_object_get(e, k));
}

int kh_llm_retryable(long status, int should_retry, const json_t *body, int *quota)
{
    *quota = 0;
    const json_t *e = json_object_get(body, "error");
    if (!json_is_object(e))
        e = body; /* vLLM's flat {"object":"error", ...} */
    if (status == 429) {
        static const char *const stop_codes[] = {
            "insufficient_quota", "credit_balance_exhausted", "organization_spend_limit_exceeded",
            "project_spend_limit_exceeded", "organization_usage_limit_exceeded",
            "enforced_spend_limit_reached", "billing_hard_limit_reached",
        };
        const char *vals[3] = {err_str(e, "code"), err_str(e, "type"),
                               err_str(json_object_get(e, "details"), "error_code")};
        for (int k = 0; k < 3; k++)
            for (size_t i = 0; vals[k] && i < KH_ARRAY_LEN(stop_codes); i++)
                if (!strcmp(vals[k], stop_codes[i])) {
                    *quota = 1;
                    return 0;
                }
    }
    if (should_retry >= 0)
        return should_retry;
    if (status == 0)
        return 1; /* connection failures and timeouts */
    return status == 408 || status == 409 || status == 429 || status >= 500;
}

/* ---- client --------------------------------------------------------------- */

kh_llm *kh_llm_new(kh_engine *e, kh_err *err)
{
    kh_llm *c = calloc(1, sizeof *c);
    if (!c) {
        kh_err_set(err, KH_ENOMEM, "out of memory");
        return NULL;
    }
    c->engine = e;
    c->multi = curl_multi_init();
    if (!c->multi) {
        free(c);
        kh_err_set(err, KH_ENET, "curl_multi_init failed");
        return NULL;
    }
    /* HTTP/1.1 only (llm-apis.md §4): concurrency from several connections */
    CURLMcode mc = curl_multi_setopt(c->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_NOTHING);
    if (mc == CURLM_OK)
        mc = curl_multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
    if (mc != CURLM_OK) {
        curl_multi_cleanup(c->multi);
        free(c);
        kh_err_set(err, KH_ENET, "curl_multi_setopt: %s", curl_multi_strerror(mc));
        return NULL;
    }
    c->next_id = 1;
    c->rng = (uint64_t)(kh_wall_now() * 1e6) ^ ((uint64_t)(uintptr_t)c << 16) ^ 0x9E3779B97F4A7C15ULL;
    if (!c->rng)
        c->rng = 1;
    return c;
}

void kh_llm_set_sink(kh_llm *c, kh_llm_sink_fn fn, void *ud)
{
    c->sink = fn;
    c->sink_ud = ud;
}

void kh_llm_set_delta(kh_llm *c, kh_llm_delta_fn fn, void *ud)
{
    c->delta = fn;
    c->delta_ud = ud;
}

void kh_llm_set_store(kh_llm *c, struct kh_store *s)
{
    if (s != c->store) {
        json_decref(c->replay_runs);
        c->replay_runs = NULL;
    }
    c->store = s;
}

void kh_llm_result_free(kh_llm_result *r)
{
    if (!r)
        return;
    json_decref(r->record);
    free(r->raw);
    free(r);
}

static void attempt_cleanup(llm_job *j)
{
    if (j->easy) {
        if (j->in_multi) {
            CURLMcode mc = curl_multi_remove_handle(j->client->multi, j->easy);
            (void)mc; /* nothing sensible to do: the handle is cleaned up next */
            j->in_multi = 0;
            if (j->prov && j->prov->inflight > 0)
                j->prov->inflight--;
        }
        curl_easy_cleanup(j->easy);
        j->easy = NULL;
    }
    curl_slist_free_all(j->hdrs);
    j->hdrs = NULL;
    kh_sse_free(j->sse);
    j->sse = NULL;
}

static void job_free(llm_job *j)
{
    attempt_cleanup(j);
    llm_command_kill(j);
    json_decref(j->req);
    json_decref(j->body);
    free(j->body_str);
    free(j->url);
    llm_buf_free(&j->raw);
    json_decref(j->resp_headers);
    llm_stream_reset(&j->st);
    free(j->ctx);
    json_decref(j->attempts);
    json_decref(j->warnings);
    kh_llm_result_free(j->result);
    free(j);
}

void kh_llm_free(kh_llm *c)
{
    if (!c)
        return;
    for (llm_job *j = c->jobs, *n; j; j = n) {
        n = j->next;
        job_free(j);
    }
    for (llm_provider *p = c->provs, *n; p; p = n) {
        n = p->next;
        free(p->key);
        free(p->quota_msg);
        free(p);
    }
    for (replay_counter *r = c->replays, *n; r; r = n) {
        n = r->nx;
        free(r->dir);
        free(r);
    }
    json_decref(c->replay_runs);
    curl_multi_cleanup(c->multi);
    free(c);
}

size_t kh_llm_pending(const kh_llm *c)
{
    size_t n = 0;
    for (llm_job *j = c->jobs; j; j = j->next)
        n++;
    return n;
}

static llm_provider *provider_for(kh_llm *c, const llm_job *j)
{
    char key[2048];
    snprintf(key, sizeof key, "%s %s", j->provider, j->url ? j->url : "");
    for (llm_provider *p = c->provs; p; p = p->next)
        if (!strcmp(p->key, key))
            return p;
    llm_provider *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->key = kh_strdup(key);
    if (!p->key) {
        free(p);
        return NULL;
    }
    p->next = c->provs;
    c->provs = p;
    return p;
}

/* The request's fingerprint: XXH3 of the messages as JSON, so a replay
 * directory can hold answers keyed by the prompt. */
static void fingerprint(llm_job *j)
{
    char *s = json_dumps(json_object_get(j->req, "messages"), JSON_COMPACT | JSON_SORT_KEYS);
    XXH64_hash_t h = XXH3_64bits(s ? s : "", s ? strlen(s) : 0);
    free(s);
    snprintf(j->fingerprint, sizeof j->fingerprint, "%016llx", (unsigned long long)h);
}

kh_status kh_llm_submit(kh_llm *c, const json_t *req, int64_t *id, kh_err *err)
{
    llm_job *j = calloc(1, sizeof *j);
    if (!j)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    j->client = c;
    j->cmd_fd = -1;
    j->req = json_deep_copy(req);
    j->attempts = json_array();
    j->warnings = json_array();
    j->ctx = calloc(1, sizeof *j->ctx);
    if (!j->req || !j->attempts || !j->warnings || !j->ctx) {
        job_free(j);
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    kh_status st = llm_wire_prepare(j, err);
    if (st == KH_OK && j->kind == 'h') {
        j->prov = provider_for(c, j);
        if (!j->prov)
            st = kh_err_set(err, KH_ENOMEM, "out of memory");
        else if (j->prov->quota_msg)
            st = kh_err_set(err, KH_ESTATE, "%s", j->prov->quota_msg);
        else if (!llm_job_key(j) && !j->compat)
            st = kh_err_set(err, KH_EINVAL, "%s is not set: export it to use provider %s",
                            j->o.api_key_env, j->provider);
    }
    if (st != KH_OK) {
        job_free(j);
        return st;
    }
    fingerprint(j);
    j->ctx->st = &j->st;
    j->ctx->dialect = j->dialect;
    j->ctx->job = j;
    j->id = c->next_id++;
    j->t_submit = kh_now();
    j->wake_at = j->t_submit;
    j->queued = 1;
    j->next = c->jobs;
    c->jobs = j;
    if (id)
        *id = j->id;
    return KH_OK;
}

static void push_headers_redacted(llm_job *j, json_t *rec)
{
    json_t *h = json_object();
    json_object_set_new(h, "content-type", json_string("application/json"));
    if (j->dialect == D_ANTHROPIC) {
        json_object_set_new(h, "x-api-key", json_string("[redacted]"));
        json_object_set_new(h, "anthropic-version", json_string(j->o.anthropic_version));
        if (j->o.anthropic_beta[0])
            json_object_set_new(h, "anthropic-beta", json_string(j->o.anthropic_beta));
    } else if (llm_job_key(j)) {
        json_object_set_new(h, "authorization", json_string("Bearer [redacted]"));
    }
    json_object_set_new(rec, "request_headers", h);
}

/* Finish an HTTP job: success (err_obj NULL) or failure. */
static void http_finish(llm_job *j, json_t *err_obj, long http_status)
{
    json_t *r = llm_record_base(j);
    json_object_set_new(r, "ok", json_boolean(err_obj == NULL));
    json_object_set_new(r, "url", json_string(j->url));
    json_object_set(r, "request", j->body);
    push_headers_redacted(j, r);
    json_object_set_new(r, "response_headers",
                        j->resp_headers ? json_incref(j->resp_headers) : json_object());
    const char *rid = json_string_value(json_object_get(j->resp_headers, "x-request-id"));
    if (!rid)
        rid = json_string_value(json_object_get(j->resp_headers, "request-id"));
    json_object_set_new(r, "request_id", rid ? json_string(rid) : json_null());
    json_object_set_new(r, "http_status", json_integer(http_status));
    json_object_set_new(r, "raw_bytes", json_integer((json_int_t)j->raw.len));
    char *text = kh_utf8_sanitize(j->st.text.p ? j->st.text.p : "", j->st.text.len, NULL);
    char *reas = kh_utf8_sanitize(j->st.reasoning.p ? j->st.reasoning.p : "", j->st.reasoning.len,
                                  NULL);
    json_object_set_new(r, "text", json_string(text ? text : ""));
    json_object_set_new(r, "reasoning", json_string(reas ? reas : ""));
    free(text);
    free(reas);
    json_object_set_new(r, "finish_reason", j->st.finish[0] ? json_string(j->st.finish)
                                                           : json_null());
    const char *f = j->st.finish;
    json_object_set_new(r, "truncated",
                        json_boolean(!strcmp(f, "length") || !strcmp(f, "max_tokens") ||
                                     !strcmp(f, "max_output_tokens")));
    json_t *usage = llm_wire_usage(j->dialect, j->st.usage_raw);
    /* A compatible server that reports far fewer prompt tokens than a quarter
     * of the prompt's bytes / 4 may have cut it (Ollama's default context). */
    json_int_t in = json_integer_value(json_object_get(usage, "input"));
    size_t body_bytes = strlen(j->body_str);
    if (j->compat && in > 0 && body_bytes > 8192 && (double)in * 16 < (double)body_bytes)
        json_array_append_new(j->warnings,
                              json_string("the server counted far fewer prompt tokens than the "
                                          "prompt holds: it may have truncated the prompt"));
    if (j->st.repaired_utf8)
        json_array_append_new(j->warnings,
                              json_string("the stream held invalid UTF-8; the bad bytes became "
                                          "U+FFFD"));
    json_object_set_new(r, "usage", usage);
    json_object_set_new(r, "first_token_s",
                        j->st.t_first ? json_real(j->st.t_first - j->t_attempt) : json_null());
    if (err_obj)
        json_object_set_new(r, "error", err_obj);
    llm_job_finish(j, r);
}

/* ---- one attempt ----------------------------------------------------------- */

static size_t on_write(char *p, size_t sz, size_t nm, void *ud)
{
    llm_job *j = ud;
    size_t n = sz * nm;
    j->last_byte = kh_now();
    if (j->raw.len + n > RAW_MAX) {
        j->raw_overflow = 1;
        return 0; /* aborts the transfer */
    }
    if (llm_buf_add(&j->raw, p, n))
        return 0;
    long code = 0;
    if (curl_easy_getinfo(j->easy, CURLINFO_RESPONSE_CODE, &code) != CURLE_OK)
        code = 0;
    const char *ct = json_string_value(json_object_get(j->resp_headers, "content-type"));
    /* Only a 200 event stream goes through the SSE parser; error bodies and
     * whole-JSON replies are parsed when the transfer ends. */
    if (code / 100 == 2 && (!ct || strstr(ct, "text/event-stream"))) {
        kh_err err;
        kh_status st = kh_sse_feed(j->sse, p, n, &err);
        if (st != KH_OK && !j->st.malformed) {
            j->st.malformed = 1;
            snprintf(j->st.malformed_msg, sizeof j->st.malformed_msg, "%.190s", err.msg);
        }
    }
    return n;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *ud)
{
    llm_job *j = ud;
    size_t n = sz * nm;
    j->last_byte = kh_now();
    if (n >= 5 && !memcmp(p, "HTTP/", 5)) { /* a new response (after a 100 Continue) */
        json_object_clear(j->resp_headers);
        return n;
    }
    const char *colon = memchr(p, ':', n);
    if (!colon || colon == p)
        return n;
    char name[128];
    size_t nl = (size_t)(colon - p);
    if (nl >= sizeof name)
        return n;
    for (size_t i = 0; i < nl; i++)
        name[i] = (char)tolower((unsigned char)p[i]);
    name[nl] = '\0';
    const char *v = colon + 1, *end = p + n;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
        end--;
    char *val = kh_utf8_sanitize(v, (size_t)(end - v), NULL);
    if (val)
        json_object_set_new(j->resp_headers, name, json_string(val));
    free(val);
    return n;
}

static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt, (void)dn, (void)ut, (void)un;
    llm_job *j = ud;
    if (j->cancelled)
        return 1;
    if (kh_now() - j->last_byte > j->o.idle_timeout) {
        j->idle_expired = 1;
        return 1;
    }
    return 0;
}

#define SETOPT(opt, val)                                                                     \
    do {                                                                                     \
        CURLcode rc_ = curl_easy_setopt(j->easy, opt, val);                                  \
        if (rc_ != CURLE_OK)                                                                 \
            return kh_err_set(err, KH_ENET, "curl_easy_setopt(%s): %s", #opt,                \
                              curl_easy_strerror(rc_));                                      \
    } while (0)

static kh_status add_header(llm_job *j, const char *h, kh_err *err)
{
    struct curl_slist *n = curl_slist_append(j->hdrs, h);
    if (!n)
        return kh_err_set(err, KH_ENOMEM, "out of memory building headers");
    j->hdrs = n;
    return KH_OK;
}

static kh_status start_attempt(kh_llm *c, llm_job *j, kh_err *err)
{
    attempt_cleanup(j);
    llm_stream_reset(&j->st);
    j->raw.len = 0;
    j->idle_expired = j->raw_overflow = 0;
    json_decref(j->resp_headers);
    j->resp_headers = json_object();
    j->sse = kh_sse_new(llm_wire_dispatch, j->ctx, 0);
    j->easy = curl_easy_init();
    if (!j->sse || !j->easy || !j->resp_headers)
        return kh_err_set(err, KH_ENOMEM, "out of memory starting a request");
    char line[512];
    const char *key = llm_job_key(j);
    if (add_header(j, "Content-Type: application/json", err) ||
        add_header(j, "Accept: text/event-stream", err) || add_header(j, "Expect:", err))
        return err->code;
    if (j->dialect == D_ANTHROPIC) {
        snprintf(line, sizeof line, "anthropic-version: %s", j->o.anthropic_version);
        if (add_header(j, line, err))
            return err->code;
        if (j->o.anthropic_beta[0]) {
            snprintf(line, sizeof line, "anthropic-beta: %s", j->o.anthropic_beta);
            if (add_header(j, line, err))
                return err->code;
        }
    }
    if (key) {
        /* The key lives in this header list only as long as the attempt. */
        size_t n = strlen(key) + 32;
        char *h = malloc(n);
        if (!h)
            return kh_err_set(err, KH_ENOMEM, "out of memory");
        snprintf(h, n, j->dialect == D_ANTHROPIC ? "x-api-key: %s" : "Authorization: Bearer %s",
                 key);
        kh_status st = add_header(j, h, err);
        memset(h, 0, strlen(h));
        free(h);
        if (st)
            return st;
    }
    SETOPT(CURLOPT_URL, j->url);
    SETOPT(CURLOPT_PROTOCOLS_STR, "http,https");
    SETOPT(CURLOPT_FOLLOWLOCATION, 0L); /* never carry a key to another host */
    SETOPT(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    SETOPT(CURLOPT_POST, 1L);
    SETOPT(CURLOPT_POSTFIELDS, j->body_str);
    SETOPT(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(j->body_str));
    SETOPT(CURLOPT_HTTPHEADER, j->hdrs);
    SETOPT(CURLOPT_WRITEFUNCTION, on_write);
    SETOPT(CURLOPT_WRITEDATA, j);
    SETOPT(CURLOPT_HEADERFUNCTION, on_header);
    SETOPT(CURLOPT_HEADERDATA, j);
    SETOPT(CURLOPT_NOPROGRESS, 0L);
    SETOPT(CURLOPT_XFERINFOFUNCTION, on_progress);
    SETOPT(CURLOPT_XFERINFODATA, j);
    SETOPT(CURLOPT_NOSIGNAL, 1L);
    SETOPT(CURLOPT_CONNECTTIMEOUT_MS, (long)(j->o.connect_timeout * 1000));
    double limit = j->o.total_timeout;
    if (j->o.deadline > 0 && j->t_submit + j->o.deadline - kh_now() < limit)
        limit = j->t_submit + j->o.deadline - kh_now();
    SETOPT(CURLOPT_TIMEOUT_MS, limit > 0.001 ? (long)(limit * 1000) : 1L);
    SETOPT(CURLOPT_ACCEPT_ENCODING, ""); /* whatever this libcurl can decode */
    SETOPT(CURLOPT_USERAGENT, "khlua/" KH_VERSION);
    SETOPT(CURLOPT_PRIVATE, j);
    CURLMcode mc = curl_multi_add_handle(c->multi, j->easy);
    if (mc != CURLM_OK)
        return kh_err_set(err, KH_ENET, "curl_multi_add_handle: %s", curl_multi_strerror(mc));
    j->in_multi = 1;
    j->prov->inflight++;
    j->attempt++;
    j->t_attempt = j->last_byte = kh_now();
    j->queued = 0;
    return KH_OK;
}

/* What an ended attempt's outcome says (v->kind NULL: it succeeded), for
 * end_attempt to act on.  v->etype may point into v->body, which the caller
 * frees, or into j->st.error. */
typedef struct attempt_verdict {
    const char *kind, *etype;
    kh_status code;
    int retry, quota, counts_for_breaker;
    char msg[1024];
    json_t *body;
} attempt_verdict;

/* The verdict on j's ended attempt: cc is curl's result, status the HTTP
 * status, partial set when the stream was cut inside an event. */
static void classify(llm_job *j, CURLcode cc, long status, int partial, attempt_verdict *v)
{
    const char *xsr = json_string_value(json_object_get(j->resp_headers, "x-should-retry"));
    int should = xsr ? (!strcmp(xsr, "true") ? 1 : !strcmp(xsr, "false") ? 0 : -1) : -1;
    *v = (attempt_verdict){.code = KH_ENET};
    if (j->cancelled) {
        v->kind = "cancelled";
        v->code = KH_EINTR;
        snprintf(v->msg, sizeof v->msg, "cancelled");
    } else if (cc != CURLE_OK) {
        v->kind = "timeout";
        v->code = KH_ETIMEOUT;
        if (j->idle_expired)
            snprintf(v->msg, sizeof v->msg, "no data for %.1f s (idle timeout)",
                     j->o.idle_timeout);
        else if (cc == CURLE_OPERATION_TIMEDOUT)
            snprintf(v->msg, sizeof v->msg, "%s", curl_easy_strerror(cc));
        else if (j->raw_overflow)
            v->kind = "stream", v->code = KH_EPARSE,
            snprintf(v->msg, sizeof v->msg, "response larger than %zu bytes", RAW_MAX);
        else
            v->kind = "stream",
            snprintf(v->msg, sizeof v->msg, "transfer failed: %s", curl_easy_strerror(cc));
        v->retry = !j->raw_overflow && kh_llm_retryable(0, -1, NULL, &v->quota);
        v->counts_for_breaker = 1;
    } else if (status / 100 != 2) {
        v->body = json_loadb(j->raw.p ? j->raw.p : "", j->raw.len, 0, NULL);
        const json_t *e = json_object_get(v->body, "error");
        if (!json_is_object(e))
            e = v->body;
        const char *m = json_string_value(json_object_get(e, "message"));
        v->etype = json_string_value(json_object_get(e, "type"));
        if (!v->etype)
            v->etype = json_string_value(json_object_get(e, "code"));
        v->retry = kh_llm_retryable(status, should, v->body, &v->quota);
        v->kind = v->quota ? "quota" : "http";
        v->code = KH_ENET;
        char snippet[300];
        if (!m)
            snprintf(snippet, sizeof snippet, "%.200s", j->raw.p ? j->raw.p : "");
        snprintf(v->msg, sizeof v->msg, "HTTP %ld from %s: %s", status, j->provider,
                 m ? m : snippet);
        /* llama.cpp answers 503 "Loading model" while it starts: waiting is
         * the cure, so it does not count toward the breaker. */
        int loading = status == 503 && m && strstr(m, "Loading model");
        v->counts_for_breaker = (status >= 500 || status == 0) && !loading;
    } else if (j->st.error) {
        const json_t *e = j->st.error;
        const char *m = json_string_value(json_object_get(e, "message"));
        v->etype = json_string_value(json_object_get(e, "type"));
        if (!v->etype || !strcmp(v->etype, "error")) /* Responses: {"type":"error","code":...} */
            v->etype = json_string_value(json_object_get(e, "code"));
        v->kind = "stream";
        snprintf(v->msg, sizeof v->msg, "error event after HTTP %ld from %s: %s%s%s", status,
                 j->provider, v->etype ? v->etype : "", v->etype ? ": " : "",
                 m ? m : "(no message)");
        static const char *const transient[] = {"overloaded_error", "api_error",
                                                "server_is_overloaded", "server_error",
                                                "rate_limit_error", "internal_error",
                                                "timeout_error"};
        v->retry = 0;
        for (size_t i = 0; v->etype && i < KH_ARRAY_LEN(transient); i++)
            if (!strcmp(v->etype, transient[i]))
                v->retry = 1;
        v->counts_for_breaker = v->retry;
    } else if (!j->st.terminal) {
        const char *ct = json_string_value(json_object_get(j->resp_headers, "content-type"));
        if (ct && strstr(ct, "application/json") &&
            llm_wire_parse_whole(j->dialect, j->raw.p ? j->raw.p : "", j->raw.len, &j->st) == 0) {
            json_array_append_new(j->warnings,
                                  json_string("the server answered with one JSON object, not "
                                              "a stream"));
        } else {
            v->kind = "stream";
            v->code = KH_EPARSE;
            snprintf(v->msg, sizeof v->msg, "stream from %s ended before its end event%s%s",
                     j->provider, partial ? " (cut inside an event)" : "",
                     j->st.malformed ? "; it also held malformed data" : "");
            v->retry = 1;
            v->counts_for_breaker = 1;
        }
    } else if (j->st.malformed) {
        v->kind = "stream";
        v->code = KH_EPARSE;
        snprintf(v->msg, sizeof v->msg, "malformed stream from %s: %s", j->provider,
                 j->st.malformed_msg);
        v->retry = 1;
    }
}

/* Decide what an ended attempt means: finish the job or schedule a retry. */
static void end_attempt(kh_llm *c, llm_job *j, CURLcode cc)
{
    long status = 0;
    if (curl_easy_getinfo(j->easy, CURLINFO_RESPONSE_CODE, &status) != CURLE_OK)
        status = 0;
    int partial = j->sse ? kh_sse_finish(j->sse) : 0;
    const char *after_ms = json_string_value(json_object_get(j->resp_headers, "retry-after-ms"));
    const char *after = json_string_value(json_object_get(j->resp_headers, "retry-after"));
    attempt_verdict v;
    classify(j, cc, status, partial, &v);
    double latency = kh_now() - j->t_attempt;
    llm_provider *p = j->prov;
    if (!v.kind) { /* success */
        p->consecutive = 0;
        attempt_cleanup(j);
        http_finish(j, NULL, status);
        json_decref(v.body);
        return;
    }
    if (v.counts_for_breaker && ++p->consecutive >= j->o.breaker_threshold)
        p->open_until = kh_now() + j->o.breaker_cooldown;
    double delay = -1;
    if (v.retry && !v.quota && j->attempt <= j->o.max_retries && !j->cancelled) {
        delay = kh_llm_retry_after(after_ms, after, j->o.retry_after_cap);
        if (delay < 0)
            delay = kh_llm_backoff(j->attempt - 1, j->o.backoff_base, j->o.backoff_cap,
                                   rand01(c));
    }
    int past_deadline = 0;
    if (delay >= 0 && j->o.deadline > 0 && kh_now() + delay > j->t_submit + j->o.deadline) {
        delay = -1; /* the retry could not start before the deadline */
        past_deadline = 1;
    }
    json_t *a = json_pack("{s:I, s:s, s:s, s:f}", "http_status", (json_int_t)status, "kind", v.kind,
                          "error", v.msg, "latency_s", latency);
    if (delay >= 0)
        json_object_set_new(a, "delay_s", json_real(delay));
    if (j->st.text.len)
        json_object_set_new(a, "partial_text_bytes", json_integer((json_int_t)j->st.text.len));
    json_array_append_new(j->attempts, a);
    if (delay >= 0) {
        if (j->st.text.len || j->st.reasoning.len)
            llm_job_delta(j, "retry", "", 0);
        attempt_cleanup(j);
        j->queued = 1;
        j->wake_at = kh_now() + delay;
        json_decref(v.body);
        return;
    }
    if (v.quota) {
        char qm[1200];
        snprintf(qm, sizeof qm, "%s: quota or spend limit reached, not retrying; add credit or "
                                "raise the limit, then run again", v.msg);
        free(p->quota_msg);
        p->quota_msg = kh_strdup(qm);
        snprintf(v.msg, sizeof v.msg, "%.1000s", qm);
    } else if (past_deadline) {
        v.kind = "timeout";
        v.code = KH_ETIMEOUT;
        char m2[1100];
        snprintf(m2, sizeof m2, "the call's deadline of %.1f s would pass before the next "
                                "attempt: %s", j->o.deadline, v.msg);
        snprintf(v.msg, sizeof v.msg, "%.1000s", m2);
    } else if (v.retry && !j->cancelled && j->attempt > 1) {
        v.kind = "retries";
        char m2[1100];
        snprintf(m2, sizeof m2, "gave up after %d attempts: %s", j->attempt, v.msg);
        snprintf(v.msg, sizeof v.msg, "%.1000s", m2);
    }
    attempt_cleanup(j);
    http_finish(j, llm_error_json(v.kind, v.code, v.msg, status, v.etype), status);
    json_decref(v.body);
}

/* ---- the loop ------------------------------------------------------------- */

static void start_ready(kh_llm *c)
{
    double now = kh_now();
    for (llm_job *j = c->jobs; j; j = j->next) {
        if (!j->queued || j->result || j->wake_at > now)
            continue;
        if (j->cancelled) {
            json_t *r = llm_record_base(j);
            json_object_set_new(r, "ok", json_false());
            json_object_set_new(r, "error", llm_error_json("cancelled", KH_EINTR, "cancelled", 0,
                                                           NULL));
            llm_job_finish(j, r);
            continue;
        }
        if (j->kind != 'h') {
            llm_offline_run(c, j);
            continue;
        }
        llm_provider *p = j->prov;
        if (j->o.deadline > 0 && now > j->t_submit + j->o.deadline) {
            char m[200];
            snprintf(m, sizeof m, "the call's deadline of %.1f s passed while it waited for the "
                                  "provider's circuit breaker", j->o.deadline);
            http_finish(j, llm_error_json("timeout", KH_ETIMEOUT, m, 0, NULL), 0);
            continue;
        }
        if (p->open_until > now || (p->consecutive >= j->o.breaker_threshold && p->inflight > 0)) {
            /* breaker open, or half open with its one probe in flight */
            if (!j->breaker_waits++)
                json_array_append_new(j->warnings,
                                      json_string("waited for the provider's circuit breaker"));
            j->wake_at = p->open_until > now ? p->open_until : now + 0.05;
            continue;
        }
        kh_err err;
        if (start_attempt(c, j, &err) != KH_OK) {
            attempt_cleanup(j);
            http_finish(j, llm_error_json("config", err.code, err.msg, 0, NULL), 0);
        }
    }
}

static double next_wake(kh_llm *c)
{
    double w = 1e300;
    for (llm_job *j = c->jobs; j; j = j->next)
        if (j->queued && !j->result && j->wake_at < w)
            w = j->wake_at;
    return w;
}

static size_t take_finished(kh_llm *c, kh_llm_result **out, size_t *n)
{
    size_t count = 0;
    for (llm_job *j = c->jobs; j; j = j->next)
        count += j->result != NULL;
    if (!count)
        return 0;
    kh_llm_result *arr = calloc(count, sizeof *arr);
    if (!arr)
        return 0;
    size_t k = 0;
    for (llm_job **pp = &c->jobs; *pp;) {
        llm_job *j = *pp;
        if (j->result) {
            if (c->sink)
                c->sink(c->sink_ud, j->result->record, j->result->raw, j->result->raw_len);
            arr[k++] = *j->result;
            free(j->result);
            j->result = NULL;
            *pp = j->next;
            job_free(j);
        } else {
            pp = &j->next;
        }
    }
    /* oldest first */
    for (size_t a = 0, b = k ? k - 1 : 0; a < b; a++, b--) {
        kh_llm_result t = arr[a];
        arr[a] = arr[b];
        arr[b] = t;
    }
    *out = arr;
    *n = k;
    return k;
}

kh_status kh_llm_poll(kh_llm *c, double timeout_s, kh_llm_result **out, size_t *n, kh_err *err)
{
    *out = NULL;
    *n = 0;
    double deadline = kh_now() + (timeout_s > 0 ? timeout_s : 0);
    for (;;) {
        if (c->engine && kh_engine_stop_requested(c->engine))
            return kh_err_set(err, KH_EINTR, "interrupted");
        start_ready(c);
        int running = 0;
        CURLMcode mc = curl_multi_perform(c->multi, &running);
        if (mc != CURLM_OK)
            return kh_err_set(err, KH_ENET, "curl_multi_perform: %s", curl_multi_strerror(mc));
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(c->multi, &left))) {
            if (m->msg != CURLMSG_DONE)
                continue;
            llm_job *j = NULL;
            if (curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&j) != CURLE_OK || !j)
                continue;
            end_attempt(c, j, m->data.result);
        }
        if (take_finished(c, out, n))
            return KH_OK;
        double now = kh_now();
        if (now >= deadline)
            return KH_OK;
        if (!c->jobs)
            return KH_OK; /* nothing will ever finish */
        double wait = deadline - now, wake = next_wake(c) - now;
        if (wake < wait)
            wait = wake < 0 ? 0 : wake;
        if (wait > 0.05)
            wait = 0.05; /* look at the stop request and the idle clocks often */
        struct curl_waitfd fds[64];
        int nfds = llm_command_fds(c, fds, (int)KH_ARRAY_LEN(fds));
        mc = curl_multi_poll(c->multi, fds, (unsigned)nfds, (int)(wait * 1000) + 1, NULL);
        if (mc != CURLM_OK)
            return kh_err_set(err, KH_ENET, "curl_multi_poll: %s", curl_multi_strerror(mc));
        for (llm_job *j = c->jobs; j; j = j->next)
            if (j->cmd_pid > 0)
                llm_command_pump(j);
    }
}

kh_status kh_llm_take(kh_llm *c, kh_llm_result **out, size_t *n, kh_err *err)
{
    (void)err;
    *out = NULL;
    *n = 0;
    take_finished(c, out, n);
    return KH_OK;
}

kh_status kh_llm_cancel(kh_llm *c, int64_t id, kh_err *err)
{
    for (llm_job *j = c->jobs; j; j = j->next) {
        if (j->id != id)
            continue;
        if (j->result)
            return KH_OK; /* already finished: poll hands it out */
        j->cancelled = 1;
        if (j->cmd_pid > 0) {
            llm_command_kill(j);
            json_t *r = llm_record_base(j);
            json_object_set_new(r, "ok", json_false());
            json_object_set_new(r, "error",
                                llm_error_json("cancelled", KH_EINTR, "cancelled", 0, NULL));
            llm_job_finish(j, r);
        } else if (j->in_multi) {
            attempt_cleanup(j);
            http_finish(j, llm_error_json("cancelled", KH_EINTR, "cancelled", 0, NULL), 0);
        } else {
            json_t *r = llm_record_base(j);
            json_object_set_new(r, "ok", json_false());
            json_object_set_new(r, "error",
                                llm_error_json("cancelled", KH_EINTR, "cancelled", 0, NULL));
            llm_job_finish(j, r);
        }
        return KH_OK;
    }
    return kh_err_set(err, KH_ENOTFOUND, "no model call %lld in flight", (long long)id);
}
