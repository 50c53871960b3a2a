/* wire.c: framing for the worker protocol (see wire.h).  Owns bytes on the
 * pipe only: what the messages mean belongs to worker.c and supervisor.c. */
#include "core/wire.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void put_u16(unsigned char *p, uint16_t v) { p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); }
static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static uint16_t get_u16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}
static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

void kh_msg_free(kh_msg *m)
{
    if (!m)
        return;
    json_decref(m->head);
    free(m->payload);
    memset(m, 0, sizeof *m);
}

/* Wait until fd is ready for ev or the deadline passes. */
static kh_status wait_fd(int fd, short ev, double deadline, kh_err *err)
{
    for (;;) {
        int ms = -1;
        if (deadline > 0) {
            double left = deadline - kh_now();
            if (left <= 0)
                return kh_err_set(err, KH_ETIMEOUT, "deadline passed on the worker pipe");
            ms = (int)(left * 1000) + 1;
        }
        struct pollfd p = {.fd = fd, .events = ev};
        int r = poll(&p, 1, ms);
        if (r > 0)
            return KH_OK; /* readable, writable, or an error/hangup to discover */
        if (r < 0 && errno != EINTR)
            return kh_err_set(err, KH_EIO, "poll: %s", strerror(errno));
    }
}

static kh_status write_all(int fd, const unsigned char *p, size_t n, double deadline,
                           kh_err *err)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            kh_status st = wait_fd(fd, POLLOUT, deadline, err);
            if (st)
                return st;
            continue;
        }
        return kh_err_set(err, KH_EIO, "worker pipe closed while writing (%s)",
                          w < 0 ? strerror(errno) : "short write");
    }
    return KH_OK;
}

static int newline_after_frame;

void kh_wire_set_newline(int on) { newline_after_frame = on; }

kh_status kh_wire_write(int fd, const json_t *head, const void *payload, size_t payload_len,
                        double deadline, kh_err *err)
{
    char *js = json_dumps(head, JSON_COMPACT);
    if (!js)
        return kh_err_set(err, KH_EINVAL, "message head cannot be serialized");
    size_t jl = strlen(js);
    if (jl > KH_WIRE_MAX_HEAD || payload_len > KH_WIRE_MAX_PAYLOAD) {
        free(js);
        return kh_err_set(err, KH_EINVAL, "message too large (head %zu B, payload %zu B)", jl,
                          payload_len);
    }
    unsigned char hdr[KH_WIRE_HEADER];
    memcpy(hdr, "KHWF", 4);
    put_u16(hdr + 4, KH_WIRE_VERSION);
    put_u16(hdr + 6, 0);
    put_u32(hdr + 8, (uint32_t)jl);
    put_u32(hdr + 12, 0);
    put_u64(hdr + 16, payload_len);
    kh_status st = write_all(fd, hdr, sizeof hdr, deadline, err);
    if (!st)
        st = write_all(fd, (const unsigned char *)js, jl, deadline, err);
    if (!st && payload_len)
        st = write_all(fd, payload, payload_len, deadline, err);
    if (!st && newline_after_frame)
        st = write_all(fd, (const unsigned char *)"\n", 1, deadline, err);
    free(js);
    return st;
}

void kh_wire_reader_init(kh_wire_reader *r) { memset(r, 0, sizeof *r); }

void kh_wire_reader_free(kh_wire_reader *r)
{
    free(r->head);
    free(r->payload);
    memset(r, 0, sizeof *r);
}

/* Read into buf[*got..want); returns 1 when complete, 0 on EAGAIN, -1 on EOF
 * or error (err set). */
static int fill(int fd, unsigned char *buf, size_t want, size_t *got, kh_err *err)
{
    while (*got < want) {
        size_t chunk = want - *got;
        if (chunk > (1u << 30))
            chunk = 1u << 30;
        ssize_t n = read(fd, buf + *got, chunk);
        if (n > 0) {
            *got += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n == 0)
            kh_err_set(err, KH_EIO, "worker pipe closed");
        else
            kh_err_set(err, KH_EIO, "reading the worker pipe: %s", strerror(errno));
        return -1;
    }
    return 1;
}

kh_status kh_wire_read_some(kh_wire_reader *r, int fd, kh_msg *out, int *done, kh_err *err)
{
    *done = 0;
    if (r->hdr_got < KH_WIRE_HEADER) {
        int f = fill(fd, r->hdr, KH_WIRE_HEADER, &r->hdr_got, err);
        /* newlines between frames (kh_wire_set_newline) carry nothing */
        size_t skip = 0;
        while (skip < r->hdr_got && r->hdr[skip] == '\n')
            skip++;
        if (skip) {
            memmove(r->hdr, r->hdr + skip, r->hdr_got - skip);
            r->hdr_got -= skip;
            if (f > 0)
                f = fill(fd, r->hdr, KH_WIRE_HEADER, &r->hdr_got, err);
            if (f > 0 && r->hdr[0] == '\n')
                return kh_wire_read_some(r, fd, out, done, err);
        }
        /* Judge the magic as soon as it is there: a peer that is not a khlua
         * worker may write less than a header and leave. */
        if (r->hdr_got >= 4 && memcmp(r->hdr, "KHWF", 4) != 0)
            return kh_err_set(err, KH_EPARSE,
                              "not a khlua worker frame (starts with bytes %02x %02x %02x %02x)",
                              r->hdr[0], r->hdr[1], r->hdr[2], r->hdr[3]);
        if (f <= 0) {
            if (f < 0 && r->hdr_got > 0 && err)
                kh_err_prefix(err, "truncated frame header (%zu of %d bytes)", r->hdr_got,
                              KH_WIRE_HEADER);
            return f < 0 ? KH_EIO : KH_OK;
        }
        if (get_u16(r->hdr + 4) != KH_WIRE_VERSION)
            return kh_err_set(err, KH_EPARSE, "worker speaks protocol version %u, this khlua %d",
                              get_u16(r->hdr + 4), KH_WIRE_VERSION);
        r->head_len = get_u32(r->hdr + 8);
        uint64_t pl = get_u64(r->hdr + 16);
        if (r->head_len == 0 || r->head_len > KH_WIRE_MAX_HEAD || pl > KH_WIRE_MAX_PAYLOAD)
            return kh_err_set(err, KH_EPARSE, "frame sizes out of range (head %zu, payload %llu)",
                              r->head_len, (unsigned long long)pl);
        r->payload_len = (size_t)pl;
        r->head = malloc(r->head_len + 1);
        r->payload = r->payload_len ? malloc(r->payload_len) : NULL;
        if (!r->head || (r->payload_len && !r->payload))
            return kh_err_set(err, KH_ENOMEM, "out of memory for a %zu-byte message",
                              r->head_len + r->payload_len);
    }
    if (r->head_got < r->head_len) {
        int f = fill(fd, (unsigned char *)r->head, r->head_len, &r->head_got, err);
        if (f < 0)
            return kh_err_prefix(err, "truncated message"), KH_EIO;
        if (f == 0)
            return KH_OK;
    }
    if (r->payload_got < r->payload_len) {
        int f = fill(fd, r->payload, r->payload_len, &r->payload_got, err);
        if (f < 0)
            return kh_err_prefix(err, "truncated payload"), KH_EIO;
        if (f == 0)
            return KH_OK;
    }
    json_error_t je;
    json_t *head = json_loadb(r->head, r->head_len, 0, &je);
    if (!head || !json_is_object(head)) {
        json_decref(head);
        return kh_err_set(err, KH_EPARSE, "message head is not a JSON object: %s",
                          head ? "wrong type" : je.text);
    }
    out->head = head;
    out->payload = r->payload;
    out->payload_len = r->payload_len;
    r->payload = NULL;
    free(r->head);
    kh_wire_reader_init(r);
    *done = 1;
    return KH_OK;
}

kh_status kh_wire_read(int fd, kh_msg *out, double deadline, kh_err *err)
{
    kh_wire_reader r;
    kh_wire_reader_init(&r);
    memset(out, 0, sizeof *out);
    for (;;) {
        int done = 0;
        kh_status st = kh_wire_read_some(&r, fd, out, &done, err);
        if (st || done) {
            kh_wire_reader_free(&r);
            return st;
        }
        st = wait_fd(fd, POLLIN, deadline, err);
        if (st) {
            kh_wire_reader_free(&r);
            return st;
        }
    }
}
