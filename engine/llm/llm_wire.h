/* llm_wire.h: the wire formats (llm_wire.c), for the client loop and the
 * replay provider: request checking and serialization, stream events, whole
 * replies, usage. */
#ifndef KH_LLM_WIRE_H
#define KH_LLM_WIRE_H

#include "llm/llm_job.h"

/* Check the request and fill the job's dialect, body, url, options.  Uses
 * err for the message. */
kh_status llm_wire_prepare(llm_job *j, kh_err *err);
/* Parse a whole (non-streamed) JSON response into st; 0 ok, -1 not understood. */
int llm_wire_parse_whole(int dialect, const char *body, size_t n, llm_stream *st);
/* The normalized usage object (new reference) for a dialect's raw usage. */
json_t *llm_wire_usage(int dialect, const json_t *raw);
/* The SSE event handler (kh_sse's callback); ud is an llm_stream_ctx. */
int llm_wire_dispatch(void *ud, const char *event, const char *data, size_t n, const char *id);

#endif
