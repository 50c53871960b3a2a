/* llm_job.h: what the llm units share and nobody else sees: one call in
 * flight (llm_job), its per-attempt stream state, the growable buffer, the
 * client's state, and the functions on them (llm_job.c), which every other
 * llm unit may call.  The client loop is llm_client.c, the wire formats
 * llm_wire.h, the offline providers llm_offline.h; each includes this and
 * this includes none of them. */
#ifndef KH_LLM_JOB_H
#define KH_LLM_JOB_H

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
void llm_stream_reset(llm_stream *st);

typedef struct llm_provider llm_provider; /* the client's (llm_client.c) */
typedef struct llm_job llm_job;

/* Dialect of the stream so the event handler knows which rules apply. */
typedef struct llm_stream_ctx {
    llm_stream *st;
    int dialect;
    llm_job *job; /* may be NULL (replay of a recorded stream) */
} llm_stream_ctx;

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
    llm_stream_ctx *ctx;
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

/* Client-side replay counters (deterministic order per key: a directory,
 * or a store run and fingerprint). */
typedef struct replay_counter {
    char *dir;
    int next;
    struct replay_counter *nx;
} replay_counter;

struct kh_llm {
    kh_engine *engine;
    CURLM *multi;
    llm_job *jobs;
    llm_provider *provs;
    replay_counter *replays;
    int64_t next_id;
    kh_llm_sink_fn sink;
    void *sink_ud;
    kh_llm_delta_fn delta;
    void *delta_ud;
    struct kh_store *store; /* replay {store = true} reads here; not owned */
    json_t *replay_runs;    /* run id -> [{id, fingerprint}], loaded once per store */
    uint64_t rng;
};

/* The API key of the job's provider from the environment, or NULL. */
const char *llm_job_key(const llm_job *j);
/* Called by the stream handlers with new text; forwards to the delta hook. */
void llm_job_delta(llm_job *j, const char *kind, const char *s, size_t n);
/* The client's jobs in flight (a list through ->next). */
llm_job *llm_jobs(kh_llm *c);
/* The next replay index for key dir (0, 1, ... per key and client). */
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
