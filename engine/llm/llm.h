/* llm.h: the model client.  One kh_llm holds a libcurl multi handle and runs
 * many model calls on the calling thread: submit returns a ticket at once,
 * poll drives every transfer and hands back the calls that finished.
 *
 * A request is provider-neutral JSON (below); serializers turn it into OpenAI
 * Chat Completions, OpenAI Responses or Anthropic Messages, always streamed.
 * Besides HTTP, two offline providers: "command" runs an agent command line
 * (claude -p, codex exec) with the prompt on stdin, and "replay" answers from
 * recorded replies.  Retries follow the official SDKs' classification, with
 * full-jitter backoff, a circuit breaker per provider and a hard stop on
 * quota / spend-limit 429s.
 *
 * Every finished call yields a transcript: a JSON record plus the raw bytes of
 * the last attempt's response stream.  API keys are read from the environment
 * at send time, sent, and redacted from everything recorded (the call's own
 * key and the values of ANTHROPIC_API_KEY, OPENAI_API_KEY, KHLUA_API_KEY).
 *
 * Request (JSON object; unknown top-level fields are errors, so typos show):
 *   provider   "openai" | "openai-responses" | "anthropic" | "compat" |
 *              "command" | "replay"                               (required)
 *   model      string (required for HTTP providers)
 *   base_url   e.g. "http://127.0.0.1:8000/v1" (default per provider; compat
 *              requires it)
 *   messages   [{role = "system"|"user"|"assistant", content = C}], C a string
 *              or an array of parts: a string, {text = s, cache = true|"5m"|"1h"}
 *              or a marker {cache_breakpoint = true|"5m"|"1h"} that marks the
 *              part before it.  Anthropic turns marks into cache_control (at
 *              most 4); the other dialects drop them.
 *   max_tokens, temperature, top_p, top_k, seed, stop (string or array),
 *   reasoning_effort ("minimal"|"low"|"medium"|"high"), thinking_budget
 *              sampling knobs: sent only when set, never defaulted (Anthropic
 *              requires max_tokens: 8192 is sent when it is unset)
 *   extra      object merged into the body's top level (vLLM's top_k, min_p...)
 *   options    {max_retries = 6, backoff_base = 0.5, backoff_cap = 60,
 *               retry_after_cap = 120, connect_timeout = 10, idle_timeout = 300,
 *               total_timeout = 1800 (one attempt), breaker_threshold = 5,
 *               breaker_cooldown = 30, deadline = 0 (seconds for the whole call,
 *               retries and waits included; 0: none),
 *               api_key_env = NAME, anthropic_version = "2023-06-01",
 *               anthropic_beta = s}
 *   command    {argv = {...}, timeout = 600, workspace = DIR (default: a fresh
 *               directory under $TMPDIR), max_output = bytes}   (provider command)
 *   replay     {dir = DIR[, index = K]}: recorded replies in a directory
 *              (index: the K-th in name order, 1-based, wrapping, when no
 *              reply matches the prompt's fingerprint), or
 *              {store = true, run = RUN}: the successful live llm_call
 *              records of run RUN in the store given to kh_llm_set_store,
 *              their raw streams parsed again (llm_store.h)  (provider replay)
 *              Either way a request whose prompt fingerprint matches a
 *              recorded call gets that call's answer (the k-th such request
 *              the k-th such call, wrapping); any other takes the next answer
 *              in recorded order (per client, wrapping): deterministic.
 *   label      any string, copied into the record (the caller's own tag)
 *   run, round store ids, copied into the record: the llm_call record's
 *              links (llm_store.h)
 *
 * Record (what poll returns for each finished call):
 *   id, label, run, round, provider, dialect, model, url, fingerprint,
 *   replay (bool; replay_file or replay_of + replay_run say from where), ok,
 *   text, reasoning, finish_reason, truncated (cut by the token limit),
 *   usage {input, output, cache_read, cache_write, reasoning, total, raw},
 *   latency_s, first_token_s, retries, attempts [{http_status, error, delay_s,
 *   latency_s}], request (the wire body; command and replay: the caller's
 *   request), request_headers (keys redacted),
 *   response_headers, request_id, http_status, raw_bytes, warnings [...],
 *   error {kind, code, message, http_status, type} when ok is false.
 *   error.kind: "http" (not retryable), "quota" (spend limit: stop), "retries"
 *   (gave up), "timeout", "stream" (malformed or cut stream), "cancelled",
 *   "breaker", "config", "command", "replay".
 *   "input" counts every prompt token, cached or not, in every dialect.
 *
 * The llm subsystem's one public header (there is no llm.c): the client is
 * llm_client.c, the wire formats llm_wire.c, the offline providers
 * llm_offline.c, a call's record and the shared state llm_job.c (redaction
 * too), candidate extraction llm_extract.c, transcripts in the store
 * llm_store.h. */
#ifndef KH_LLM_H
#define KH_LLM_H

#include "core/engine.h"
#include "core/kh.h"

#include <jansson.h>
#include <stdint.h>

typedef struct kh_llm kh_llm;

/* One finished call.  The record and raw bytes belong to the result; free it
 * with kh_llm_result_free. */
typedef struct kh_llm_result {
    int64_t id;
    json_t *record;
    char *raw;       /* the last attempt's response body as received (NUL-terminated) */
    size_t raw_len;
} kh_llm_result;
void kh_llm_result_free(kh_llm_result *r);

/* Where transcripts go: called once per finished call, before poll returns
 * it.  The store registers itself here (kh_llm_store_sink, llm_store.h);
 * record and raw are valid only during the call (copy or incref).  Keys are
 * already redacted.  The sink may add fields to record (the store adds
 * store_id or store_error): the caller of poll sees them. */
typedef void (*kh_llm_sink_fn)(void *ud, json_t *record, const char *raw, size_t raw_len);

/* Streaming text as it arrives: kind is "text" or "reasoning"; a retry after
 * partial output calls fn with kind "retry" and an empty string. */
typedef void (*kh_llm_delta_fn)(void *ud, int64_t id, const char *kind, const char *s, size_t n);

/* The engine is used for stop requests (Ctrl-C).  NULL with err on failure. */
kh_llm *kh_llm_new(kh_engine *e, kh_err *err);
/* Cancels and frees every call still in flight. */
void kh_llm_free(kh_llm *c);

void kh_llm_set_sink(kh_llm *c, kh_llm_sink_fn fn, void *ud);
void kh_llm_set_delta(kh_llm *c, kh_llm_delta_fn fn, void *ud);

/* The store that replay {store = true} reads from (NULL: none).  The client
 * does not own it; the caller keeps it open while set, and may change it
 * between polls (what the client cached about a store is dropped when the
 * store changes). */
struct kh_store;
void kh_llm_set_store(kh_llm *c, struct kh_store *s);

/* Validate and queue a request (copied).  KH_EINVAL for a malformed request
 * or a missing key, with a message naming the field. */
kh_status kh_llm_submit(kh_llm *c, const json_t *req, int64_t *id, kh_err *err);

/* Drive the transfers for up to timeout_s seconds (0: do what is ready and
 * return), returning as soon as at least one call finished.  *out gets a
 * malloc'ed array of *n results (caller frees each and the array).  KH_EINTR
 * when a stop was requested (calls stay in flight), KH_ENET on a libcurl
 * failure of the multi handle itself. */
kh_status kh_llm_poll(kh_llm *c, double timeout_s, kh_llm_result **out, size_t *n, kh_err *err);

/* Hand out results that already finished (after a cancel, say) without
 * driving transfers or looking at the stop request.  Same ownership as poll. */
kh_status kh_llm_take(kh_llm *c, kh_llm_result **out, size_t *n, kh_err *err);

/* Finish a call now with error kind "cancelled" (it comes out of the next
 * poll).  KH_ENOTFOUND if id is not in flight. */
kh_status kh_llm_cancel(kh_llm *c, int64_t id, kh_err *err);

/* Calls submitted and not yet returned by poll. */
size_t kh_llm_pending(const kh_llm *c);

/* ---- pieces, exposed for tests and for the bindings ---------------------- */

/* The wire body for a request in a dialect ("chat", "responses",
 * "anthropic"); compat selects the OpenAI-compatible variant of chat.  New
 * reference, or NULL with err. */
json_t *kh_llm_serialize(const json_t *req, const char *dialect, int compat, kh_err *err);

/* Should a failed HTTP attempt be retried?  status is the HTTP status (0 for
 * a transport failure), should_retry the x-should-retry header (-1 absent,
 * 0 false, 1 true), body the parsed error body or NULL.  Returns 1 retry,
 * 0 give up, and sets *quota to 1 for a quota / spend-limit 429. */
int kh_llm_retryable(long status, int should_retry, const json_t *body, int *quota);

/* The server's retry hint in seconds from retry-after-ms / retry-after
 * header values (either may be NULL); < 0 when absent, unparsable, or not in
 * (0, cap]. */
double kh_llm_retry_after(const char *after_ms, const char *after, double cap);

/* Full-jitter exponential backoff: uniform in [0, min(cap, base * 2^attempt)]
 * where u is a uniform draw in [0, 1). */
double kh_llm_backoff(int attempt, double base, double cap, double u);

/* Pull a candidate out of a reply.  Returns a new object:
 *   {status = "ok", source, source_lang, manifest (parsed), manifest_text}
 *   {status = "no_code" | "truncated" | "bad_manifest" | "no_manifest", message}
 * finish_reason "length" / "max_tokens" (or an unclosed fence) gives
 * "truncated" when the code is incomplete. */
json_t *kh_llm_extract(const char *text, const char *finish_reason, int require_manifest);

/* Replace every occurrence of secret (len >= 8) in s, in place, with '*'
 * runs of the same length; returns how many were replaced. */
size_t kh_llm_redact(char *s, size_t n, const char *secret);

#endif
