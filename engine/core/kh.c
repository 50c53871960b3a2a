/* kh.c: the status names, the error record, and the small shared helpers
 * declared in kh.h.  Module-specific code lives in its own unit. */
#include "core/kh.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/random.h>
#include <unistd.h>

static const char *const status_names[KH_STATUS_COUNT] = {
    [KH_OK] = "OK",           [KH_EINVAL] = "EINVAL",     [KH_ENOMEM] = "ENOMEM",
    [KH_EIO] = "EIO",         [KH_ENOTFOUND] = "ENOTFOUND", [KH_ENODEV] = "ENODEV",
    [KH_ECUDA] = "ECUDA",     [KH_ECOMPILE] = "ECOMPILE", [KH_ESTORE] = "ESTORE",
    [KH_ETIMEOUT] = "ETIMEOUT", [KH_EINTR] = "EINTR",      [KH_ENET] = "ENET",
    [KH_EPARSE] = "EPARSE",   [KH_ECORRUPT] = "ECORRUPT", [KH_EUNSUPPORTED] = "EUNSUPPORTED",
    [KH_ESTATE] = "ESTATE",   [KH_ECHILD] = "ECHILD",
};

const char *kh_status_name(kh_status s)
{
    if ((unsigned)s >= KH_STATUS_COUNT || !status_names[s])
        return "EUNKNOWN";
    return status_names[s];
}

kh_status kh_err_setv(kh_err *e, kh_status code, const char *fmt, va_list ap)
{
    if (e) {
        e->code = code;
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    }
    return code;
}

kh_status kh_err_set(kh_err *e, kh_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kh_err_setv(e, code, fmt, ap);
    va_end(ap);
    return code;
}

kh_status kh_err_prefix(kh_err *e, const char *fmt, ...)
{
    if (!e)
        return KH_OK;
    char prefix[512], old[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    size_t pl = strlen(prefix);
    if (pl > sizeof e->msg - 3)
        pl = sizeof e->msg - 3;
    memcpy(e->msg, prefix, pl);
    memcpy(e->msg + pl, ": ", 2);
    size_t rest = sizeof e->msg - pl - 3;
    size_t ol = strnlen(old, rest);
    memcpy(e->msg + pl + 2, old, ol);
    e->msg[pl + 2 + ol] = '\0';
    return e->code;
}

void kh_err_clear(kh_err *e)
{
    if (e) {
        e->code = KH_OK;
        e->msg[0] = '\0';
    }
}

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 if invalid.
 * Rejects overlongs, surrogates and code points above U+10FFFF. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned cp, min;
    if ((c & 0xE0) == 0xC0) {
        len = 2; cp = c & 0x1F; min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3; cp = c & 0x0F; min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4; cp = c & 0x07; min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

char *kh_utf8_sanitize(const char *src, size_t len, size_t *out_len)
{
    /* Worst case: every byte becomes the 3-byte U+FFFD. */
    char *out = malloc(len * 3 + 1);
    if (!out)
        return NULL;
    const unsigned char *s = (const unsigned char *)src;
    size_t i = 0, o = 0;
    while (i < len) {
        if (s[i] == 0) {
            i++;
            continue;
        }
        size_t k = utf8_seq(s + i, len - i);
        if (k) {
            memcpy(out + o, s + i, k);
            o += k;
            i += k;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    out[o] = '\0';
    if (out_len)
        *out_len = o;
    return out;
}

double kh_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void kh_timeline(const char *fmt, ...)
{
    static int fd = -2;
    if (fd == -2) {
        const char *p = getenv("KHLUA_TIMELINE");
        fd = p && *p ? open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
    }
    if (fd < 0)
        return;
    char line[512];
    int n = snprintf(line, sizeof line, "%.6f %d ", kh_now(), (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    n += m < 0 ? 0 : m > (int)(sizeof line) - n - 2 ? (int)(sizeof line) - n - 2 : m;
    line[n++] = '\n';
    if (write(fd, line, (size_t)n) < 0)
        fd = -1; /* a diagnostic: stop rather than fail the run */
}

double kh_wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int kh_read_file(const char *path, char **data, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - n - 1, f);
        if (n + 1 < cap)
            break;
        char *nb = realloc(b, cap * 2);
        if (!nb) {
            free(b);
            b = NULL;
            break;
        }
        b = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!b || bad) {
        free(b);
        errno = b ? EIO : ENOMEM;
        return -1;
    }
    b[n] = '\0';
    *data = b;
    if (len)
        *len = n;
    return 0;
}

char *kh_strdup(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

typedef struct range_job {
    kh_range_fn fn;
    void *ctx;
    uint64_t lo, hi;
    int stopped;
} range_job;

static void *range_run(void *arg)
{
    range_job *j = arg;
    j->stopped = j->fn(j->ctx, j->lo, j->hi);
    return NULL;
}

#define KH_PAR_MAX_THREADS 32

int kh_parallel_for(uint64_t n, uint64_t min_per, uint64_t align, kh_range_fn fn, void *ctx)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t nt = min_per ? n / min_per : n;
    if (align < 1)
        align = 1;
    if (cpus < 1)
        cpus = 1;
    if (nt > (uint64_t)cpus)
        nt = (uint64_t)cpus;
    if (nt > KH_PAR_MAX_THREADS)
        nt = KH_PAR_MAX_THREADS;
    if (nt < 1)
        nt = 1;
    range_job jobs[KH_PAR_MAX_THREADS];
    pthread_t tid[KH_PAR_MAX_THREADS];
    int started[KH_PAR_MAX_THREADS] = {0};
    uint64_t per = (n / nt + align) / align * align;
    for (uint64_t k = 0; k < nt; k++) {
        uint64_t lo = k * per, hi = lo + per;
        jobs[k] = (range_job){fn, ctx, lo < n ? lo : n, hi < n && k + 1 < nt ? hi : n, 0};
        if (k > 0 && pthread_create(&tid[k], NULL, range_run, &jobs[k]) == 0)
            started[k] = 1;
    }
    range_run(&jobs[0]);
    int stopped = jobs[0].stopped;
    for (uint64_t k = 1; k < nt; k++) {
        if (started[k])
            pthread_join(tid[k], NULL);
        else
            range_run(&jobs[k]);
        stopped |= jobs[k].stopped;
    }
    return stopped;
}

kh_status kh_secure_seed(uint64_t *out, kh_err *err)
{
    uint64_t v = 0;
    unsigned char *p = (unsigned char *)&v;
    size_t got = 0;
    while (got < sizeof v) {
        ssize_t n = getrandom(p + got, sizeof v - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return kh_err_set(err, KH_EIO, "cannot draw a seed from the OS (getrandom): %s",
                              n < 0 ? strerror(errno) : "no bytes");
        got += (size_t)n;
    }
    *out = v & INT64_MAX; /* exact in JSON and as a Lua integer */
    return KH_OK;
}
