/* wire.h: the worker protocol's framing.  A message is a JSON head plus an
 * optional binary payload (a cubin, tensor bytes), sent as one frame:
 *
 *   offset  size  field
 *   0       4     magic "KHWF"
 *   4       2     protocol version (KH_WIRE_VERSION), little-endian
 *   6       2     flags (0)
 *   8       4     head length in bytes (UTF-8 JSON object), little-endian
 *   12      4     reserved (0)
 *   16      8     payload length in bytes, little-endian
 *   24      ...   head, then payload
 *
 * Requests carry {"id", "method", "params"}; replies {"id", "ok", "result"} or
 * {"id", "ok": false, "error": {"code", "message"}}.  A worker opens with
 * {"hello": {"role", "pid", "protocol", "khlua"}}.  A frame with a wrong magic
 * or version is a protocol error: the peer is not a khlua worker of this
 * version, and the connection is dropped. */
#ifndef KH_WIRE_H
#define KH_WIRE_H

#include "core/kh.h"

#include <jansson.h>

#define KH_WIRE_VERSION 1
#define KH_WIRE_HEADER 24
#define KH_WIRE_MAX_HEAD (64u << 20)          /* 64 MiB of JSON */
#define KH_WIRE_MAX_PAYLOAD (32ull << 30)     /* 32 GiB of bytes */

typedef struct kh_msg {
    json_t *head;           /* owned */
    unsigned char *payload; /* owned, may be NULL */
    size_t payload_len;
} kh_msg;

void kh_msg_free(kh_msg *m);

/* Write one frame to fd, waiting for writability up to deadline (a kh_now()
 * time; <= 0 means no deadline).  Works on blocking and non-blocking fds.
 * KH_ETIMEOUT if the peer stops reading; KH_EIO if it is gone. */
/* Follow every frame written by this process with a "\n", which readers
 * skip.  For workers behind a launcher that forwards output line by line
 * (srun's slurmstepd holds a task's output until a newline): the newline
 * flushes the frame through.  Off by default. */
void kh_wire_set_newline(int on);

kh_status kh_wire_write(int fd, const json_t *head, const void *payload, size_t payload_len,
                        double deadline, kh_err *err);

/* An incremental reader: feed it what arrives on a non-blocking fd; it
 * yields whole messages.  One reader per connection. */
typedef struct kh_wire_reader {
    unsigned char hdr[KH_WIRE_HEADER];
    size_t hdr_got;
    char *head;
    size_t head_len, head_got;
    unsigned char *payload;
    size_t payload_len, payload_got;
} kh_wire_reader;

void kh_wire_reader_init(kh_wire_reader *r);
void kh_wire_reader_free(kh_wire_reader *r);

/* Read what is available on fd.  Returns KH_OK with *done = 1 and *out
 * filled when a message is complete (call again for the next one: bytes past
 * it stay in the pipe); *done = 0 when more bytes are needed (EAGAIN).
 * KH_EIO with "closed" on end of file, KH_EPARSE on a malformed frame. */
kh_status kh_wire_read_some(kh_wire_reader *r, int fd, kh_msg *out, int *done, kh_err *err);

/* Blocking read of one whole message with a deadline (<= 0: none). */
kh_status kh_wire_read(int fd, kh_msg *out, double deadline, kh_err *err);

#endif
