/* llm_wire.c: the three wire formats.  Owns request validation, the
 * serializers (OpenAI Chat Completions, OpenAI Responses, Anthropic
 * Messages, and the OpenAI-compatible variant of Chat), the per-dialect
 * stream event handlers, parsing of a whole JSON reply from a server that
 * ignored stream=true, and usage normalization.  Transport, retries and
 * records are llm_client.c's and llm_job.c's. */
#include "llm/llm_wire.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* ---- request validation ------------------------------------------------- */

static const char *const known_fields[] = {
    "provider", "model",     "base_url",         "messages",        "max_tokens",
    "temperature", "top_p",  "top_k",            "seed",            "stop",
    "reasoning_effort",      "thinking_budget",  "extra",           "options",
    "command",  "replay",    "label",            "run",             "round",
};

static kh_status check_fields(const json_t *req, kh_err *err)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)req, k, v) {
        if (!strcmp(k, "api_key") || !strcmp(k, "key"))
            return kh_err_set(err, KH_EINVAL,
                              "request field '%s': keys come only from the environment "
                              "(OPENAI_API_KEY, ANTHROPIC_API_KEY, KHLUA_API_KEY or "
                              "options.api_key_env)", k);
        size_t i;
        for (i = 0; i < KH_ARRAY_LEN(known_fields); i++)
            if (!strcmp(k, known_fields[i]))
                break;
        if (i == KH_ARRAY_LEN(known_fields))
            return kh_err_set(err, KH_EINVAL, "unknown request field '%s'", k);
    }
    return KH_OK;
}

/* The cache mark of a part: NULL none, "5m" or "1h". */
static kh_status cache_mark(const json_t *v, const char **out, const char *where, kh_err *err)
{
    *out = NULL;
    if (!v || json_is_false(v))
        return KH_OK;
    if (json_is_true(v)) {
        *out = "5m";
        return KH_OK;
    }
    if (json_is_string(v) && (!strcmp(json_string_value(v), "5m") ||
                              !strcmp(json_string_value(v), "1h"))) {
        *out = json_string_value(v);
        return KH_OK;
    }
    return kh_err_set(err, KH_EINVAL, "%s: cache must be true, \"5m\" or \"1h\"", where);
}

/* messages -> [{role, parts: [{text, cache?}]}] (new reference). */
static json_t *norm_messages(const json_t *msgs, kh_err *err)
{
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        kh_err_set(err, KH_EINVAL, "request.messages must be a non-empty array");
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    json_t *m;
    char where[96];
    json_array_foreach(msgs, i, m) {
        snprintf(where, sizeof where, "messages[%zu]", i + 1);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!json_is_object(m) || !role ||
            (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant"))) {
            kh_err_set(err, KH_EINVAL, "%s needs role \"system\", \"user\" or \"assistant\"",
                       where);
            goto fail;
        }
        const json_t *c = json_object_get(m, "content");
        json_t *parts = json_array();
        json_array_append_new(out, json_pack("{s:s, s:o}", "role", role, "parts", parts));
        if (json_is_string(c)) {
            json_array_append_new(parts, json_pack("{s:O}", "text", c));
            continue;
        }
        if (!json_is_array(c)) {
            kh_err_set(err, KH_EINVAL, "%s.content must be a string or an array of parts", where);
            goto fail;
        }
        size_t k;
        json_t *p;
        json_array_foreach(c, k, p) {
            char pw[128];
            snprintf(pw, sizeof pw, "%s.content[%zu]", where, k + 1);
            const char *mark;
            if (json_is_string(p)) {
                json_array_append_new(parts, json_pack("{s:O}", "text", p));
            } else if (json_is_object(p) && json_object_get(p, "cache_breakpoint")) {
                if (cache_mark(json_object_get(p, "cache_breakpoint"), &mark, pw, err))
                    goto fail;
                json_t *prev = json_array_get(parts, json_array_size(parts) - 1);
                if (!prev) {
                    kh_err_set(err, KH_EINVAL, "%s: a cache_breakpoint must follow a text part",
                               pw);
                    goto fail;
                }
                if (mark)
                    json_object_set_new(prev, "cache", json_string(mark));
            } else if (json_is_object(p) && json_is_string(json_object_get(p, "text"))) {
                if (cache_mark(json_object_get(p, "cache"), &mark, pw, err))
                    goto fail;
                json_t *np = json_pack("{s:O}", "text", json_object_get(p, "text"));
                if (mark)
                    json_object_set_new(np, "cache", json_string(mark));
                json_array_append_new(parts, np);
            } else {
                kh_err_set(err, KH_EINVAL, "%s must be a string, {text=...} or "
                                           "{cache_breakpoint=true}", pw);
                goto fail;
            }
        }
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

/* All text parts of a normalized message joined. */
static char *join_parts(const json_t *parts, const char *sep)
{
    llm_buf b = {0};
    size_t i;
    json_t *p;
    llm_buf_add(&b, "", 0);
    json_array_foreach(parts, i, p) {
        const char *t = json_string_value(json_object_get(p, "text"));
        if (i && sep)
            llm_buf_add(&b, sep, strlen(sep));
        llm_buf_add(&b, t, strlen(t));
    }
    return b.p;
}

static kh_status num_field(const json_t *req, const char *k, double lo, double hi, int integer,
                           json_t **out, kh_err *err)
{
    json_t *v = json_object_get(req, k);
    *out = NULL;
    if (!v || json_is_null(v))
        return KH_OK;
    if (!json_is_number(v) || (integer && !json_is_integer(v)))
        return kh_err_set(err, KH_EINVAL, "request.%s must be %s", k,
                          integer ? "an integer" : "a number");
    double d = json_number_value(v);
    if (d < lo || d > hi)
        return kh_err_set(err, KH_EINVAL, "request.%s = %g is outside [%g, %g]", k, d, lo, hi);
    *out = v;
    return KH_OK;
}

/* A request's fields, checked: what each dialect's body is made of.  The
 * numbers and extra are req's (NULL when absent); stops (the stop
 * sequences as an array) and msgs (norm_messages') are new references. */
typedef struct wire_req {
    const char *model, *effort;
    json_t *maxt, *temp, *topp, *topk, *seed, *budget;
    json_t *stops, *extra, *msgs;
} wire_req;

/* req's fields into r, checked for dialect d; on an error nothing is kept. */
static kh_status check_request(const json_t *req, int d, int compat, wire_req *r, kh_err *err)
{
    memset(r, 0, sizeof *r);
    if (!json_is_object(req))
        return kh_err_set(err, KH_EINVAL, "a request must be an object");
    if (check_fields(req, err))
        return err->code;
    r->model = json_string_value(json_object_get(req, "model"));
    if (!r->model || !*r->model)
        return kh_err_set(err, KH_EINVAL, "request.model is required (a string)");
    if (num_field(req, "max_tokens", 1, 1e9, 1, &r->maxt, err) ||
        num_field(req, "temperature", 0, 2, 0, &r->temp, err) ||
        num_field(req, "top_p", 0, 1, 0, &r->topp, err) ||
        num_field(req, "top_k", 1, 1e6, 1, &r->topk, err) ||
        num_field(req, "seed", -9.2e18, 9.2e18, 1, &r->seed, err) ||
        num_field(req, "thinking_budget", 1, 1e9, 1, &r->budget, err))
        return err->code;
    json_t *stop = json_object_get(req, "stop");
    if (stop && !json_is_null(stop)) {
        if (json_is_string(stop)) {
            r->stops = json_pack("[O]", stop);
        } else if (json_is_array(stop)) {
            size_t i;
            json_t *s;
            json_array_foreach(stop, i, s) if (!json_is_string(s))
                return kh_err_set(err, KH_EINVAL, "request.stop must be a string or strings");
            r->stops = json_incref(stop);
        } else {
            return kh_err_set(err, KH_EINVAL, "request.stop must be a string or strings");
        }
    }
    json_t *ev = json_object_get(req, "reasoning_effort");
    if (ev && !json_is_null(ev)) {
        r->effort = json_string_value(ev);
        if (!r->effort || (strcmp(r->effort, "minimal") && strcmp(r->effort, "low") &&
                           strcmp(r->effort, "medium") && strcmp(r->effort, "high"))) {
            json_decref(r->stops);
            return kh_err_set(err, KH_EINVAL, "request.reasoning_effort must be \"minimal\", "
                              "\"low\", \"medium\" or \"high\"");
        }
    }
    r->extra = json_object_get(req, "extra");
    if (r->extra && !json_is_object(r->extra)) {
        json_decref(r->stops);
        return kh_err_set(err, KH_EINVAL, "request.extra must be an object");
    }
    const char *bad = NULL;
    if (d != D_ANTHROPIC && r->budget)
        bad = "thinking_budget is Anthropic's knob; use reasoning_effort";
    else if (d != D_ANTHROPIC && !compat && r->topk)
        bad = "top_k is not an OpenAI parameter";
    else if (d == D_RESPONSES && r->stops)
        bad = "stop sequences are not supported by the OpenAI Responses API";
    else if (d == D_RESPONSES && r->seed)
        bad = "seed is not supported by the OpenAI Responses API";
    else if (d == D_ANTHROPIC && r->seed)
        bad = "seed is not supported by Anthropic";
    if (bad) {
        json_decref(r->stops);
        return kh_err_set(err, KH_EINVAL, "%s", bad);
    }
    r->msgs = norm_messages(json_object_get(req, "messages"), err);
    if (!r->msgs) {
        json_decref(r->stops);
        return err->code;
    }
    return KH_OK;
}

/* OpenAI Chat Completions (compat: an OpenAI-compatible server). */
static void chat_body(json_t *body, const wire_req *r, int compat)
{
    size_t i;
    json_t *m;
    json_t *arr = json_array();
    json_array_foreach(r->msgs, i, m) {
        char *t = join_parts(json_object_get(m, "parts"), NULL);
        json_array_append_new(arr, json_pack("{s:O, s:s}", "role", json_object_get(m, "role"),
                                             "content", t ? t : ""));
        free(t);
    }
    json_object_set_new(body, "messages", arr);
    json_object_set_new(body, "stream_options", json_pack("{s:b}", "include_usage", 1));
    if (r->maxt)
        json_object_set(body, compat ? "max_tokens" : "max_completion_tokens", r->maxt);
    if (r->seed)
        json_object_set(body, "seed", r->seed);
    if (r->stops)
        json_object_set(body, "stop", r->stops);
    if (r->effort)
        json_object_set_new(body, "reasoning_effort", json_string(r->effort));
    if (r->topk)
        json_object_set(body, "top_k", r->topk);
}

/* OpenAI Responses: system messages become the instructions. */
static void responses_body(json_t *body, const wire_req *r)
{
    size_t i;
    json_t *m;
    json_t *input = json_array();
    llm_buf instr = {0};
    json_array_foreach(r->msgs, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        char *t = join_parts(json_object_get(m, "parts"), NULL);
        if (!strcmp(role, "system")) {
            if (instr.len)
                llm_buf_add(&instr, "\n\n", 2);
            llm_buf_add(&instr, t ? t : "", t ? strlen(t) : 0);
        } else {
            int user = !strcmp(role, "user");
            json_array_append_new(
                input, json_pack("{s:s, s:[{s:s, s:s}]}", "role", role, "content", "type",
                                 user ? "input_text" : "output_text", "text", t ? t : ""));
        }
        free(t);
    }
    if (instr.len)
        json_object_set_new(body, "instructions", json_string(instr.p));
    llm_buf_free(&instr);
    json_object_set_new(body, "input", input);
    if (r->maxt)
        json_object_set(body, "max_output_tokens", r->maxt);
    if (r->effort)
        json_object_set_new(body, "reasoning", json_pack("{s:s}", "effort", r->effort));
}

/* Anthropic Messages: text blocks with their cache marks, the system
 * blocks apart.  NULL, or why Anthropic would refuse the body. */
static const char *anthropic_body(json_t *body, const wire_req *r)
{
    const char *bad = NULL;
    size_t i;
    json_t *m;
    json_t *system = json_array(), *arr = json_array();
    int marks = 0, seen_5m = 0;
    json_array_foreach(r->msgs, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *blocks = json_array();
        size_t k;
        json_t *p;
        json_array_foreach(json_object_get(m, "parts"), k, p) {
            const char *t = json_string_value(json_object_get(p, "text"));
            const char *mark = json_string_value(json_object_get(p, "cache"));
            if (!*t)
                continue; /* Anthropic rejects empty text blocks */
            json_t *b = json_pack("{s:s, s:s}", "type", "text", "text", t);
            if (mark) {
                marks++;
                if (!strcmp(mark, "1h") && seen_5m)
                    bad = "a 1h cache breakpoint must come before every 5m one (Anthropic)";
                if (!strcmp(mark, "5m"))
                    seen_5m = 1;
                json_t *cc = json_pack("{s:s}", "type", "ephemeral");
                if (!strcmp(mark, "1h"))
                    json_object_set_new(cc, "ttl", json_string("1h"));
                json_object_set_new(b, "cache_control", cc);
            }
            json_array_append_new(blocks, b);
        }
        if (!strcmp(role, "system")) {
            json_array_extend(system, blocks);
            json_decref(blocks);
        } else if (json_array_size(blocks) == 0) {
            json_decref(blocks);
            if (!bad)
                bad = "a user or assistant message has no text (Anthropic rejects it)";
        } else {
            json_array_append_new(arr, json_pack("{s:s, s:o}", "role", role, "content",
                                                 blocks));
        }
    }
    if (marks > 4 && !bad)
        bad = "more than 4 cache breakpoints (Anthropic allows at most 4)";
    if (json_array_size(system))
        json_object_set(body, "system", system);
    json_decref(system);
    json_object_set_new(body, "messages", arr);
    json_object_set_new(body, "max_tokens", r->maxt ? json_incref(r->maxt) : json_integer(8192));
    if (r->topk)
        json_object_set(body, "top_k", r->topk);
    if (r->stops)
        json_object_set(body, "stop_sequences", r->stops);
    long long tb = r->budget ? json_integer_value(r->budget) : 0;
    if (!tb && r->effort)
        tb = !strcmp(r->effort, "minimal") ? 1024 : !strcmp(r->effort, "low") ? 2048
           : !strcmp(r->effort, "medium") ? 8192 : 24576;
    if (tb)
        json_object_set_new(body, "thinking",
                            json_pack("{s:s, s:I}", "type", "enabled", "budget_tokens", tb));
    return bad;
}

json_t *kh_llm_serialize(const json_t *req, const char *dialect_name, int compat, kh_err *err)
{
    int d;
    if (!strcmp(dialect_name, "chat"))
        d = D_CHAT;
    else if (!strcmp(dialect_name, "responses"))
        d = D_RESPONSES;
    else if (!strcmp(dialect_name, "anthropic"))
        d = D_ANTHROPIC;
    else {
        kh_err_set(err, KH_EINVAL, "unknown dialect '%s'", dialect_name);
        return NULL;
    }
    wire_req r;
    if (check_request(req, d, compat, &r, err))
        return NULL;
    json_t *body = json_pack("{s:s, s:b}", "model", r.model, "stream", 1);
    const char *bad = NULL;
    if (d == D_CHAT)
        chat_body(body, &r, compat);
    else if (d == D_RESPONSES)
        responses_body(body, &r);
    else
        bad = anthropic_body(body, &r);
    if (r.temp)
        json_object_set(body, "temperature", r.temp);
    if (r.topp)
        json_object_set(body, "top_p", r.topp);
    json_decref(r.stops);
    json_decref(r.msgs);
    if (bad) {
        json_decref(body);
        kh_err_set(err, KH_EINVAL, "%s", bad);
        return NULL;
    }
    if (r.extra)
        json_object_update(body, r.extra);
    return body;
}

/* ---- stream events --------------------------------------------------------- */

static void add_text(llm_stream_ctx *x, int reasoning, const char *s, size_t n)
{
    if (!n)
        return;
    llm_stream *st = x->st;
    if (!st->t_first)
        st->t_first = kh_now();
    llm_buf_add(reasoning ? &st->reasoning : &st->text, s, n);
    if (x->job)
        llm_job_delta(x->job, reasoning ? "reasoning" : "text", s, n);
}

static void add_json_text(llm_stream_ctx *x, int reasoning, const json_t *v)
{
    if (json_is_string(v))
        add_text(x, reasoning, json_string_value(v), json_string_length(v));
}

static void set_finish(llm_stream *st, const char *f)
{
    if (f)
        snprintf(st->finish, sizeof st->finish, "%s", f);
}

static void set_error(llm_stream *st, json_t *e)
{
    if (!st->error && e)
        st->error = json_deep_copy(e);
}

static void chat_event(llm_stream_ctx *x, json_t *j)
{
    llm_stream *st = x->st;
    json_t *e = json_object_get(j, "error");
    if (e) {
        set_error(st, json_is_object(e) ? e : j);
        return;
    }
    json_t *choices = json_object_get(j, "choices"); /* vLLM: may be null or missing */
    json_t *c0 = json_is_array(choices) ? json_array_get(choices, 0) : NULL;
    if (c0) {
        json_t *delta = json_object_get(c0, "delta");
        if (!delta)
            delta = json_object_get(c0, "message");
        /* vLLM renamed reasoning_content to reasoning: read both */
        add_json_text(x, 1, json_object_get(delta, "reasoning_content"));
        add_json_text(x, 1, json_object_get(delta, "reasoning"));
        add_json_text(x, 0, json_object_get(delta, "content"));
        set_finish(st, json_string_value(json_object_get(c0, "finish_reason")));
    }
    json_t *u = json_object_get(j, "usage");
    if (json_is_object(u)) {
        json_decref(st->usage_raw);
        st->usage_raw = json_deep_copy(u);
    }
}

static void responses_final(llm_stream *st, json_t *resp)
{
    json_t *u = json_object_get(resp, "usage");
    if (json_is_object(u)) {
        json_decref(st->usage_raw);
        st->usage_raw = json_deep_copy(u);
    }
    const char *status = json_string_value(json_object_get(resp, "status"));
    if (status && !strcmp(status, "incomplete")) {
        const char *why = json_string_value(
            json_object_get(json_object_get(resp, "incomplete_details"), "reason"));
        set_finish(st, why && !strcmp(why, "max_output_tokens") ? "length" : why ? why
                                                                                 : "incomplete");
    } else if (status && !strcmp(status, "completed")) {
        set_finish(st, "stop");
    }
}

static void responses_event(llm_stream_ctx *x, const char *event, json_t *j)
{
    llm_stream *st = x->st;
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type)
        type = event;
    if (!strcmp(type, "response.output_text.delta")) {
        add_json_text(x, 0, json_object_get(j, "delta"));
    } else if (!strcmp(type, "response.reasoning_summary_text.delta") ||
               !strcmp(type, "response.reasoning_text.delta")) {
        add_json_text(x, 1, json_object_get(j, "delta"));
    } else if (!strcmp(type, "response.completed") || !strcmp(type, "response.incomplete")) {
        responses_final(st, json_object_get(j, "response"));
        st->terminal = 1;
    } else if (!strcmp(type, "response.failed")) {
        json_t *r = json_object_get(j, "response");
        json_t *e = json_object_get(r, "error");
        set_error(st, e ? e : j);
        st->terminal = 1;
    } else if (!strcmp(type, "error")) {
        json_t *e = json_object_get(j, "error");
        set_error(st, json_is_object(e) ? e : j);
        st->terminal = 1;
    }
}

static void anthropic_event(llm_stream_ctx *x, const char *event, json_t *j)
{
    llm_stream *st = x->st;
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type)
        type = event;
    if (!strcmp(type, "message_start")) {
        json_t *u = json_object_get(json_object_get(j, "message"), "usage");
        if (json_is_object(u)) {
            json_decref(st->usage_raw);
            st->usage_raw = json_deep_copy(u);
        }
    } else if (!strcmp(type, "content_block_delta")) {
        json_t *d = json_object_get(j, "delta");
        const char *dt = json_string_value(json_object_get(d, "type"));
        if (dt && !strcmp(dt, "text_delta"))
            add_json_text(x, 0, json_object_get(d, "text"));
        else if (dt && !strcmp(dt, "thinking_delta"))
            add_json_text(x, 1, json_object_get(d, "thinking"));
    } else if (!strcmp(type, "message_delta")) {
        set_finish(st, json_string_value(
                           json_object_get(json_object_get(j, "delta"), "stop_reason")));
        json_t *u = json_object_get(j, "usage");
        if (json_is_object(u)) { /* output_tokens here is cumulative: overwrite */
            if (!st->usage_raw)
                st->usage_raw = json_object();
            json_object_update(st->usage_raw, u);
        }
    } else if (!strcmp(type, "message_stop")) {
        st->terminal = 1;
    } else if (!strcmp(type, "error")) {
        json_t *e = json_object_get(j, "error");
        set_error(st, json_is_object(e) ? e : j);
        st->terminal = 1;
    }
}

int llm_wire_dispatch(void *ud, const char *event, const char *data, size_t n, const char *id)
{
    (void)id;
    llm_stream_ctx *x = ud;
    llm_stream *st = x->st;
    if (x->dialect == D_CHAT && n == 6 && !memcmp(data, "[DONE]", 6)) {
        st->terminal = 1;
        return 0;
    }
    if (!strcmp(event, "ping"))
        return 0;
    json_error_t je;
    json_t *j = json_loadb(data, n, JSON_ALLOW_NUL, &je);
    if (!j) {
        /* Invalid UTF-8 inside an otherwise good event: keep the event, with
         * U+FFFD for the bad bytes, rather than fail the whole call. */
        size_t sl;
        char *clean = kh_utf8_sanitize(data, n, &sl);
        if (clean && (sl != n || memcmp(clean, data, n))) {
            j = json_loadb(clean, sl, 0, NULL);
            if (j)
                st->repaired_utf8++;
        }
        free(clean);
    }
    if (!j || !json_is_object(j)) {
        if (!st->malformed) {
            st->malformed = 1;
            snprintf(st->malformed_msg, sizeof st->malformed_msg,
                     "event %zu bytes is not a JSON object (%s)", n, j ? "not an object" : je.text);
        }
        json_decref(j);
        return 0;
    }
    if (x->dialect == D_CHAT)
        chat_event(x, j);
    else if (x->dialect == D_RESPONSES)
        responses_event(x, event, j);
    else
        anthropic_event(x, event, j);
    json_decref(j);
    return 0;
}

int llm_wire_parse_whole(int dialect, const char *body, size_t n, llm_stream *st)
{
    json_t *j = json_loadb(body, n, 0, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        return -1;
    }
    llm_stream_ctx x = {st, dialect, NULL};
    size_t i;
    json_t *v;
    if (dialect == D_CHAT) {
        chat_event(&x, j);
    } else if (dialect == D_RESPONSES) {
        json_array_foreach(json_object_get(j, "output"), i, v) {
            size_t k;
            json_t *c;
            json_array_foreach(json_object_get(v, "content"), k, c) {
                const char *t = json_string_value(json_object_get(c, "type"));
                if (t && !strcmp(t, "output_text"))
                    add_json_text(&x, 0, json_object_get(c, "text"));
            }
        }
        responses_final(st, j);
    } else {
        json_array_foreach(json_object_get(j, "content"), i, v) {
            const char *t = json_string_value(json_object_get(v, "type"));
            if (t && !strcmp(t, "text"))
                add_json_text(&x, 0, json_object_get(v, "text"));
            else if (t && !strcmp(t, "thinking"))
                add_json_text(&x, 1, json_object_get(v, "thinking"));
        }
        set_finish(st, json_string_value(json_object_get(j, "stop_reason")));
        json_t *u = json_object_get(j, "usage");
        if (json_is_object(u))
            st->usage_raw = json_deep_copy(u);
    }
    json_decref(j);
    st->terminal = 1;
    return 0;
}

static json_int_t ival(const json_t *o, const char *a, const char *b)
{
    const json_t *v = json_object_get(o, a);
    if (b)
        v = json_object_get(v, b);
    return json_is_integer(v) ? json_integer_value(v) : 0;
}

json_t *llm_wire_usage(int dialect, const json_t *raw)
{
    json_int_t in = 0, out = 0, cr = 0, cw = 0, rs = 0;
    if (dialect == D_CHAT) {
        in = ival(raw, "prompt_tokens", NULL);
        out = ival(raw, "completion_tokens", NULL);
        cr = ival(raw, "prompt_tokens_details", "cached_tokens");
        rs = ival(raw, "completion_tokens_details", "reasoning_tokens");
    } else if (dialect == D_RESPONSES) {
        in = ival(raw, "input_tokens", NULL);
        out = ival(raw, "output_tokens", NULL);
        cr = ival(raw, "input_tokens_details", "cached_tokens");
        rs = ival(raw, "output_tokens_details", "reasoning_tokens");
    } else if (dialect == D_ANTHROPIC) {
        /* Anthropic's input_tokens is the uncached part only */
        cr = ival(raw, "cache_read_input_tokens", NULL);
        cw = ival(raw, "cache_creation_input_tokens", NULL);
        in = ival(raw, "input_tokens", NULL) + cr + cw;
        out = ival(raw, "output_tokens", NULL);
    }
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:O}", "input", in, "output", out,
                     "cache_read", cr, "cache_write", cw, "reasoning", rs, "total", in + out,
                     "raw", raw ? (json_t *)raw : json_null());
}

/* ---- preparing a job ----------------------------------------------------------- */

static kh_status opt_num(const json_t *o, const char *k, double lo, double hi, double *out,
                         kh_err *err)
{
    json_t *v = json_object_get(o, k);
    if (!v)
        return KH_OK;
    if (!json_is_number(v) || json_number_value(v) < lo || json_number_value(v) > hi)
        return kh_err_set(err, KH_EINVAL, "request.options.%s must be a number in [%g, %g]", k,
                          lo, hi);
    *out = json_number_value(v);
    return KH_OK;
}

static kh_status opt_str(const json_t *o, const char *k, char *out, size_t n, kh_err *err)
{
    json_t *v = json_object_get(o, k);
    if (!v)
        return KH_OK;
    if (!json_is_string(v) || json_string_length(v) >= n || json_string_length(v) == 0)
        return kh_err_set(err, KH_EINVAL, "request.options.%s must be a string of 1-%zu bytes",
                          k, n - 1);
    for (const char *s = json_string_value(v); *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
            return kh_err_set(err, KH_EINVAL, "request.options.%s holds a control character", k);
    snprintf(out, n, "%s", json_string_value(v));
    return KH_OK;
}

static kh_status parse_opts(const json_t *req, llm_opts *o, kh_err *err)
{
    *o = (llm_opts){.max_retries = 6, .backoff_base = 0.5, .backoff_cap = 60,
                    .retry_after_cap = 120, .connect_timeout = 10, .idle_timeout = 300,
                    .total_timeout = 1800, .breaker_threshold = 5, .breaker_cooldown = 30};
    snprintf(o->anthropic_version, sizeof o->anthropic_version, "2023-06-01");
    json_t *opts = json_object_get(req, "options");
    if (!opts)
        return KH_OK;
    if (!json_is_object(opts))
        return kh_err_set(err, KH_EINVAL, "request.options must be an object");
    static const char *const known[] = {
        "max_retries",     "backoff_base",  "backoff_cap",       "retry_after_cap",
        "connect_timeout", "idle_timeout",  "total_timeout",     "breaker_threshold",
        "breaker_cooldown", "api_key_env",  "anthropic_version", "anthropic_beta",
        "deadline",
    };
    const char *k;
    json_t *v;
    json_object_foreach(opts, k, v) {
        size_t i;
        for (i = 0; i < KH_ARRAY_LEN(known); i++)
            if (!strcmp(k, known[i]))
                break;
        if (i == KH_ARRAY_LEN(known))
            return kh_err_set(err, KH_EINVAL, "unknown request option '%s'", k);
    }
    double mr = o->max_retries, bt = o->breaker_threshold;
    if (opt_num(opts, "max_retries", 0, 100, &mr, err) ||
        opt_num(opts, "backoff_base", 0, 3600, &o->backoff_base, err) ||
        opt_num(opts, "backoff_cap", 0, 3600, &o->backoff_cap, err) ||
        opt_num(opts, "retry_after_cap", 0, 86400, &o->retry_after_cap, err) ||
        opt_num(opts, "connect_timeout", 0.001, 3600, &o->connect_timeout, err) ||
        opt_num(opts, "idle_timeout", 0.001, 86400, &o->idle_timeout, err) ||
        opt_num(opts, "total_timeout", 0.001, 86400 * 7, &o->total_timeout, err) ||
        opt_num(opts, "breaker_threshold", 1, 1000, &bt, err) ||
        opt_num(opts, "breaker_cooldown", 0, 86400, &o->breaker_cooldown, err) ||
        opt_num(opts, "deadline", 0, 86400 * 7, &o->deadline, err) ||
        opt_str(opts, "api_key_env", o->api_key_env, sizeof o->api_key_env, err) ||
        opt_str(opts, "anthropic_version", o->anthropic_version, sizeof o->anthropic_version,
                err) ||
        opt_str(opts, "anthropic_beta", o->anthropic_beta, sizeof o->anthropic_beta, err))
        return err->code;
    o->max_retries = (int)mr;
    o->breaker_threshold = (int)bt;
    for (const char *s = o->api_key_env; *s; s++)
        if (!(isupper((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '_'))
            return kh_err_set(err, KH_EINVAL,
                              "request.options.api_key_env must name an environment variable "
                              "(A-Z, 0-9, _)");
    return KH_OK;
}

kh_status llm_wire_prepare(llm_job *j, kh_err *err)
{
    const json_t *req = j->req;
    if (!json_is_object(req))
        return kh_err_set(err, KH_EINVAL, "a request must be an object (a table)");
    if (check_fields(req, err))
        return err->code;
    const char *p = json_string_value(json_object_get(req, "provider"));
    static const struct {
        const char *name;
        char kind;
        int dialect, compat;
        const char *base, *path, *key_env;
    } provs[] = {
        {"openai", 'h', D_CHAT, 0, "https://api.openai.com/v1", "/chat/completions",
         "OPENAI_API_KEY"},
        {"openai-responses", 'h', D_RESPONSES, 0, "https://api.openai.com/v1", "/responses",
         "OPENAI_API_KEY"},
        {"anthropic", 'h', D_ANTHROPIC, 0, "https://api.anthropic.com/v1", "/messages",
         "ANTHROPIC_API_KEY"},
        {"compat", 'h', D_CHAT, 1, NULL, "/chat/completions", "KHLUA_API_KEY"},
        {"command", 'c', D_NONE, 0, NULL, NULL, NULL},
        {"replay", 'r', D_NONE, 0, NULL, NULL, NULL},
    };
    size_t i;
    for (i = 0; i < KH_ARRAY_LEN(provs); i++)
        if (p && !strcmp(p, provs[i].name))
            break;
    if (i == KH_ARRAY_LEN(provs))
        return kh_err_set(err, KH_EINVAL,
                          "request.provider must be one of openai, openai-responses, anthropic, "
                          "compat, command, replay%s%s%s",
                          p ? " (got '" : "", p ? p : "", p ? "')" : "");
    j->provider = provs[i].name;
    j->kind = provs[i].kind;
    j->dialect = provs[i].dialect;
    j->compat = provs[i].compat;
    json_t *label = json_object_get(req, "label");
    if (label && !json_is_string(label))
        return kh_err_set(err, KH_EINVAL, "request.label must be a string");
    static const char *const links[] = {"run", "round"};
    for (size_t k = 0; k < KH_ARRAY_LEN(links); k++) {
        json_t *v = json_object_get(req, links[k]);
        const char *s = json_string_value(v);
        if (v && (!s || strncmp(s, links[k], strlen(links[k])) || s[strlen(links[k])] != '-'))
            return kh_err_set(err, KH_EINVAL, "request.%s must be a %s id (\"%s-...\")",
                              links[k], links[k], links[k]);
    }
    if (j->kind == 'r') {
        json_t *rp = json_object_get(req, "replay");
        const char *k;
        json_t *v;
        if (!json_is_object(rp))
            return kh_err_set(err, KH_EINVAL, "provider replay needs request.replay: {dir = DIR} "
                                              "or {store = true, run = RUN}");
        json_object_foreach(rp, k, v) {
            if (strcmp(k, "dir") && strcmp(k, "store") && strcmp(k, "run") &&
                strcmp(k, "index"))
                return kh_err_set(err, KH_EINVAL, "unknown request.replay field '%s' (dir, "
                                                  "index, store, run)", k);
        }
        json_t *dir = json_object_get(rp, "dir"), *st = json_object_get(rp, "store"),
               *run = json_object_get(rp, "run"), *ix = json_object_get(rp, "index");
        if (ix && (!dir || !json_is_integer(ix) || json_integer_value(ix) < 1))
            return kh_err_set(err, KH_EINVAL, "request.replay.index must be an integer >= 1, "
                                              "with dir");
        if (dir && (st || run))
            return kh_err_set(err, KH_EINVAL, "request.replay: dir, or store and run, not both");
        if (dir && !json_is_string(dir))
            return kh_err_set(err, KH_EINVAL, "request.replay.dir must be a string");
        if (!dir && (!json_is_true(st) || !json_is_string(run)))
            return kh_err_set(err, KH_EINVAL, "request.replay needs dir = DIR, or store = true "
                                              "and run = RUN (a run id)");
    }
    if (parse_opts(req, &j->o, err))
        return err->code;
    if (!j->o.api_key_env[0] && provs[i].key_env)
        snprintf(j->o.api_key_env, sizeof j->o.api_key_env, "%s", provs[i].key_env);
    if (j->kind != 'h')
        return KH_OK;

    j->body = kh_llm_serialize(req, llm_dialect_names[j->dialect], j->compat, err);
    if (!j->body)
        return err->code;
    j->body_str = json_dumps(j->body, JSON_COMPACT);
    if (!j->body_str)
        return kh_err_set(err, KH_ENOMEM, "out of memory serializing the request");

    json_t *bu = json_object_get(req, "base_url");
    const char *base = provs[i].base;
    if (bu) {
        base = json_string_value(bu);
        if (!base || (strncmp(base, "http://", 7) && strncmp(base, "https://", 8)))
            return kh_err_set(err, KH_EINVAL, "request.base_url must be an http:// or https:// URL");
        for (const char *s = base; *s; s++)
            if ((unsigned char)*s <= 0x20 || (unsigned char)*s == 0x7f)
                return kh_err_set(err, KH_EINVAL, "request.base_url holds a space or control "
                                                  "character");
    }
    if (!base)
        return kh_err_set(err, KH_EINVAL, "provider compat needs request.base_url (e.g. "
                                          "http://127.0.0.1:8000/v1)");
    size_t bl = strlen(base);
    while (bl && base[bl - 1] == '/')
        bl--;
    size_t n = bl + strlen(provs[i].path) + 1;
    j->url = malloc(n);
    if (!j->url)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    snprintf(j->url, n, "%.*s%s", (int)bl, base, provs[i].path);

    /* Ollama's /v1 endpoint silently ignores num_ctx: say so rather than let a
     * long prompt be cut without a word. */
    json_t *extra = json_object_get(req, "extra");
    if (j->compat && (json_object_get(extra, "num_ctx") ||
                      json_object_get(json_object_get(extra, "options"), "num_ctx")))
        json_array_append_new(j->warnings,
                              json_string("num_ctx is ignored by Ollama's OpenAI-compatible "
                                          "endpoint; set OLLAMA_CONTEXT_LENGTH on the server"));
    return KH_OK;
}
