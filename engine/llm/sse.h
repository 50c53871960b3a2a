/* sse.h: an incremental Server-Sent Events decoder (the WHATWG algorithm).
 * Bytes arrive in whatever pieces the transport hands over; events come out
 * whole.  Lines end in LF, CRLF or CR (a CR at the end of one chunk and an LF
 * at the start of the next are one line ending); lines starting with ':' are
 * comments; several data lines join with '\n'; a blank line ends an event.
 * The decoder owns no knowledge of any API dialect. */
#ifndef KH_SSE_H
#define KH_SSE_H

#include "core/kh.h"

typedef struct kh_sse kh_sse;

/* Called once per dispatched event.  event is the `event:` field ("message"
 * when none was given), data the joined data lines (NUL-terminated, data_len
 * bytes), id the last `id:` seen ("" if none).  The strings are valid only
 * during the call.  Return 0 to go on, non-zero to stop: kh_sse_feed then
 * returns KH_ESTATE without looking at the rest of the chunk. */
typedef int (*kh_sse_event_fn)(void *ud, const char *event, const char *data, size_t data_len,
                               const char *id);

/* max_event bounds one line and one event's data (0: 64 MiB).  NULL only when
 * out of memory. */
kh_sse *kh_sse_new(kh_sse_event_fn fn, void *ud, size_t max_event);
void kh_sse_free(kh_sse *s);

/* Feed n bytes.  KH_EPARSE (with err) when a line or event exceeds max_event,
 * KH_ENOMEM, or KH_ESTATE when the callback asked to stop. */
kh_status kh_sse_feed(kh_sse *s, const char *buf, size_t n, kh_err *err);

/* The stream ended.  Per the WHATWG rules an event without its closing blank
 * line is discarded; returns 1 when such a partial event (or a partial line)
 * was pending, which means the stream was cut, 0 otherwise. */
int kh_sse_finish(kh_sse *s);

/* Events dispatched so far, and comment lines seen (keep-alives). */
size_t kh_sse_events(const kh_sse *s);
size_t kh_sse_comments(const kh_sse *s);

#endif
