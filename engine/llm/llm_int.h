/* llm_int.h: what the llm_*.c units share and nobody else sees: one call in
 * flight (llm_job), its per-attempt stream state, the growable buffer, and
 * the entry points between the client (llm.c), the wire formats
 * (llm_wire.c) and the offline providers (llm_offline.c). */
#ifndef KH_LLM_INT_H
#define KH_LLM_INT_H

#include "llm/llm.h"
#include "llm/sse.h"

#include <curl/curl.h>

typedef struct llm_buf {
    char *p;
    size_t len, cap;
} llm_buf;
int llm_buf_add(llm_buf *b, const char *s, size_t n); /* 0, or -1 out of memory */
void llm_buf_free(llm_buf *b);

enum { D_CHAT, D_RESPONSES, D_ANTHROPIC, D_NONE };
extern const char *const llm_dialect_names[];

typedef struct llm_opts {
    int max_retries;
    double backoff_base, backoff_cap, retry_after_cap;
    double connect_timeout, idle_timeout, total_timeout;
    double deadline; /* whole call incl. retries and waits, from submit; 0 none */
    int breaker_threshold;
    double breaker_cooldown;
    char api_key_env[64];
    char anthropic_version[32];
    char anthropic_beta[128];
} llm_opts;

/* What one attempt's response said, parsed as it streamed. */
typedef struct llm_stream {
    llm_buf text, reasoning;
    char finish[64];
    json_t *usage_raw; /* the dialect's usage object, merged for Anthropic */
    json_t *error;     /* an error that arrived in the stream */
    int terminal;      /* the dialect's end-of-stream event was seen */
    int malformed;     /* a data event was not valid JSON */
    char malformed_msg[200];
    int repaired_utf8; /* events whose invalid UTF-8 was replaced */
    double t_first;    /* monotonic time of the first text/reasoning byte, 0 if none */
} llm_stream;

typedef struct llm_provider llm_provider;
struct llm_stream_ctx;
typedef struct llm_job llm_job;

struct llm_job {
    int64_t id;
    kh_llm *client;
    char kind; /* 'h' HTTP, 'c' command, 'r' replay */
    int dialect, compat;
    const char *provider; /* static name */
    json_t *req;          /* the caller's request (a deep copy) */
    json_t *body;         /* the wire body */
    char *body_str;
    char *url;
    char fingerprint[17];
    llm_opts o;
    llm_provider *prov;

    CURL *easy;
    struct curl_slist *hdrs;
    llm_buf raw;
    json_t *resp_headers;
    kh_sse *sse;
    llm_stream st;
    struct llm_stream_ctx *ctx;
    int idle_expired, raw_overflow, in_multi;

    int attempt;        /* attempts started so far */
    json_t *attempts;   /* one object per failed attempt */
    json_t *warnings;
    double t_submit, t_attempt, wake_at, last_byte;
    int queued;         /* waiting for wake_at / the breaker */
    int cancelled;
    int breaker_waits;
    /* command provider: the agent runs as a child watched by the poll loop */
    int cmd_pid, cmd_fd;
    double cmd_deadline, cmd_timeout;
    json_t *cmd_before;     /* workspace files before the run */
    char *cmd_ws, *cmd_prompt;
    size_t cmd_max;
    int cmd_truncated, cmd_timed_out;
    int cmd_own_ws;         /* we made the workspace: remove it if left empty */
    kh_llm_result *result; /* set when finished, until poll hands it out */
    llm_job *next;
};

/* llm_wire.c ------------------------------------------------------------- */
/* Check the request and fill the job's dialect, body, url, options.  Uses
 * err for the message. */
kh_status llm_wire_prepare(llm_job *j, kh_err *err);
/* Parse a whole (non-streamed) JSON response into st; 0 ok, -1 not understood. */
int llm_wire_parse_whole(int dialect, const char *body, size_t n, llm_stream *st);
/* The normalized usage object (new reference) for a dialect's raw usage. */
json_t *llm_wire_usage(int dialect, const json_t *raw);
void llm_stream_reset(llm_stream *st);
/* Dialect of the stream so the event handler knows which rules apply. */
typedef struct llm_stream_ctx {
    llm_stream *st;
    int dialect;
    llm_job *job; /* may be NULL (replay of a recorded stream) */
} llm_stream_ctx;
int llm_wire_dispatch(void *ud, const char *event, const char *data, size_t n, const char *id);
/* Called by the stream handlers with new text; forwards to the delta hook. */
void llm_job_delta(llm_job *j, const char *kind, const char *s, size_t n);

/* llm_offline.c ---------------------------------------------------------- */
/* Start a command job or run a replay job to completion (j->result).  Never
 * fails: problems become an error in the record. */
void llm_offline_run(kh_llm *c, llm_job *j);
/* Running agent commands: the fds to wait on (at most max; returns how many),
 * then pump reads their output, enforces deadlines and finishes those that
 * ended.  kill ends a running command now (cancel, free). */
int llm_command_fds(kh_llm *c, struct curl_waitfd *fds, int max);
void llm_command_pump(llm_job *j);
void llm_command_kill(llm_job *j);
llm_job *llm_jobs(kh_llm *c);
/* Client-side replay counters (deterministic order per key: a directory,
 * or a store run and fingerprint). */
int llm_replay_next(kh_llm *c, const char *dir);
/* The store replay reads from (kh_llm_set_store), or NULL. */
struct kh_store *llm_client_store(kh_llm *c);
/* The client's cache of replayable calls per run (an object owned by the
 * client, emptied when the store changes). */
json_t *llm_client_replay_runs(kh_llm *c);
/* Finish a job with a record built by the caller (takes the reference). */
void llm_job_finish(llm_job *j, json_t *record);
/* The record fields common to every provider (new object). */
json_t *llm_record_base(llm_job *j);
/* An error object for a record. */
json_t *llm_error_json(const char *kind, kh_status code, const char *msg, long http_status,
                       const char *type);

#endif
