/* role_host.c: the "host" worker role: runs host-backend candidates (shared
 * objects with a C entry point) for the `evaluate` method of
 * docs/evaluation.md.  This process is the warden (jail.h): it never loads
 * the candidate.  It owns the buffers' layout in the arena it shares with the
 * candidate's jail, input generation, poisoning, input checksums, guard
 * bands, the captured outputs, and the host timing protocols (hostbench.h)
 * whose timer runs here, around the jail's call.  Comparison with the
 * reference is the coordinator's (eval.c): no reference bytes ever enter
 * this process.
 *
 * Every call looks the same to the candidate: the next of a fixed pool of
 * buffer slots (the same pool in correctness and timing), inputs generated
 * just before it (a timed call's from a seed derived from the secret timing
 * seed and the call's number: no two timed calls share inputs, and none
 * shares the correctness inputs), outputs poisoned, workspace zeroed; a
 * timed call's inputs are generated in private and reach the jail only after
 * the cache flush, right before t0 (t_pre), so no work starts untimed.
 * Which timed calls are verified is drawn from the secret sample seed;
 * their outputs are copied after the call has returned.  After every call
 * the outputs are copied aside, and compared again before the next call: a
 * write after the call said it was done (a thread left running) is a
 * failure (late_write).
 *
 * Confinement of the worker itself, set up once before the hello: no core
 * files, no new privileges, a private network namespace where the kernel
 * allows one (unshare; the jail inherits it), an address-space limit
 * (KHLUA_HOST_AS_BYTES; not under AddressSanitizer, whose shadow memory
 * needs terabytes of address space: the coordinator uses ASan's
 * hard_rss_limit_mb there); the jail's own confinement is jail.c's and
 * jail_fs.c's.  Reading the request is host_req.c's. */
#include "worker/host_int.h"
#include "worker/hostbench.h"
#include "worker/jail.h"
#include "worker/runq.h"
#include "task/rng.h"
#include "task/task.h"
#include "worker/worker.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define KH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KH_ASAN 1
#endif
#endif

#define POISON_A 0xFF
#define POISON_B 0x7F
#define DEFAULT_SLOTS 4

/* ---- role state ----------------------------------------------------------- */
typedef struct host_state {
    char network[160];
    char memory[160];
    char filesystem[160]; /* what a jail may read (kh_jail_describe_fs) */
    double copy_bw; /* bytes/s, measured on first timing */
    size_t page;
    kh_jail jail;
} host_state;

static host_state *S(kh_worker *w) { return kh_worker_state(w); }

static void write_file(const char *path, const char *s)
{
    int fd = open(path, O_WRONLY);
    if (fd >= 0) {
        (void)!write(fd, s, strlen(s));
        close(fd);
    }
}

static const char CONFINEMENT[] =
    "jail: a fresh process per load (exec'd), seccomp-bpf allowlist (no exec, fork, sockets, "
    "ptrace, signals to others, writes to files; no open after load), no capabilities, reads "
    "while loading limited (filesystem), empty environment, stdin/stdout /dev/null; timer and "
    "checks in the worker";

static kh_status host_init(kh_worker *w, kh_err *err)
{
    host_state *s = calloc(1, sizeof *s);
    if (!s)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    s->page = (size_t)sysconf(_SC_PAGESIZE);
    kh_status st = kh_jail_warden_init(&s->jail, err);
    if (st) {
        free(s);
        return st;
    }
    kh_jail_describe_fs(s->filesystem, sizeof s->filesystem);
    struct rlimit rl = {0, 0};
    setrlimit(RLIMIT_CORE, &rl); /* a crashing candidate leaves no core file */
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);

    /* No network: a private network namespace holds only a down loopback. */
    uid_t uid = getuid();
    gid_t gid = getgid();
    if (getenv("KHLUA_HOST_KEEP_NETWORK")) {
        snprintf(s->network, sizeof s->network, "not isolated (KHLUA_HOST_KEEP_NETWORK)");
    } else if (unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0) {
        char m[64];
        write_file("/proc/self/setgroups", "deny");
        snprintf(m, sizeof m, "%u %u 1", (unsigned)uid, (unsigned)uid);
        write_file("/proc/self/uid_map", m);
        snprintf(m, sizeof m, "%u %u 1", (unsigned)gid, (unsigned)gid);
        write_file("/proc/self/gid_map", m);
        snprintf(s->network, sizeof s->network, "isolated (user and network namespace)");
    } else if (unshare(CLONE_NEWNET) == 0) {
        snprintf(s->network, sizeof s->network, "isolated (network namespace)");
    } else {
        snprintf(s->network, sizeof s->network, "no namespace (unshare: %s); the jail's "
                 "seccomp filter allows no socket", strerror(errno));
    }

    const char *as = getenv("KHLUA_HOST_AS_BYTES");
#ifdef KH_ASAN
    snprintf(s->memory, sizeof s->memory,
             "no address-space limit (AddressSanitizer build; ASAN_OPTIONS hard_rss_limit_mb)");
    (void)as;
#else
    if (as && *as) {
        rl.rlim_cur = rl.rlim_max = (rlim_t)strtoull(as, NULL, 10);
        if (setrlimit(RLIMIT_AS, &rl) == 0) {
            snprintf(s->memory, sizeof s->memory, "address space <= %llu bytes",
                     (unsigned long long)rl.rlim_cur);
        } else {
            snprintf(s->memory, sizeof s->memory, "no address-space limit (setrlimit: %s)",
                     strerror(errno));
        }
    } else {
        snprintf(s->memory, sizeof s->memory, "no address-space limit (KHLUA_HOST_AS_BYTES unset)");
    }
#endif
    kh_worker_set_state(w, s);
    return KH_OK;
}

static void host_fini(kh_worker *w)
{
    host_state *s = S(w);
    if (s)
        kh_jail_free(&s->jail);
    free(s);
    kh_worker_set_state(w, NULL);
}

/* ---- the run -------------------------------------------------------------- */
typedef struct outbuf {
    unsigned char *p;
    size_t len, cap;
} outbuf;

static kh_status out_add(outbuf *o, const void *d, size_t n, size_t *off, kh_err *err)
{
    if (o->len + n > o->cap) {
        size_t nc = o->cap ? o->cap : 4096;
        while (nc < o->len + n)
            nc *= 2;
        unsigned char *p = realloc(o->p, nc);
        if (!p)
            return kh_err_set(err, KH_ENOMEM, "out of memory for %zu reply bytes", nc);
        o->p = p;
        o->cap = nc;
    }
    if (n)
        memcpy(o->p + o->len, d, n);
    *off = o->len;
    o->len += n;
    return KH_OK;
}

static unsigned char canary(size_t i) { return (unsigned char)(0x5A ^ (i * 0x9Du)); }

/* One tensor of one slot in the arena:
 * [guard page][canary page][data ... pad][canary page][guard page].
 * The guard pages have no access in the jail (a write far past the data
 * faults there, described by the jail's handler); the warden filled the
 * whole band around the data with the canary pattern, and checks all of it
 * after every call (a jail that made its guard pages writable again is
 * caught the same way). */
typedef struct tbuf {
    size_t off, band; /* the region's offset in the data area; band: 2 pages */
    size_t len;       /* the whole region */
    unsigned char *data;
} tbuf;

typedef struct run {
    kh_worker *w;
    host_state *s;
    kh_jail *j;
    req *r;
    int nslots;
    tbuf b[KH_JAIL_MAX_SLOTS][MAX_TENSORS];
    unsigned char *snap[KH_JAIL_MAX_SLOTS][MAX_TENSORS]; /* inputs as generated */
    uint64_t slot_seed[KH_JAIL_MAX_SLOTS];
    unsigned char *kept[MAX_TENSORS]; /* the last call's outputs, as it returned */
    int kept_slot;                    /* -1: none */
    long kept_call;
    long calls;                       /* every call of the evaluation */
    long tcalls;                      /* calls of the timing phase, warm-up included */
    outbuf out;
    json_t *failures;
    json_t *timed_outputs;
    int cur, verify_now, nverified;
    long cur_k;
    uint64_t cur_seed;
    int timing_failed, late_failed;
    kh_runq rq; /* the jail's threads at the last run-queue reading */
} run;

static void add_failure(run *x, const char *check, long trial, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add_failure(run *x, const char *check, long trial, const char *fmt, ...)
{
    char d[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d, sizeof d, fmt, ap);
    va_end(ap);
    json_t *f = json_pack("{s:s, s:s}", "check", check, "detail", d);
    if (trial >= 0)
        json_object_set_new(f, "trial", json_integer(trial));
    json_array_append_new(x->failures, f);
}

static const char *role_name(int role)
{
    return role == T_INPUT ? "input" : role == T_OUTPUT ? "output" : "workspace";
}

/* The arena: the control page, then every slot's tensors; the jail's layout
 * (argument kinds, data offsets, guard pages) and the canary bands. */
static kh_status layout(run *x, kh_err *err)
{
    const req *r = x->r;
    size_t page = x->s->page, at = 0;
    int want = r->rotate > 0 ? r->rotate : DEFAULT_SLOTS;
    x->nslots = want < 2 ? 2 : want > KH_JAIL_MAX_SLOTS ? KH_JAIL_MAX_SLOTS : want;
    for (int s = 0; s < x->nslots; s++)
        for (size_t i = 0; i < r->nt; i++) {
            tbuf *b = &x->b[s][i];
            size_t body = (r->t[i].nbytes + page - 1) / page * page;
            b->off = at;
            b->band = 2 * page;
            b->len = body + 4 * page;
            at += b->len;
        }
    kh_status st = kh_jail_arena(x->j, at, err);
    if (st)
        return st;
    kh_jail_ctl *c = x->j->ctl;
    unsigned char *data = x->j->arena + x->j->ctl_len;
    memset(c, 0, sizeof *c);
    snprintf(c->symbol, sizeof c->symbol, "%s", r->symbol);
    c->cpu_s = r->deadline_s > 0 ? 2 * r->deadline_s + 5 : 0;
    c->nslots = (uint32_t)x->nslots;
    c->nt = (uint32_t)r->nt;
    c->na = (uint32_t)r->na;
    for (size_t k = 0; k < r->na; k++) {
        const harg *a = &r->a[k];
        kh_jail_arg *ja = &c->a[k];
        ja->kind = a->kind; /* the same order as KH_JARG_* */
        ja->tensor = a->kind == A_PTR || a->kind == A_SCALAR ? a->tensor : -1;
        ja->i = a->i;
        ja->f = a->f;
        if (a->kind == A_SCALAR) {
            kh_dtype d = r->t[a->tensor].dtype;
            ja->scalar = d == KH_DTYPE_F32   ? KH_JSCALAR_F32
                         : d == KH_DTYPE_I32 ? KH_JSCALAR_I32
                         : d == KH_DTYPE_I64 ? KH_JSCALAR_I64
                                             : KH_JSCALAR_BOOL;
        }
    }
    for (int s = 0; s < x->nslots; s++)
        for (size_t i = 0; i < r->nt; i++) {
            tbuf *b = &x->b[s][i];
            unsigned char *m = data + b->off;
            b->data = m + b->band;
            c->data_off[s][i] = x->j->ctl_len + b->off + b->band;
            kh_jail_guard *g = &c->guards[c->nguards++];
            g->off = x->j->ctl_len + b->off;
            g->len = page;
            snprintf(g->what, sizeof g->what, "before %s '%s'", role_name(r->t[i].role),
                     r->t[i].name);
            g = &c->guards[c->nguards++];
            g->off = x->j->ctl_len + b->off + b->len - page;
            g->len = page;
            snprintf(g->what, sizeof g->what, "after %s '%s'", role_name(r->t[i].role),
                     r->t[i].name);
            for (size_t k = 0; k < b->band; k++)
                m[k] = canary(k);
            for (size_t k = 0; b->band + r->t[i].nbytes + k < b->len; k++)
                b->data[r->t[i].nbytes + k] = canary(k);
            if (r->t[i].role == T_INPUT &&
                !(x->snap[s][i] = malloc(r->t[i].nbytes ? r->t[i].nbytes : 1)))
                return kh_err_set(err, KH_ENOMEM, "out of memory for an input checksum copy");
        }
    for (size_t i = 0; i < r->nt; i++)
        if (r->t[i].role == T_OUTPUT && !(x->kept[i] = malloc(r->t[i].nbytes ? r->t[i].nbytes : 1)))
            return kh_err_set(err, KH_ENOMEM, "out of memory for an output copy");
    x->kept_slot = -1;
    return KH_OK;
}

static void run_free(run *x)
{
    for (int s = 0; s < KH_JAIL_MAX_SLOTS; s++)
        for (size_t i = 0; i < MAX_TENSORS; i++)
            free(x->snap[s][i]);
    for (size_t i = 0; i < MAX_TENSORS; i++)
        free(x->kept[i]);
}

/* Copies into the arena.  cold: with non-temporal stores, so what a timed
 * call's inputs and outputs hold after the cache flush is not in the cache
 * (the flush comes before them: see t_publish). */
static void arena_copy(unsigned char *d, const unsigned char *src, size_t n, int cold)
{
#if defined(__SSE2__)
    if (cold) {
        size_t i = 0;
        for (; i < n && ((uintptr_t)(d + i) & 15); i++)
            d[i] = src[i];
        for (; i + 16 <= n; i += 16)
            _mm_stream_si128((__m128i *)(void *)(d + i),
                             _mm_loadu_si128((const __m128i *)(const void *)(src + i)));
        for (; i < n; i++)
            d[i] = src[i];
        return;
    }
#endif
    (void)cold;
    memcpy(d, src, n);
}

static void arena_set(unsigned char *d, int byte, size_t n, int cold)
{
#if defined(__SSE2__)
    if (cold) {
        size_t i = 0;
        __m128i v = _mm_set1_epi8((char)byte);
        for (; i < n && ((uintptr_t)(d + i) & 15); i++)
            d[i] = (unsigned char)byte;
        for (; i + 16 <= n; i += 16)
            _mm_stream_si128((__m128i *)(void *)(d + i), v);
        for (; i < n; i++)
            d[i] = (unsigned char)byte;
        return;
    }
#endif
    (void)cold;
    memset(d, byte, n);
}

static void arena_fence(void)
{
#if defined(__SSE2__)
    _mm_sfence();
#endif
    atomic_thread_fence(memory_order_release);
}

/* Generate slot s's inputs for seed into the private copy (the checksum);
 * the jail sees nothing of them until publish_inputs. */
static kh_status gen_inputs(run *x, int s, uint64_t seed, kh_err *err)
{
    kh_engine *e = kh_worker_engine(x->w);
    for (size_t i = 0; i < x->r->nt; i++) {
        const tspec *t = &x->r->t[i];
        if (t->role != T_INPUT)
            continue;
        unsigned char *d = x->snap[s][i];
        kh_tensor *tt = NULL;
        kh_status st = kh_tensor_borrow(&tt, t->dtype, t->ndim, t->shape, d, t->nbytes, err);
        if (st)
            return st;
        if (t->gen == G_RANDOM)
            st = kh_rng_fill(e, tt, seed, t->stream, err);
        else if (t->gen == G_DSA_KCACHE)
            st = kh_rng_fill_dsa_kcache(e, tt, seed, t->stream, err);
        else if (t->gen == G_SCALAR)
            kh_tensor_set(tt, 0, t->value);
        else if (t->gen == G_BYTES)
            for (size_t o = 0; t->bytes_len && o < t->nbytes; o += t->bytes_len)
                memcpy(d + o, x->r->payload + t->bytes_off,
                       t->bytes_len < t->nbytes - o ? t->bytes_len : t->nbytes - o);
        kh_tensor_free(tt);
        if (st)
            return st;
    }
    x->slot_seed[s] = seed;
    return KH_OK;
}

/* Slot s's inputs, from the private copy into the arena. */
static void publish_inputs(run *x, int s, int cold)
{
    for (size_t i = 0; i < x->r->nt; i++)
        if (x->r->t[i].role == T_INPUT)
            arena_copy(x->b[s][i].data, x->snap[s][i], x->r->t[i].nbytes, cold);
}

/* Generate slot s's inputs and put them in the arena (correctness calls). */
static kh_status fill_inputs(run *x, int s, uint64_t seed, kh_err *err)
{
    kh_status st = gen_inputs(x, s, seed, err);
    if (!st)
        publish_inputs(x, s, 0);
    return st;
}

/* The same inputs as slot from, in slot s. */
static void copy_inputs(run *x, int s, int from)
{
    for (size_t i = 0; i < x->r->nt; i++)
        if (x->r->t[i].role == T_INPUT) {
            if (from != s)
                memcpy(x->snap[s][i], x->snap[from][i], x->r->t[i].nbytes);
            memcpy(x->b[s][i].data, x->snap[s][i], x->r->t[i].nbytes);
        }
    x->slot_seed[s] = x->slot_seed[from];
}

static void prep_outputs(run *x, int s, int pattern, int cold)
{
    for (size_t i = 0; i < x->r->nt; i++) {
        const tspec *t = &x->r->t[i];
        if (t->role == T_OUTPUT && pattern >= 0)
            arena_set(x->b[s][i].data, pattern, t->nbytes, cold);
        else if (t->role == T_WORKSPACE && t->zero)
            arena_set(x->b[s][i].data, 0, t->nbytes, cold);
    }
}

/* The outputs as the call returned them, kept to compare before the next. */
static void keep_outputs(run *x, int s, long call)
{
    for (size_t i = 0; i < x->r->nt; i++)
        if (x->r->t[i].role == T_OUTPUT)
            memcpy(x->kept[i], x->b[s][i].data, x->r->t[i].nbytes);
    x->kept_slot = s;
    x->kept_call = call;
}

/* Nothing wrote the last call's outputs after it returned. */
static int check_late(run *x, long trial)
{
    int s = x->kept_slot;
    if (s < 0 || x->late_failed)
        return 1;
    for (size_t i = 0; i < x->r->nt; i++) {
        const tspec *t = &x->r->t[i];
        if (t->role != T_OUTPUT || !memcmp(x->kept[i], x->b[s][i].data, t->nbytes))
            continue;
        size_t first = 0;
        while (first < t->nbytes && x->kept[i][first] == x->b[s][i].data[first])
            first++;
        add_failure(x, "late_write", trial, "output '%s' of call %ld was written after the call "
                    "had returned (first at byte %zu): work left running past its end is not "
                    "timed", t->name, x->kept_call, first);
        x->late_failed = 1;
        return 0;
    }
    return 1;
}

/* Inputs unchanged against their private copy. */
static int check_inputs(run *x, int s, const char *when, long trial)
{
    int ok = 1;
    for (size_t i = 0; i < x->r->nt; i++) {
        const tspec *t = &x->r->t[i];
        const unsigned char *d = x->b[s][i].data, *want = x->snap[s][i];
        if (t->role != T_INPUT || !memcmp(d, want, t->nbytes))
            continue;
        size_t es = kh_dtype_bits(t->dtype) >= 8 ? (size_t)kh_dtype_bits(t->dtype) / 8 : 1;
        uint64_t changed = 0, first = UINT64_MAX;
        for (size_t e = 0; e < t->nbytes / es; e++)
            if (memcmp(d + e * es, want + e * es, es)) {
                if (first == UINT64_MAX)
                    first = e;
                changed++;
            }
        add_failure(x, "inputs_unchanged", trial, "input '%s' changed %s (%llu of %llu elements; "
                    "first at %llu)", t->name, when, (unsigned long long)changed,
                    (unsigned long long)(t->nbytes / es), (unsigned long long)first);
        memcpy(x->b[s][i].data, want, t->nbytes); /* later calls see the right values */
        ok = 0;
    }
    return ok;
}

static int check_guards(run *x, int s, const char *when, long trial)
{
    int ok = 1;
    for (size_t i = 0; i < x->r->nt; i++) {
        const tbuf *b = &x->b[s][i];
        const unsigned char *m = b->data - b->band;
        size_t n = x->r->t[i].nbytes;
        char why[200] = "";
        for (size_t k = 0; k < b->band && !why[0]; k++)
            if (m[k] != canary(k))
                snprintf(why, sizeof why, "the guard band before it was written (%zu bytes "
                         "before the start)", b->band - k);
        for (size_t k = 0; b->band + n + k < b->len && !why[0]; k++)
            if (b->data[n + k] != canary(k))
                snprintf(why, sizeof why, "the guard band after it was written (%zu bytes past "
                         "the end)", k);
        if (why[0]) {
            add_failure(x, "guards", trial, "%s '%s': %s %s", role_name(x->r->t[i].role),
                        x->r->t[i].name, why, when);
            ok = 0;
        }
    }
    return ok;
}

static kh_status capture_outputs(run *x, json_t **obj, kh_err *err)
{
    *obj = json_object();
    for (size_t i = 0; i < x->r->nt; i++) {
        if (x->r->t[i].role != T_OUTPUT)
            continue;
        size_t off = 0;
        kh_status st = out_add(&x->out, x->kept[i], x->r->t[i].nbytes, &off, err);
        if (st)
            return st;
        json_object_set_new(*obj, x->r->t[i].name,
                            json_pack("[I, I]", (json_int_t)off, (json_int_t)x->r->t[i].nbytes));
    }
    return KH_OK;
}

/* The next slot of the pool: every call, correctness or timing, takes the
 * next one, so the addresses a call sees say nothing about what it is. */
static int next_slot(run *x) { return (int)(x->calls++ % x->nslots); }

/* One untimed call on slot s (correctness). */
static void call_slot(run *x, int s)
{
    kh_jail_arm(x->j, (uint32_t)s);
    kh_jail_go(x->j);
    keep_outputs(x, s, x->calls - 1);
}

/* -- timing callbacks: the timer (hostbench.c) runs here, in the warden -- */
static uint64_t call_seed(const req *r, long k)
{
    return kh_rng_derive_seed(r->timing_seed, 0x7F, (uint64_t)k) & INT64_MAX;
}

static int verify_draw(run *x, long ti)
{
    const req *r = x->r;
    if (ti < 0 || r->verify_fraction <= 0 || x->nverified >= r->max_verified)
        return 0;
    if (r->verify_fraction >= 1)
        return 1;
    uint64_t h = kh_rng_derive_seed(r->sample_seed, 0x5E, (uint64_t)ti);
    return (double)(h >> 11) * 0x1p-53 < r->verify_fraction;
}

static kh_status t_call(void *ctx, kh_err *err)
{
    (void)err;
    kh_jail_go(((run *)ctx)->j);
    return KH_OK;
}

/* A timing call, in the order that keeps its work inside the window: the
 * inputs are generated in private (t_pre), the jail is armed (it wakes and
 * spins; the warden waits for that, so nothing may be visible to it yet:
 * a jail that held the "armed" answer back while it worked on visible
 * inputs would work untimed), the cache is flushed (hostbench.c), and only
 * then are the outputs poisoned and the inputs published (t_publish),
 * right before t0.  Nothing waits on the jail between t_publish and t0. */
static kh_status t_pre(void *ctx, long ti, kh_err *err)
{
    run *x = ctx;
    /* (a trusted reference's outputs are not kept: nothing to compare) */
    if (!x->r->trusted && !check_late(x, -1))
        x->timing_failed = 1;
    long k = x->tcalls++;
    int s = next_slot(x);
    uint64_t seed = call_seed(x->r, k);
    if (x->r->trusted && k >= x->nslots) {
        /* a trusted reference once every slot holds timing inputs: back to
         * the values the slot was given (nothing to hide from it), which
         * t_publish puts back */
        seed = x->slot_seed[s];
    } else {
        kh_status st = gen_inputs(x, s, seed, err);
        if (st)
            return kh_err_prefix(err, "timing call %ld", k);
    }
    x->cur = s;
    x->cur_k = k;
    x->cur_seed = seed;
    x->verify_now = verify_draw(x, ti);
    kh_jail_arm(x->j, (uint32_t)s);
    return KH_OK;
}

static kh_status t_publish(void *ctx, long ti, kh_err *err)
{
    (void)ti;
    (void)err;
    run *x = ctx;
    int s = x->cur, cold = x->r->bo.cold_l2;
    /* every call's outputs poisoned (alternating patterns), verified or not;
     * the outputs first, the inputs last */
    prep_outputs(x, s, x->r->poison ? ((x->cur_k & 1) ? POISON_B : POISON_A) : -1, cold);
    publish_inputs(x, s, cold);
    arena_fence();
    return KH_OK;
}

static kh_status t_post(void *ctx, long ti, kh_err *err)
{
    run *x = ctx;
    int s = x->cur;
    if (!x->r->trusted || x->verify_now)
        keep_outputs(x, s, x->calls - 1);
    char when[64];
    snprintf(when, sizeof when, "during timing (call %ld)", x->tcalls - 1);
    if (x->r->inputs_unchanged && !check_inputs(x, s, when, -1))
        x->timing_failed = 1;
    if (x->r->guards && !check_guards(x, s, when, -1))
        x->timing_failed = 1;
    if (x->verify_now) {
        x->nverified++;
        json_t *o;
        kh_status st = capture_outputs(x, &o, err);
        if (st) {
            json_decref(o);
            return st;
        }
        json_array_append_new(x->timed_outputs,
                              json_pack("{s:i, s:I, s:I, s:o}", "set", s, "seed",
                                        (json_int_t)x->cur_seed, "call", (json_int_t)ti,
                                        "outputs", o));
    }
    return KH_OK;
}

/* hostbench's waited_ns: the run-queue wait of the warden's thread (it
 * takes t0 and t1) and of the jail's running threads (runq.h). */
static uint64_t t_waited(void *ctx)
{
    run *x = ctx;
    return kh_runq_waited(&x->rq, x->j->pid);
}

static json_t *timing_json(const kh_bench_result *r, const kh_bench_opts *o, double bw)
{
    json_t *samples = json_array(), *tm = json_array();
    for (size_t i = 0; i < r->n; i++)
        json_array_append_new(samples, json_real(r->samples_ns[i]));
    for (int i = 0; i < r->trials && i < 16; i++)
        json_array_append_new(tm, json_real(r->trial_median_ns[i]));
    return json_pack("{s:s, s:s, s:s, s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:i, s:I, "
                     "s:o, s:o, s:f, s:I, s:b, s:{s:I, s:I}}",
                     "status", r->status, "why", r->why, "timer", r->timer, "protocol",
                     kh_protocol_name(o->protocol), "latency_ns", r->latency_ns,
                     "window_latency_ns", r->window_latency_ns, "median_ns", r->median_ns,
                     "mean_ns", r->mean_ns, "stdev_ns", r->stdev_ns, "min_ns", r->min_ns,
                     "max_ns", r->max_ns, "rel_ci", isfinite(r->rel_ci) ? r->rel_ci : -1.0,
                     "trials", r->trials, "n", (json_int_t)r->n, "samples_ns", samples,
                     "trial_median_ns", tm, "copy_bandwidth_Bps", bw, "llc_bytes",
                     (json_int_t)kh_hostbench_llc_bytes(), "cold", o->cold_l2, "contended",
                     "retaken", (json_int_t)r->contended, "kept", (json_int_t)r->contended_kept);
}

/* The most bytes per second this host can move, for the speed-of-light
 * bound: one core's best copy of a cache-resident block, times the cores (a
 * multi-threaded candidate on hot caches may use them all).  Generous on
 * purpose: a bound that rejects honest work would be worse than none. */
static double host_bandwidth(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return kh_hostbench_copy_bandwidth((size_t)256 << 10, 200) * (double)(cpus > 0 ? cpus : 1);
}

static kh_status m_evaluate(kh_worker *w, const json_t *params, const unsigned char *payload,
                            size_t n, json_t **result, unsigned char **out_p, size_t *out_n,
                            kh_err *err)
{
    req *r = calloc(1, sizeof *r);
    run *x = calloc(1, sizeof *x);
    if (!r || !x) {
        free(r);
        free(x);
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    kh_status st = kh_host_parse_req(params, payload, n, r, err);
    if (st) {
        free(r);
        free(x);
        return st;
    }
    x->w = w;
    x->s = S(w);
    x->j = &x->s->jail;
    x->r = r;
    x->failures = json_array();
    x->timed_outputs = json_array();
    json_t *trials = json_array(), *timing = json_null();
    if ((st = layout(x, err)) || (st = kh_jail_start(x->j, r->so, r->so_len, err)))
        goto out;

    /* Correctness: each trial's inputs in the next slot, called under one
     * poison and (with poison) again on the same buffers and values under
     * the other (a candidate that skips its work on buffers it has seen
     * leaves the second poison in place). */
    for (size_t tr = 0; tr < r->ntrials; tr++) {
        json_t *trial = json_pack("{s:I}", "seed", (json_int_t)r->seeds[tr]);
        json_t *checks = json_object();
        json_array_append_new(trials, trial);
        int npass = r->poison ? 2 : 1, in_ok = 1, g_ok = 1, first = -1;
        size_t first_out = x->out.len;
        for (int pass = 0; pass < npass; pass++) {
            check_late(x, (long)tr);
            int s = first;
            if (first < 0) {
                s = next_slot(x);
                if ((st = fill_inputs(x, s, r->seeds[tr], err))) {
                    json_decref(checks);
                    goto out;
                }
                first = s;
            } else {
                copy_inputs(x, s, s); /* the same buffers, their values again */
            }
            prep_outputs(x, s, r->poison ? (pass ? POISON_B : POISON_A) : -1, 0);
            call_slot(x, s);
            json_t *o;
            if ((st = capture_outputs(x, &o, err))) {
                json_decref(o);
                json_decref(checks);
                goto out;
            }
            json_object_set_new(trial, pass ? "outputs_b" : "outputs", o);
            const char *when = pass ? "by the second call" : "by the first call";
            if (r->inputs_unchanged && in_ok && !check_inputs(x, s, when, (long)tr))
                in_ok = 0;
            if (r->guards && g_ok && !check_guards(x, s, when, (long)tr))
                g_ok = 0;
        }
        if (r->inputs_unchanged)
            json_object_set_new(checks, "inputs_unchanged", json_string(in_ok ? "ok" : "failed"));
        if (r->guards)
            json_object_set_new(checks, "guards", json_string(g_ok ? "ok" : "failed"));
        int same = 0;
        if (npass == 2) {
            /* bit-identical under both poisons (so every byte was written):
             * the second copy is not sent, the coordinator judges it once */
            size_t half = (x->out.len - first_out) / 2;
            same = !half || !memcmp(x->out.p + first_out, x->out.p + first_out + half, half);
            if (same) {
                x->out.len = first_out + half;
                json_object_set_new(trial, "outputs_b",
                                    json_deep_copy(json_object_get(trial, "outputs")));
                json_object_set_new(trial, "outputs_b_same", json_true());
            }
        }
        if (r->deterministic && npass == 2) {
            json_object_set_new(checks, "deterministic", json_string(same ? "ok" : "failed"));
            if (!same)
                add_failure(x, "deterministic", (long)tr,
                            "the two calls of trial %zu gave different bits", tr);
        }
        json_object_set_new(trial, "checks", checks);
    }

    if (r->timing) {
        check_late(x, -1);
        if (r->trusted)
            x->kept_slot = -1;
        if (r->reload) {
            /* a fresh process: nothing of the correctness calls survives */
            if ((st = kh_jail_start(x->j, r->so, r->so_len, err)))
                goto out;
            x->kept_slot = -1;
        }
        if (!x->s->copy_bw)
            x->s->copy_bw = host_bandwidth();
        kh_hostbench_target t = {.call = t_call, .pre = t_pre, .publish = t_publish,
                                 .post = t_post, .waited_ns = t_waited, .ctx = x};
        kh_bench_result br;
        st = kh_hostbench_run(kh_worker_engine(w), &t, &r->bo, &br, err);
        if (!st) {
            json_decref(timing);
            timing = timing_json(&br, &r->bo, x->s->copy_bw);
        }
        kh_bench_result_free(&br);
        if (st)
            goto out;
        /* the last call's outputs, a moment later */
        usleep(1000);
        check_late(x, -1);
    }

    *result = json_pack("{s:o, s:o, s:o, s:o, s:{s:s, s:s, s:s, s:s, s:b}}", "trials", trials,
                        "timed_outputs", x->timed_outputs, "timing", timing, "failures",
                        x->failures, "worker", "network", x->s->network, "memory", x->s->memory,
                        "filesystem", x->s->filesystem, "confinement", CONFINEMENT,
                        "guard_pages", 1);
    trials = timing = x->timed_outputs = x->failures = NULL;
    *out_p = x->out.p;
    *out_n = x->out.len;
    x->out.p = NULL;
out:
    kh_jail_free(x->j);
    json_decref(trials);
    json_decref(timing);
    json_decref(x->timed_outputs);
    json_decref(x->failures);
    free(x->out.p);
    run_free(x);
    free(x);
    free(r);
    return st;
}

static kh_status m_info(kh_worker *w, const json_t *params, const unsigned char *payload,
                        size_t n, json_t **result, unsigned char **out, size_t *out_n,
                        kh_err *err)
{
    (void)params; (void)payload; (void)n; (void)out; (void)out_n; (void)err;
    host_state *s = S(w);
    if (!s->copy_bw)
        s->copy_bw = host_bandwidth();
    *result = json_pack("{s:s, s:s, s:s, s:s, s:f, s:I, s:I}", "network", s->network, "memory",
                        s->memory, "filesystem", s->filesystem, "confinement", CONFINEMENT,
                        "copy_bandwidth_Bps", s->copy_bw, "llc_bytes",
                        (json_int_t)kh_hostbench_llc_bytes(), "cpus",
                        (json_int_t)sysconf(_SC_NPROCESSORS_ONLN));
    return KH_OK;
}

static const kh_worker_method_entry host_methods[] = {
    {"info", m_info}, {"evaluate", m_evaluate}, {NULL, NULL},
};

const kh_worker_role kh_role_host = {
    .name = "host",
    .summary = "runs host-backend candidates (shared objects): evaluate, info",
    .methods = host_methods,
    .init = host_init,
    .fini = host_fini,
};
