/* role_host.c: the "host" worker role: runs host-backend candidates (shared
 * objects with a C entry point) for the `evaluate` method of
 * docs/evaluation.md.  Owns, inside this disposable process: loading the
 * shared object from a private temporary copy (and a fresh copy before
 * timing), buffers with guard pages and canary bands, input generation,
 * poisoning, input checksums, the call itself, and the host timing protocols
 * (hostbench.h) with rotated inputs and sampled output capture.  Comparison
 * with the reference is the coordinator's (eval.c): no reference bytes ever
 * enter this process.
 *
 * Confinement, set up once before the hello: no core files, no new
 * privileges, a private network namespace where the kernel allows one
 * (unshare), an address-space limit (KHLUA_HOST_AS_BYTES; not under
 * AddressSanitizer, whose shadow memory needs terabytes of address space:
 * the coordinator uses ASan's hard_rss_limit_mb there), and per request a
 * CPU-time limit of the request's deadline.  Fatal signals are described on
 * stderr ("khlua-fault: kind=... ") before the process dies by the same
 * signal, so the supervisor's verdict can say what happened. */
#include "hostbench.h"
#include "rng.h"
#include "task.h"
#include "worker.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define KH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KH_ASAN 1
#endif
#endif

#define MAX_TENSORS 64
#define MAX_ARGS 32
#define MAX_GUARDS 16384 /* two per buffer: a sampling task's 1024 calls x 3 buffers fit */
#define POISON_A 0xFF
#define POISON_B 0x7F

/* ---- fault reporting (async-signal-safe) -------------------------------- */
typedef struct guard_page {
    uintptr_t lo, hi;
    char what[80]; /* "before input 'x'" */
} guard_page;

static guard_page g_guards[MAX_GUARDS];
static volatile size_t g_nguards;
static uintptr_t g_stack_hi, g_stack_lo;
static rlim_t g_as_limit;

static void put(const char *s) { (void)!write(2, s, strlen(s)); }

static void put_hex(uintptr_t v)
{
    char b[19] = "0x";
    for (int i = 0; i < 16; i++)
        b[2 + i] = "0123456789abcdef"[(v >> (60 - 4 * i)) & 15];
    b[18] = 0;
    put(b);
}

static int near_as_limit(void)
{
    if (!g_as_limit || g_as_limit == RLIM_INFINITY)
        return 0;
    int fd = open("/proc/self/statm", O_RDONLY);
    if (fd < 0)
        return 0;
    char b[64];
    ssize_t n = read(fd, b, sizeof b - 1);
    close(fd);
    if (n <= 0)
        return 0;
    unsigned long pages = 0;
    for (ssize_t i = 0; i < n && b[i] >= '0' && b[i] <= '9'; i++)
        pages = pages * 10 + (unsigned long)(b[i] - '0');
    return (double)pages * 4096.0 > 0.9 * (double)g_as_limit;
}

static void on_fatal(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    uintptr_t a = (uintptr_t)si->si_addr;
    const char *kind = "crash", *signame = "SIG?";
    const char *what = NULL;
    switch (sig) {
    case SIGSEGV: signame = "SIGSEGV"; kind = "segfault"; break;
    case SIGBUS: signame = "SIGBUS"; kind = si->si_code == BUS_ADRALN ? "misaligned" : "bus_error"; break;
    case SIGFPE: signame = "SIGFPE"; kind = "arithmetic"; break;
    case SIGILL: signame = "SIGILL"; kind = "illegal_instruction"; break;
    case SIGABRT: signame = "SIGABRT"; kind = "abort"; break;
    case SIGXCPU: signame = "SIGXCPU"; kind = "cpu_limit"; break;
    }
    if (sig == SIGSEGV || sig == SIGBUS) {
        for (size_t i = 0; i < g_nguards; i++)
            if (a >= g_guards[i].lo && a < g_guards[i].hi) {
                kind = "guard_page";
                what = g_guards[i].what;
            }
        if (!what && g_stack_hi && a < g_stack_hi && a + (1u << 20) >= g_stack_lo)
            kind = "stack_overflow";
        /* x86 reports misaligned accesses with alignment checking as SIGBUS
         * BUS_ADRALN, other kernels as SIGSEGV/SIGBUS with si_code 0. */
        if (sig == SIGBUS && !what && (si->si_code == BUS_ADRALN || si->si_code == 0))
            kind = "misaligned";
    }
    if ((sig == SIGSEGV || sig == SIGABRT) && near_as_limit())
        kind = "out_of_memory";
    put("\nkhlua-fault: kind=");
    put(kind);
    put(" signal=");
    put(signame);
    if (sig == SIGSEGV || sig == SIGBUS) {
        put(" addr=");
        put_hex(a);
    }
    if (what) {
        put(" guard=");
        put(what);
    }
    put("\n");
    /* Die by the same signal, so the supervisor sees it. */
    signal(sig, SIG_DFL);
    if (sig == SIGABRT || sig == SIGXCPU)
        raise(sig);
}

static void guard_add(void *lo, size_t len, const char *where, const char *name)
{
    /* a slot freed by guard_remove first: a long-lived worker would
     * otherwise run out of slots and stop naming its guard faults */
    size_t i = 0;
    while (i < g_nguards && (g_guards[i].lo || g_guards[i].hi))
        i++;
    if (i >= MAX_GUARDS)
        return;
    guard_page *g = &g_guards[i];
    g->lo = g->hi = 0;
    snprintf(g->what, sizeof g->what, "%s '%s'", where, name);
    g->lo = (uintptr_t)lo;
    g->hi = (uintptr_t)lo + len;
    if (i == g_nguards)
        g_nguards++;
}

static void guard_remove(void *lo)
{
    for (size_t i = 0; i < g_nguards; i++)
        if (g_guards[i].lo == (uintptr_t)lo) {
            g_guards[i].lo = g_guards[i].hi = 0;
        }
}

/* ---- role state ----------------------------------------------------------- */
typedef struct host_state {
    char network[160];
    char memory[160];
    double copy_bw; /* bytes/s, measured on first timing */
    size_t page;
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

static kh_status host_init(kh_worker *w, kh_err *err)
{
    host_state *s = calloc(1, sizeof *s);
    if (!s)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    s->page = (size_t)sysconf(_SC_PAGESIZE);
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
        snprintf(s->network, sizeof s->network, "not isolated (unshare: %s)", strerror(errno));
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
            g_as_limit = rl.rlim_cur;
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

    /* Stack bounds, to tell a stack overflow from another bad address. */
    struct rlimit st;
    volatile char here = 0;
    g_stack_hi = (uintptr_t)&here + 65536;
    if (getrlimit(RLIMIT_STACK, &st) == 0 && st.rlim_cur != RLIM_INFINITY)
        g_stack_lo = (uintptr_t)&here - st.rlim_cur;
    else
        g_stack_lo = (uintptr_t)&here - (8u << 20);

    /* An alternate stack, so a stack overflow can still be described. */
    static unsigned char altstack[64 * 1024];
    stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack, .ss_flags = 0};
    sigaltstack(&ss, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fatal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGXCPU};
    for (size_t i = 0; i < KH_ARRAY_LEN(sigs); i++)
        sigaction(sigs[i], &sa, NULL);
    kh_worker_set_state(w, s);
    return KH_OK;
}

static void host_fini(kh_worker *w)
{
    free(S(w));
    kh_worker_set_state(w, NULL);
}

/* ---- the shared object -------------------------------------------------- */
typedef void (*entry_fn)(long, long, long, long, long, long, double, double, double, double,
                         double, double, double, double);

typedef struct loaded {
    void *handle;
    entry_fn fn;
} loaded;

/* Write the bytes to a fresh private file, dlopen it, unlink it: every load
 * is a new object (dlopen of a path already open would return the old one),
 * so a reload starts with clean static state. */
static kh_status so_load(const unsigned char *so, size_t len, const char *symbol, loaded *l,
                         kh_err *err)
{
    const char *tmp = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/khlua-host-XXXXXX.so", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemps(path, 3);
    if (fd < 0)
        return kh_err_set(err, KH_EIO, "cannot create a temporary file for the shared object: %s",
                          strerror(errno));
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(fd, so + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = errno;
            close(fd);
            unlink(path);
            return kh_err_set(err, KH_EIO, "cannot write the shared object: %s", strerror(e));
        }
        off += (size_t)n;
    }
    close(fd);
    l->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    unlink(path);
    if (!l->handle)
        return kh_err_set(err, KH_ECOMPILE, "cannot load the shared object: %s", dlerror());
    dlerror();
    void *sym = dlsym(l->handle, symbol);
    if (!sym) {
        dlclose(l->handle);
        l->handle = NULL;
        return kh_err_set(err, KH_ECOMPILE, "entry symbol '%s' not found in the shared object",
                          symbol);
    }
    /* A data pointer to a function pointer: POSIX guarantees dlsym works so. */
    memcpy(&l->fn, &sym, sizeof sym);
    return KH_OK;
}

static void so_unload(loaded *l)
{
    if (l->handle)
        dlclose(l->handle);
    l->handle = NULL;
    l->fn = NULL;
}

/* ---- tensors and buffers -------------------------------------------------- */
enum { T_INPUT, T_OUTPUT, T_WORKSPACE };
enum { G_NONE, G_RANDOM, G_SCALAR, G_BYTES, G_DSA_KCACHE };

typedef struct tspec {
    char name[64];
    int role;
    kh_dtype dtype;
    int ndim;
    int64_t shape[KH_TENSOR_MAX_DIMS];
    uint64_t numel;
    size_t nbytes;
    int gen;
    uint32_t stream;
    double value;
    size_t bytes_off, bytes_len;
    int zero;
} tspec;

typedef struct hbuf {
    unsigned char *map, *data;
    size_t maplen, nbytes;
} hbuf;

/* One complete set of buffers (every tensor), at its own addresses. */
typedef struct bset {
    hbuf b[MAX_TENSORS];
    unsigned char *snap[MAX_TENSORS]; /* inputs as generated (checksums) */
    int values;                        /* which input values it holds (-1: none) */
} bset;

static unsigned char canary(size_t i) { return (unsigned char)(0x5A ^ (i * 0x9Du)); }

/* [no access page][canary page][data ... pad][canary page][no access page]:
 * a write just past the data hits the canary (checked after each call, a
 * clean verdict); one far past it faults on the no-access page (described
 * by the signal handler). */
static kh_status buf_alloc(size_t page, const tspec *t, hbuf *h, kh_err *err)
{
    size_t body = (t->nbytes + page - 1) / page * page;
    h->maplen = body + 4 * page;
    h->nbytes = t->nbytes;
    h->map = mmap(NULL, h->maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (h->map == MAP_FAILED) {
        h->map = NULL;
        return kh_err_set(err, KH_ENOMEM, "cannot map %zu bytes for '%s': %s", h->maplen,
                          t->name, strerror(errno));
    }
    h->data = h->map + 2 * page;
    if (mprotect(h->map, page, PROT_NONE) ||
        mprotect(h->map + h->maplen - page, page, PROT_NONE)) {
        int e = errno;
        munmap(h->map, h->maplen);
        h->map = NULL;
        return kh_err_set(err, KH_EIO, "mprotect: %s", strerror(e));
    }
    const char *role = t->role == T_INPUT ? "input" : t->role == T_OUTPUT ? "output" : "workspace";
    char nm[72];
    snprintf(nm, sizeof nm, "%s %s", role, t->name);
    guard_add(h->map, page, "before", nm);
    guard_add(h->map + h->maplen - page, page, "after", nm);
    for (size_t i = 0; i < page; i++)
        h->map[page + i] = canary(i);
    for (size_t i = 0; h->data + t->nbytes + i < h->map + h->maplen - page; i++)
        h->data[t->nbytes + i] = canary(i);
    return KH_OK;
}

static void buf_free(size_t page, hbuf *h)
{
    if (!h->map)
        return;
    guard_remove(h->map);
    guard_remove(h->map + h->maplen - page);
    munmap(h->map, h->maplen);
    h->map = NULL;
}

/* "" when both canary bands are intact; else which one broke. */
static int buf_guards_ok(size_t page, const hbuf *h, char *why, size_t n)
{
    for (size_t i = 0; i < page; i++)
        if (h->map[page + i] != canary(i)) {
            snprintf(why, n, "the guard band before it was written (%zu bytes before the start)",
                     page - i);
            return 0;
        }
    for (size_t i = 0; h->data + h->nbytes + i < h->map + h->maplen - page; i++)
        if (h->data[h->nbytes + i] != canary(i)) {
            snprintf(why, n, "the guard band after it was written (%zu bytes past the end)", i);
            return 0;
        }
    return 1;
}

/* ---- the request ---------------------------------------------------------- */
enum { A_PTR, A_I32, A_I64, A_U32, A_U64, A_F32, A_F64, A_SCALAR };

typedef struct harg {
    int kind;
    int tensor; /* A_PTR, A_SCALAR */
    int64_t i;
    double f;
} harg;

typedef struct req {
    const unsigned char *payload;
    size_t payload_len;
    const unsigned char *so;
    size_t so_len;
    const char *symbol;
    size_t nt;
    tspec t[MAX_TENSORS];
    size_t na;
    harg a[MAX_ARGS];
    size_t ntrials;
    uint64_t seeds[KH_TASK_MAX_SAMPLING_TRIALS]; /* trials: 64, or a sampling task's calls */
    int poison, inputs_unchanged, guards, deterministic, reload;
    int timing;
    kh_bench_opts bo;
    int rotate;
    double verify_fraction;
    uint64_t sample_seed;
    double deadline_s;
} req;

static int tensor_index(const req *r, const char *name)
{
    for (size_t i = 0; name && i < r->nt; i++)
        if (!strcmp(r->t[i].name, name))
            return (int)i;
    return -1;
}

static kh_status parse_tensor(req *r, const json_t *j, size_t i, kh_err *err)
{
    tspec *t = &r->t[i];
    const char *name = json_string_value(json_object_get(j, "name"));
    const char *role = json_string_value(json_object_get(j, "role"));
    if (!name || strlen(name) >= sizeof t->name)
        return kh_err_set(err, KH_EINVAL, "tensors[%zu].name: expected a string", i);
    snprintf(t->name, sizeof t->name, "%s", name);
    if (role && !strcmp(role, "input"))
        t->role = T_INPUT;
    else if (role && !strcmp(role, "output"))
        t->role = T_OUTPUT;
    else if (role && !strcmp(role, "workspace"))
        t->role = T_WORKSPACE;
    else
        return kh_err_set(err, KH_EINVAL, "tensors[%zu].role: expected input, output or workspace",
                          i);
    if (t->role == T_WORKSPACE) {
        json_t *b = json_object_get(j, "bytes");
        if (!json_is_integer(b) || json_integer_value(b) < 0)
            return kh_err_set(err, KH_EINVAL, "tensors[%zu].bytes: expected a size", i);
        t->nbytes = (size_t)json_integer_value(b);
        t->zero = json_is_true(json_object_get(j, "zero"));
        t->dtype = KH_DTYPE_I8;
        t->numel = t->nbytes;
        return KH_OK;
    }
    kh_status st = kh_dtype_parse(json_string_value(json_object_get(j, "dtype")) ?
                                      json_string_value(json_object_get(j, "dtype")) : "?",
                                  &t->dtype, err);
    if (st)
        return st;
    json_t *shape = json_object_get(j, "shape");
    if (!json_is_array(shape) || json_array_size(shape) > KH_TENSOR_MAX_DIMS)
        return kh_err_set(err, KH_EINVAL, "tensors[%zu].shape: expected an array", i);
    t->ndim = (int)json_array_size(shape);
    for (int d = 0; d < t->ndim; d++)
        t->shape[d] = json_integer_value(json_array_get(shape, (size_t)d));
    if ((st = kh_tensor_shape_check(t->dtype, t->ndim, t->shape, &t->numel, &t->nbytes, err)))
        return st;
    if (t->role == T_OUTPUT)
        return KH_OK;
    json_t *gen = json_object_get(j, "gen");
    const char *kind = json_string_value(json_object_get(gen, "kind"));
    if (!kind)
        return kh_err_set(err, KH_EINVAL, "tensors[%zu].gen.kind: required for an input", i);
    t->stream = (uint32_t)json_integer_value(json_object_get(gen, "stream"));
    if (!strcmp(kind, "random"))
        t->gen = G_RANDOM;
    else if (!strcmp(kind, "dsa_kcache"))
        t->gen = G_DSA_KCACHE;
    else if (!strcmp(kind, "scalar")) {
        t->gen = G_SCALAR;
        t->value = json_number_value(json_object_get(gen, "value"));
        if (t->numel != 1)
            return kh_err_set(err, KH_EINVAL, "tensors[%zu]: a scalar must have one element", i);
    } else if (!strcmp(kind, "bytes")) {
        t->gen = G_BYTES;
        char what[160];
        snprintf(what, sizeof what, "tensors[%zu] '%s'", i, name);
        if ((st = kh_worker_gen_bytes(gen, r->payload_len, t->nbytes, &t->bytes_off,
                                      &t->bytes_len, what, err)))
            return st;
    } else
        return kh_err_set(err, KH_EINVAL, "tensors[%zu].gen.kind: unknown '%s'", i, kind);
    return KH_OK;
}

static kh_status parse_arg(req *r, const json_t *j, size_t i, kh_err *err)
{
    harg *a = &r->a[i];
    static const struct { const char *k; int kind; } vals[] = {
        {"i32", A_I32}, {"i64", A_I64}, {"u32", A_U32}, {"u64", A_U64}, {"f32", A_F32}, {"f64", A_F64}};
    const char *tn = json_string_value(json_object_get(j, "tensor"));
    const char *sn = json_string_value(json_object_get(j, "scalar"));
    if (tn || sn) {
        a->kind = tn ? A_PTR : A_SCALAR;
        a->tensor = tensor_index(r, tn ? tn : sn);
        if (a->tensor < 0)
            return kh_err_set(err, KH_EINVAL, "entry.args[%zu]: no tensor '%s'", i, tn ? tn : sn);
        if (sn) {
            const tspec *t = &r->t[a->tensor];
            if (t->role != T_INPUT || t->numel != 1)
                return kh_err_set(err, KH_EINVAL, "entry.args[%zu]: '%s' is not a scalar input",
                                  i, sn);
            if (t->dtype != KH_DTYPE_F32 && t->dtype != KH_DTYPE_I32 &&
                t->dtype != KH_DTYPE_I64 && t->dtype != KH_DTYPE_BOOL)
                return kh_err_set(err, KH_EUNSUPPORTED,
                                  "entry.args[%zu]: a %s scalar cannot be passed by value to a "
                                  "host function (float32, int32, int64, bool can)",
                                  i, kh_dtype_name(t->dtype));
        }
        return KH_OK;
    }
    for (size_t k = 0; k < KH_ARRAY_LEN(vals); k++) {
        json_t *v = json_object_get(j, vals[k].k);
        if (!v)
            continue;
        a->kind = vals[k].kind;
        if (a->kind == A_F32 || a->kind == A_F64) {
            if (!json_is_number(v))
                return kh_err_set(err, KH_EINVAL, "entry.args[%zu].%s: expected a number", i,
                                  vals[k].k);
            a->f = json_number_value(v);
        } else {
            if (!json_is_integer(v))
                return kh_err_set(err, KH_EINVAL, "entry.args[%zu].%s: expected an integer", i,
                                  vals[k].k);
            a->i = json_integer_value(v);
        }
        return KH_OK;
    }
    return kh_err_set(err, KH_EINVAL, "entry.args[%zu]: expected tensor, scalar, i32, i64, u32, "
                      "u64, f32 or f64", i);
}

static kh_status parse_req(const json_t *p, const unsigned char *payload, size_t n, req *r,
                           kh_err *err)
{
    memset(r, 0, sizeof *r);
    r->payload = payload;
    r->payload_len = n;
    kh_status st;
    if (json_object_get(p, "launches"))
        return kh_err_set(err, KH_EINVAL,
                          "evaluate: 'launches' are for the gpu role; the host role takes 'entry'");
    json_t *art = json_object_get(p, "artifact");
    const char *kind = json_string_value(json_object_get(art, "kind"));
    if (!kind || strcmp(kind, "so"))
        return kh_err_set(err, KH_EINVAL, "evaluate: artifact.kind must be \"so\" on the host role");
    size_t off, len;
    if ((st = kh_worker_slice(json_object_get(art, "payload"), n, &off, &len, "artifact.payload",
                              err)))
        return st;
    r->so = payload + off;
    r->so_len = len;
    json_t *ts = json_object_get(p, "tensors");
    if (!json_is_array(ts) || json_array_size(ts) > MAX_TENSORS)
        return kh_err_set(err, KH_EINVAL, "evaluate: tensors: expected an array of at most %d",
                          MAX_TENSORS);
    r->nt = json_array_size(ts);
    for (size_t i = 0; i < r->nt; i++)
        if ((st = parse_tensor(r, json_array_get(ts, i), i, err)))
            return st;
    json_t *entry = json_object_get(p, "entry");
    r->symbol = json_string_value(json_object_get(entry, "symbol"));
    json_t *args = json_object_get(entry, "args");
    if (!r->symbol || !json_is_array(args) || json_array_size(args) > MAX_ARGS)
        return kh_err_set(err, KH_EINVAL, "evaluate: entry: expected {symbol, args}");
    r->na = json_array_size(args);
    int ni = 0, nf = 0;
    for (size_t i = 0; i < r->na; i++) {
        if ((st = parse_arg(r, json_array_get(args, i), i, err)))
            return st;
        int fp = r->a[i].kind == A_F32 || r->a[i].kind == A_F64 ||
                 (r->a[i].kind == A_SCALAR && r->t[r->a[i].tensor].dtype == KH_DTYPE_F32);
        fp ? nf++ : ni++;
    }
    if (ni > 6 || nf > 8)
        return kh_err_set(err, KH_EUNSUPPORTED,
                          "evaluate: the host entry takes %d integer/pointer and %d floating "
                          "arguments; at most 6 and 8 are supported (the registers of the C "
                          "calling convention)", ni, nf);
    json_t *trials = json_object_get(p, "trials");
    r->ntrials = json_array_size(trials);
    if (r->ntrials < 1 || r->ntrials > KH_ARRAY_LEN(r->seeds))
        return kh_err_set(err, KH_EINVAL, "evaluate: trials: expected 1 to %zu entries",
                          KH_ARRAY_LEN(r->seeds));
    for (size_t i = 0; i < r->ntrials; i++)
        r->seeds[i] = (uint64_t)json_integer_value(json_object_get(json_array_get(trials, i), "seed"));
    json_t *c = json_object_get(p, "checks");
    r->poison = json_is_true(json_object_get(c, "poison"));
    r->inputs_unchanged = json_is_true(json_object_get(c, "inputs_unchanged"));
    r->guards = json_is_true(json_object_get(c, "guards"));
    r->deterministic = json_is_true(json_object_get(c, "deterministic"));
    r->reload = json_is_true(json_object_get(c, "reload_before_timing"));
    r->deadline_s = json_number_value(json_object_get(p, "deadline_s"));
    json_t *tm = json_object_get(p, "timing");
    if (json_is_object(tm)) {
        r->timing = 1;
        kh_protocol proto = KH_PROTO_OFFICIAL;
        const char *ps = json_string_value(json_object_get(tm, "protocol"));
        if (ps && !kh_protocol_parse(ps, &proto))
            return kh_err_set(err, KH_EINVAL, "evaluate: timing.protocol: unknown '%s'", ps);
        kh_bench_defaults(proto, &r->bo);
        json_t *v;
        if ((v = json_object_get(tm, "warmup"))) r->bo.warmup = (int)json_integer_value(v);
        if ((v = json_object_get(tm, "iters"))) r->bo.iters = (int)json_integer_value(v);
        if ((v = json_object_get(tm, "trials"))) r->bo.trials = (int)json_integer_value(v);
        if ((v = json_object_get(tm, "max_iters"))) r->bo.max_iters = (int)json_integer_value(v);
        if ((v = json_object_get(tm, "cold"))) r->bo.cold_l2 = json_is_true(v);
        if ((v = json_object_get(tm, "rel_ci"))) r->bo.rel_ci = json_number_value(v);
        if ((v = json_object_get(tm, "min_time_s"))) r->bo.min_gpu_s = json_number_value(v);
        if ((v = json_object_get(tm, "max_rel_stdev"))) r->bo.max_rel_stdev = json_number_value(v);
        if ((v = json_object_get(tm, "timeout_s"))) r->bo.timeout_s = json_number_value(v);
        r->rotate = (int)json_integer_value(json_object_get(tm, "rotate_inputs"));
        if (r->rotate < 1)
            r->rotate = 1;
        if ((size_t)r->rotate > r->ntrials)
            r->rotate = (int)r->ntrials;
        r->verify_fraction = json_number_value(json_object_get(tm, "verify_timed_fraction"));
        r->sample_seed = (uint64_t)json_integer_value(json_object_get(tm, "sample_seed"));
    } else if (tm && !json_is_null(tm)) {
        return kh_err_set(err, KH_EINVAL, "evaluate: timing: expected an object or null");
    }
    return KH_OK;
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

typedef struct run {
    kh_worker *w;
    host_state *s;
    req *r;
    loaded so;
    bset *sets;   /* ntrials correctness sets, then rotate timing slots */
    size_t nsets;
    outbuf out;
    json_t *failures;
    long calls;   /* timing: calls made, for rotation */
    bset *cur;    /* the set the next call uses */
    json_t *timed_outputs;
    int sampled;  /* the current timed call is verified */
    long timed_i;
    int cur_values;
    int timing_failed;
} run;

static void set_free(run *x, bset *b)
{
    for (size_t i = 0; i < x->r->nt; i++) {
        buf_free(x->s->page, &b->b[i]);
        free(b->snap[i]);
        b->snap[i] = NULL;
    }
}

static kh_status set_alloc(run *x, bset *b, kh_err *err)
{
    memset(b, 0, sizeof *b);
    b->values = -1;
    for (size_t i = 0; i < x->r->nt; i++) {
        kh_status st = buf_alloc(x->s->page, &x->r->t[i], &b->b[i], err);
        if (st)
            return st;
    }
    return KH_OK;
}

/* Fill the inputs of b for seed, and keep a copy of each (the checksum). */
static kh_status set_generate(run *x, bset *b, uint64_t seed, kh_err *err)
{
    kh_engine *e = kh_worker_engine(x->w);
    for (size_t i = 0; i < x->r->nt; i++) {
        const tspec *t = &x->r->t[i];
        if (t->role != T_INPUT)
            continue;
        kh_tensor *tt = NULL;
        kh_status st = kh_tensor_borrow(&tt, t->dtype, t->ndim, t->shape, b->b[i].data,
                                        t->nbytes, err);
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
                memcpy((unsigned char *)b->b[i].data + o, x->r->payload + t->bytes_off,
                       t->bytes_len);
        kh_tensor_free(tt);
        if (st)
            return st;
        free(b->snap[i]);
        b->snap[i] = malloc(t->nbytes ? t->nbytes : 1);
        if (!b->snap[i])
            return kh_err_set(err, KH_ENOMEM, "out of memory for an input checksum copy");
        memcpy(b->snap[i], b->b[i].data, t->nbytes);
    }
    return KH_OK;
}

static void prep_outputs(run *x, bset *b, int pattern)
{
    for (size_t i = 0; i < x->r->nt; i++) {
        const tspec *t = &x->r->t[i];
        if (t->role == T_OUTPUT && pattern >= 0)
            memset(b->b[i].data, pattern, t->nbytes);
        else if (t->role == T_WORKSPACE && t->zero)
            memset(b->b[i].data, 0, t->nbytes);
    }
}

static void call_set(run *x, bset *b)
{
    long iv[6] = {0};
    double fv[8] = {0};
    int ni = 0, nf = 0;
    for (size_t k = 0; k < x->r->na; k++) {
        const harg *a = &x->r->a[k];
        uint64_t bits = 0;
        switch (a->kind) {
        case A_PTR: iv[ni++] = (long)(uintptr_t)b->b[a->tensor].data; break;
        case A_I32: iv[ni++] = (long)(int32_t)a->i; break;
        case A_I64: iv[ni++] = (long)a->i; break;
        case A_U32: iv[ni++] = (long)(uint32_t)a->i; break;
        case A_U64: iv[ni++] = (long)(uint64_t)a->i; break;
        case A_F64: fv[nf++] = a->f; break;
        case A_F32: {
            /* A float travels in the low 32 bits of its vector register (SysV
             * x86-64 and AAPCS64 alike): put its bits there. */
            float f = (float)a->f;
            uint32_t u;
            memcpy(&u, &f, 4);
            bits = u;
            memcpy(&fv[nf++], &bits, 8);
            break;
        }
        case A_SCALAR: {
            const tspec *t = &x->r->t[a->tensor];
            const unsigned char *d = b->b[a->tensor].data;
            if (t->dtype == KH_DTYPE_F32) {
                uint32_t u;
                memcpy(&u, d, 4);
                bits = u;
                memcpy(&fv[nf++], &bits, 8);
            } else if (t->dtype == KH_DTYPE_I32) {
                int32_t v;
                memcpy(&v, d, 4);
                iv[ni++] = v;
            } else if (t->dtype == KH_DTYPE_I64) {
                int64_t v;
                memcpy(&v, d, 8);
                iv[ni++] = (long)v;
            } else {
                iv[ni++] = d[0] != 0;
            }
            break;
        }
        }
    }
    x->so.fn(iv[0], iv[1], iv[2], iv[3], iv[4], iv[5], fv[0], fv[1], fv[2], fv[3], fv[4], fv[5],
             fv[6], fv[7]);
}

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

/* Inputs unchanged against snapshot snap_of (the values b should hold). */
static int check_inputs(run *x, bset *b, bset *snap_of, const char *when, long trial)
{
    int ok = 1;
    for (size_t i = 0; i < x->r->nt; i++) {
        const tspec *t = &x->r->t[i];
        if (t->role != T_INPUT || !memcmp(b->b[i].data, snap_of->snap[i], t->nbytes))
            continue;
        size_t es = kh_dtype_bits(t->dtype) >= 8 ? (size_t)kh_dtype_bits(t->dtype) / 8 : 1;
        uint64_t changed = 0, first = UINT64_MAX;
        for (size_t e = 0; e < t->nbytes / es; e++)
            if (memcmp(b->b[i].data + e * es, snap_of->snap[i] + e * es, es)) {
                if (first == UINT64_MAX)
                    first = e;
                changed++;
            }
        add_failure(x, "inputs_unchanged", trial, "input '%s' changed %s (%llu of %llu elements; "
                    "first at %llu)", t->name, when, (unsigned long long)changed,
                    (unsigned long long)(t->nbytes / es), (unsigned long long)first);
        ok = 0;
    }
    return ok;
}

static int check_guards(run *x, bset *b, const char *when, long trial)
{
    int ok = 1;
    for (size_t i = 0; i < x->r->nt; i++) {
        char why[200];
        if (!buf_guards_ok(x->s->page, &b->b[i], why, sizeof why)) {
            add_failure(x, "guards", trial, "%s '%s': %s %s",
                        x->r->t[i].role == T_INPUT ? "input" :
                        x->r->t[i].role == T_OUTPUT ? "output" : "workspace",
                        x->r->t[i].name, why, when);
            ok = 0;
        }
    }
    return ok;
}

static kh_status capture_outputs(run *x, bset *b, json_t **obj, kh_err *err)
{
    *obj = json_object();
    for (size_t i = 0; i < x->r->nt; i++) {
        if (x->r->t[i].role != T_OUTPUT)
            continue;
        size_t off = 0;
        kh_status st = out_add(&x->out, b->b[i].data, x->r->t[i].nbytes, &off, err);
        if (st)
            return st;
        json_object_set_new(*obj, x->r->t[i].name,
                            json_pack("[I, I]", (json_int_t)off, (json_int_t)x->r->t[i].nbytes));
    }
    return KH_OK;
}

static void set_cpu_limit(double deadline_s)
{
    struct rusage ru;
    struct rlimit rl;
    if (deadline_s <= 0 || getrusage(RUSAGE_SELF, &ru) || getrlimit(RLIMIT_CPU, &rl))
        return;
    double used = (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec + 1;
    /* twice the wall deadline: the supervisor's deadline fires first (a
     * TIMEOUT); this catches a worker whose coordinator is gone */
    rlim_t soft = (rlim_t)(used + 2 * deadline_s + 1);
    if (rl.rlim_max != RLIM_INFINITY && soft > rl.rlim_max)
        soft = rl.rlim_max;
    rl.rlim_cur = soft;
    setrlimit(RLIMIT_CPU, &rl);
}

/* -- timing callbacks -- */
static kh_status t_call(void *ctx, kh_err *err)
{
    (void)err;
    run *x = ctx;
    call_set(x, x->cur);
    return KH_OK;
}

static int sampled(const req *r, long i)
{
    if (r->verify_fraction <= 0)
        return 0;
    if (r->verify_fraction >= 1)
        return 1;
    /* One call at a random position in every block of floor(1/f) calls:
     * exactly the fraction asked for, never fewer. */
    long block = (long)floor(1.0 / r->verify_fraction);
    if (block < 1)
        block = 1;
    uint64_t h = kh_rng_derive_seed(r->sample_seed, (uint64_t)(i / block), 0x5a11);
    return (uint64_t)(i % block) == h % (uint64_t)block;
}

static kh_status t_pre(void *ctx, long ti, kh_err *err)
{
    (void)err;
    run *x = ctx;
    int R = x->r->rotate;
    long i = x->calls;
    /* Slot (address) i % R gets value set (i + i / R) % R: the pairing of
     * values and addresses shifts every round, so a result cached by address
     * is wrong on the next visit. */
    bset *slot = &x->sets[x->r->ntrials + (size_t)(i % R)];
    int v = (int)((i + i / R) % R);
    if (slot->values != v) {
        for (size_t k = 0; k < x->r->nt; k++)
            if (x->r->t[k].role == T_INPUT)
                memcpy(slot->b[k].data, x->sets[v].snap[k], x->r->t[k].nbytes);
        slot->values = v;
    }
    x->cur = slot;
    x->cur_values = v;
    x->timed_i = ti;
    x->sampled = ti >= 0 && sampled(x->r, ti);
    /* Every call's outputs are poisoned (outside the window, before the
     * flush), not only the verified ones: a candidate cannot tell which
     * calls are checked, nor skip work because the output already holds a
     * result. */
    prep_outputs(x, slot, x->r->poison ? POISON_A : -1);
    return KH_OK;
}

static kh_status t_post(void *ctx, long ti, kh_err *err)
{
    run *x = ctx;
    x->calls++;
    char when[64];
    snprintf(when, sizeof when, "during timing (call %ld)", x->calls - 1);
    if (x->r->inputs_unchanged && !check_inputs(x, x->cur, &x->sets[x->cur_values], when, -1)) {
        /* restore, so later calls see the right values */
        x->cur->values = -1;
        x->timing_failed = 1;
    }
    if (x->r->guards && !check_guards(x, x->cur, when, -1))
        x->timing_failed = 1;
    if (x->sampled) {
        json_t *o;
        kh_status st = capture_outputs(x, x->cur, &o, err);
        if (st) {
            json_decref(o);
            return st;
        }
        json_array_append_new(x->timed_outputs,
                              json_pack("{s:i, s:I, s:I, s:o}", "set", x->cur_values, "seed",
                                        (json_int_t)x->r->seeds[x->cur_values], "call",
                                        (json_int_t)ti, "outputs", o));
    }
    return KH_OK;
}

static json_t *timing_json(const kh_bench_result *r, const kh_bench_opts *o, double bw)
{
    json_t *samples = json_array(), *tm = json_array();
    for (size_t i = 0; i < r->n; i++)
        json_array_append_new(samples, json_real(r->samples_ns[i]));
    for (int i = 0; i < r->trials && i < 16; i++)
        json_array_append_new(tm, json_real(r->trial_median_ns[i]));
    return json_pack("{s:s, s:s, s:s, s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:i, s:I, "
                     "s:o, s:o, s:f, s:I, s:b}",
                     "status", r->status, "why", r->why, "timer", r->timer, "protocol",
                     kh_protocol_name(o->protocol), "latency_ns", r->latency_ns,
                     "window_latency_ns", r->window_latency_ns, "median_ns", r->median_ns,
                     "mean_ns", r->mean_ns, "stdev_ns", r->stdev_ns, "min_ns", r->min_ns,
                     "max_ns", r->max_ns, "rel_ci", isfinite(r->rel_ci) ? r->rel_ci : -1.0,
                     "trials", r->trials, "n", (json_int_t)r->n, "samples_ns", samples,
                     "trial_median_ns", tm, "copy_bandwidth_Bps", bw, "llc_bytes",
                     (json_int_t)kh_hostbench_llc_bytes(), "cold", o->cold_l2);
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
    run x;
    memset(&x, 0, sizeof x);
    if (!r)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    kh_status st = parse_req(params, payload, n, r, err);
    if (st) {
        free(r);
        return st;
    }
    x.w = w;
    x.s = S(w);
    x.r = r;
    x.failures = json_array();
    x.timed_outputs = json_array();
    json_t *trials = json_array(), *timing = json_null();
    set_cpu_limit(r->deadline_s);
    x.nsets = r->ntrials + (r->timing ? (size_t)r->rotate : 0);
    x.sets = calloc(x.nsets, sizeof *x.sets);
    if (!x.sets) {
        st = kh_err_set(err, KH_ENOMEM, "out of memory");
        goto out;
    }
    if ((st = so_load(r->so, r->so_len, r->symbol, &x.so, err)))
        goto out;

    /* Correctness: every trial on its own buffers (fresh addresses and
     * values), kept to the end so no two trials share an address. */
    for (size_t tr = 0; tr < r->ntrials; tr++) {
        bset *b = &x.sets[tr];
        if ((st = set_alloc(&x, b, err)) || (st = set_generate(&x, b, r->seeds[tr], err)))
            goto out;
        b->values = (int)tr;
        json_t *trial = json_pack("{s:I}", "seed", (json_int_t)r->seeds[tr]);
        json_t *checks = json_object();
        json_array_append_new(trials, trial);
        int npass = r->poison ? 2 : 1, in_ok = 1, g_ok = 1;
        size_t first_out = x.out.len;
        for (int pass = 0; pass < npass; pass++) {
            prep_outputs(&x, b, r->poison ? (pass ? POISON_B : POISON_A) : -1);
            call_set(&x, b);
            json_t *o;
            if ((st = capture_outputs(&x, b, &o, err))) {
                json_decref(o);
                json_decref(checks);
                goto out;
            }
            json_object_set_new(trial, pass ? "outputs_b" : "outputs", o);
            const char *when = pass ? "by the second call" : "by the first call";
            if (r->inputs_unchanged && in_ok && !check_inputs(&x, b, b, when, (long)tr)) {
                in_ok = 0;
                for (size_t k = 0; k < r->nt; k++)
                    if (r->t[k].role == T_INPUT)
                        memcpy(b->b[k].data, b->snap[k], r->t[k].nbytes);
            }
            if (r->guards && g_ok && !check_guards(&x, b, when, (long)tr))
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
            size_t half = (x.out.len - first_out) / 2;
            same = !half || !memcmp(x.out.p + first_out, x.out.p + first_out + half, half);
            if (same) {
                x.out.len = first_out + half;
                json_object_set_new(trial, "outputs_b",
                                    json_deep_copy(json_object_get(trial, "outputs")));
                json_object_set_new(trial, "outputs_b_same", json_true());
            }
        }
        if (r->deterministic && npass == 2) {
            json_object_set_new(checks, "deterministic", json_string(same ? "ok" : "failed"));
            if (!same)
                add_failure(&x, "deterministic", (long)tr,
                            "the two calls of trial %zu gave different bits", tr);
        }
        json_object_set_new(trial, "checks", checks);
    }

    if (r->timing) {
        if (r->reload) {
            so_unload(&x.so);
            if ((st = so_load(r->so, r->so_len, r->symbol, &x.so, err)))
                goto out;
        }
        for (int k = 0; k < r->rotate; k++)
            if ((st = set_alloc(&x, &x.sets[r->ntrials + (size_t)k], err)))
                goto out;
        if (!x.s->copy_bw)
            x.s->copy_bw = host_bandwidth();
        kh_hostbench_target t = {.call = t_call, .pre = t_pre, .post = t_post, .ctx = &x};
        kh_bench_result br;
        st = kh_hostbench_run(kh_worker_engine(w), &t, &r->bo, &br, err);
        if (!st) {
            json_decref(timing);
            timing = timing_json(&br, &r->bo, x.s->copy_bw);
        }
        kh_bench_result_free(&br);
        if (st)
            goto out;
    }

    *result = json_pack("{s:o, s:o, s:o, s:o, s:{s:s, s:s, s:b}}", "trials", trials,
                        "timed_outputs", x.timed_outputs, "timing", timing, "failures",
                        x.failures, "worker", "network", x.s->network, "memory", x.s->memory,
                        "guard_pages", 1);
    trials = timing = x.timed_outputs = x.failures = NULL;
    *out_p = x.out.p;
    *out_n = x.out.len;
    x.out.p = NULL;
out:
    json_decref(trials);
    json_decref(timing);
    json_decref(x.timed_outputs);
    json_decref(x.failures);
    free(x.out.p);
    for (size_t i = 0; x.sets && i < x.nsets; i++)
        set_free(&x, &x.sets[i]);
    free(x.sets);
    so_unload(&x.so);
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
    *result = json_pack("{s:s, s:s, s:f, s:I, s:I}", "network", s->network, "memory", s->memory,
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
