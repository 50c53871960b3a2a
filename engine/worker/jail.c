/* jail.c: the confined child of the host worker (see jail.h).  Owns both
 * sides of the handshake, the jail's process set-up (file descriptors,
 * limits, fault descriptions) and its seccomp-bpf filter; what it may read
 * of the file system and its capabilities are jail_fs.c's. */
#include "worker/jail.h"
#include "worker/jail_int.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/futex.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define KH_JAIL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KH_JAIL_ASAN 1
#endif
#endif

#define FD_ARENA 3
#define FD_SO 4

static void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void futex_wait(_Atomic uint32_t *p, uint32_t v, long ns)
{
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    syscall(SYS_futex, (uint32_t *)p, FUTEX_WAIT, v, &ts, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *p) { syscall(SYS_futex, (uint32_t *)p, FUTEX_WAKE, 64, NULL, NULL, 0); }

/* Store v into *p and wake a sleeper. */
static void post(_Atomic uint32_t *p, _Atomic uint32_t *sleeping, uint32_t v)
{
    atomic_store(p, v);
    if (atomic_load(sleeping))
        futex_wake(p);
}

/* ---- the warden's side --------------------------------------------------- */

/* The jail died: die the same way (its fault description is on stderr). */
static _Noreturn void die_like(int status)
{
    fflush(stderr);
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_DFL;
        sigaction(sig, &sa, NULL);
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, sig);
        sigprocmask(SIG_UNBLOCK, &s, NULL);
        kill(getpid(), sig);
        /* a signal whose default is to go on (SIGCHLD, SIGURG...) */
        fprintf(stderr, "khlua-fault: kind=crash signal=%d (the candidate's process)\n", sig);
        _exit(128 + sig);
    }
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}

/* Wait until *p == want: spin for spin_s, then sleep on the futex; a jail
 * that dies meanwhile takes the warden with it. */
static int wait_for(kh_jail *j, _Atomic uint32_t *p, _Atomic uint32_t *sleeping, uint32_t want,
                    double spin_s, int *status)
{
    double t0 = 0;
    for (unsigned long n = 0;; n++) {
        if (atomic_load_explicit(p, memory_order_acquire) == want)
            return 0;
        relax();
        if ((n & 4095) == 4095) {
            double t = now_s();
            if (!t0)
                t0 = t;
            else if (t - t0 > spin_s)
                break;
        }
    }
    for (;;) {
        atomic_store(sleeping, 1);
        uint32_t v = atomic_load(p);
        if (v != want)
            futex_wait(p, v, 2000000);
        atomic_store(sleeping, 0);
        if (atomic_load(p) == want)
            return 0;
        int stat;
        pid_t r = waitpid(j->pid, &stat, WNOHANG);
        if (r == j->pid) {
            j->pid = -1;
            if (!status)
                die_like(stat);
            *status = stat;
            return -1;
        }
    }
}

kh_status kh_jail_warden_init(kh_jail *j, kh_err *err)
{
    memset(j, 0, sizeof *j);
    j->arena_fd = -1;
    j->pid = -1;
    ssize_t n = readlink("/proc/self/exe", j->exe, sizeof j->exe - 1);
    if (n <= 0)
        return kh_err_set(err, KH_EIO, "cannot find the khlua executable (/proc/self/exe): %s",
                          strerror(errno));
    j->exe[n] = '\0';
    /* undumpable: /proc/<warden>/mem, environ, maps are closed to the jail */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    return KH_OK;
}

kh_status kh_jail_arena(kh_jail *j, size_t data_bytes, kh_err *err)
{
    if (j->arena) {
        munmap(j->arena, j->arena_len);
        close(j->arena_fd);
        j->arena = NULL;
        j->arena_fd = -1;
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    j->ctl_len = (sizeof(kh_jail_ctl) + page - 1) / page * page;
    j->arena_len = j->ctl_len + data_bytes;
    int fd = (int)syscall(SYS_memfd_create, "khlua-arena", 0u);
    if (fd < 0)
        return kh_err_set(err, KH_EIO, "memfd_create: %s", strerror(errno));
    if (ftruncate(fd, (off_t)j->arena_len)) {
        int e = errno;
        close(fd);
        return kh_err_set(err, KH_ENOMEM, "cannot size the arena to %zu bytes: %s",
                          j->arena_len, strerror(e));
    }
    void *m = mmap(NULL, j->arena_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        int e = errno;
        close(fd);
        return kh_err_set(err, KH_ENOMEM, "cannot map the %zu-byte arena: %s", j->arena_len,
                          strerror(e));
    }
    j->arena_fd = fd;
    j->arena = m;
    j->ctl = m;
    return KH_OK;
}

kh_status kh_jail_start(kh_jail *j, const unsigned char *so, size_t n, kh_err *err)
{
    kh_jail_stop(j);
    kh_jail_ctl *c = j->ctl;
    atomic_store(&c->state, 0);
    atomic_store(&c->arm, 0);
    atomic_store(&c->go, 0);
    atomic_store(&c->armed, 0);
    atomic_store(&c->done, 0);
    c->msg[0] = '\0';
    j->seq = 0;
    int sofd = (int)syscall(SYS_memfd_create, "khlua-candidate.so", 0u);
    if (sofd < 0)
        return kh_err_set(err, KH_EIO, "memfd_create: %s", strerror(errno));
    for (size_t off = 0; off < n;) {
        ssize_t w = write(sofd, so + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = errno;
            close(sofd);
            return kh_err_set(err, KH_EIO, "cannot write the shared object: %s", strerror(e));
        }
        off += (size_t)w;
    }
    /* prepared before the fork: the child only calls async-signal-safe
     * functions */
    char *argv[] = {"khlua", "__host-jail", NULL};
    char *envp[4] = {NULL};
    static char ldpath[4096];
    const char *lp = getenv("LD_LIBRARY_PATH");
    int ne = 0;
    if (lp && strlen(lp) < sizeof ldpath - 20) {
        snprintf(ldpath, sizeof ldpath, "LD_LIBRARY_PATH=%s", lp);
        envp[ne++] = ldpath;
    }
#ifdef KH_JAIL_ASAN
    /* the worker's options (its memory limit: hard_rss_limit_mb), without
     * the leak checker, which stops the world with a ptrace'ing process */
    static char asan[4096];
    const char *ao = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof asan, "ASAN_OPTIONS=%s%sdetect_leaks=0",
             ao && strlen(ao) < sizeof asan - 64 ? ao : "", ao && *ao ? ":" : "");
    envp[ne++] = asan;
    envp[ne++] = "UBSAN_OPTIONS=print_stacktrace=0:halt_on_error=1";
#endif
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull < 0) {
        close(sofd);
        return kh_err_set(err, KH_EIO, "/dev/null: %s", strerror(errno));
    }
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(sofd);
        close(devnull);
        return kh_err_set(err, KH_EIO, "fork: %s", strerror(e));
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        if (getppid() != parent)
            _exit(1);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        /* 0, 1: /dev/null; 2: the worker's stderr; 3: the arena; 4: the
         * object; nothing else */
        int a = fcntl(j->arena_fd, F_DUPFD, 100), s = fcntl(sofd, F_DUPFD, 100);
        if (a < 0 || s < 0 || dup2(devnull, 0) < 0 || dup2(devnull, 1) < 0 ||
            dup2(a, FD_ARENA) < 0 || dup2(s, FD_SO) < 0)
            _exit(126);
        if (syscall(SYS_close_range, FD_SO + 1, ~0u, 0) != 0)
            for (int fd = FD_SO + 1; fd < 65536; fd++)
                close(fd);
        execve(j->exe, argv, envp);
        _exit(127);
    }
    close(sofd);
    close(devnull);
    j->pid = pid;
    /* ready (1), or could not load the object (2: it says why, and exits);
     * a constructor that crashes or calls a forbidden function takes the
     * warden with it, like a crashing call */
    int status;
    if (wait_for(j, &c->state, &c->state_sleeping, 1, 0.001, &status) == 0)
        return KH_OK;
    if (atomic_load(&c->state) == 2) {
        char m[sizeof c->msg];
        memcpy(m, c->msg, sizeof m);
        m[sizeof m - 1] = '\0';
        return kh_err_set(err, KH_ECOMPILE, "%s", m);
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) >= 125)
        return kh_err_set(err, KH_EIO, "the candidate's jail could not start (%s: exit %d)",
                          j->exe, WEXITSTATUS(status));
    die_like(status);
}

void kh_jail_arm(kh_jail *j, uint32_t slot)
{
    kh_jail_ctl *c = j->ctl;
    c->op = 1;
    c->slot = slot;
    uint32_t s = ++j->seq;
    atomic_store(&c->arm, s);
    futex_wake(&c->arm);
    wait_for(j, &c->armed, &c->armed_sleeping, s, 0.05, NULL);
}

void kh_jail_go(kh_jail *j)
{
    kh_jail_ctl *c = j->ctl;
    atomic_store_explicit(&c->go, j->seq, memory_order_release);
    if (atomic_load(&c->go_sleeping))
        futex_wake(&c->go);
    wait_for(j, &c->done, &c->done_sleeping, j->seq, 0.02, NULL);
}

void kh_jail_stop(kh_jail *j)
{
    if (j->pid <= 0)
        return;
    kh_jail_ctl *c = j->ctl;
    c->op = 2;
    atomic_store(&c->arm, ++j->seq);
    futex_wake(&c->arm);
    int status;
    pid_t r = 0;
    for (int i = 0; i < 200 && (r = waitpid(j->pid, &status, WNOHANG)) == 0; i++)
        usleep(5000);
    if (r == 0) {
        kill(j->pid, SIGKILL);
        while (waitpid(j->pid, &status, 0) < 0 && errno == EINTR) {
        }
    }
    j->pid = -1;
}

void kh_jail_free(kh_jail *j)
{
    kh_jail_stop(j);
    if (j->arena)
        munmap(j->arena, j->arena_len);
    if (j->arena_fd >= 0)
        close(j->arena_fd);
    j->arena = NULL;
    j->ctl = NULL;
    j->arena_fd = -1;
}

/* ---- the jail's side: fault descriptions (async-signal-safe) ------------- */
typedef struct guard_range {
    uintptr_t lo, hi;
    const char *what;
} guard_range;

static guard_range g_guards[KH_JAIL_MAX_GUARDS];
static size_t g_nguards;
static uintptr_t g_stack_hi, g_stack_lo;
static rlim_t g_as_limit;
static int g_statm = -1;

static void put(const char *s) { (void)!write(2, s, strlen(s)); }

static void put_hex(uintptr_t v)
{
    char b[19] = "0x";
    for (int i = 0; i < 16; i++)
        b[2 + i] = "0123456789abcdef"[(v >> (60 - 4 * i)) & 15];
    b[18] = 0;
    put(b);
}

static void put_dec(long v)
{
    char b[24];
    int i = 23;
    b[i] = 0;
    int neg = v < 0;
    unsigned long u = neg ? (unsigned long)-v : (unsigned long)v;
    do {
        b[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u && i > 1);
    if (neg)
        b[--i] = '-';
    put(b + i);
}

static int near_as_limit(void)
{
    if (!g_as_limit || g_as_limit == RLIM_INFINITY || g_statm < 0)
        return 0;
    char b[64];
    ssize_t n = pread(g_statm, b, sizeof b - 1, 0);
    if (n <= 0)
        return 0;
    unsigned long pages = 0;
    for (ssize_t i = 0; i < n && b[i] >= '0' && b[i] <= '9'; i++)
        pages = pages * 10 + (unsigned long)(b[i] - '0');
    return (double)pages * 4096.0 > 0.9 * (double)g_as_limit;
}

/* The names of the calls the filter traps (the others fail quietly). */
static const struct { long nr; const char *name; } g_trapped[] = {
#define T(n) {__NR_##n, #n},
    T(execve) T(execveat) T(clone) T(socket) T(socketpair) T(connect) T(bind) T(listen)
    T(accept4) T(sendto) T(sendmsg) T(ptrace) T(process_vm_readv) T(process_vm_writev)
    T(kill) T(tgkill) T(tkill) T(openat) T(unlinkat) T(renameat) T(renameat2) T(mkdirat)
    T(linkat) T(symlinkat) T(fchmod) T(fchmodat) T(fchownat) T(fchown) T(truncate) T(mount)
    T(umount2) T(unshare) T(setns) T(pivot_root) T(chroot) T(bpf) T(perf_event_open)
    T(io_uring_setup) T(keyctl) T(add_key) T(request_key) T(pidfd_open) T(pidfd_getfd)
    T(pidfd_send_signal) T(userfaultfd) T(init_module) T(finit_module) T(delete_module)
    T(kexec_load) T(reboot) T(mknodat) T(process_madvise) T(kcmp) T(open_by_handle_at)
    T(name_to_handle_at) T(fanotify_init) T(acct) T(swapon) T(swapoff) T(settimeofday)
    T(clock_settime) T(personality) T(setuid) T(setgid) T(setreuid) T(setregid)
    T(setresuid) T(setresgid) T(setgroups) T(quotactl)
#ifdef __NR_accept
    T(accept)
#endif
#ifdef __NR_fork
    T(fork)
#endif
#ifdef __NR_vfork
    T(vfork)
#endif
#ifdef __NR_open
    T(open)
#endif
#ifdef __NR_creat
    T(creat)
#endif
#ifdef __NR_unlink
    T(unlink)
#endif
#ifdef __NR_rename
    T(rename)
#endif
#ifdef __NR_mkdir
    T(mkdir)
#endif
#ifdef __NR_rmdir
    T(rmdir)
#endif
#ifdef __NR_link
    T(link)
#endif
#ifdef __NR_symlink
    T(symlink)
#endif
#ifdef __NR_chmod
    T(chmod)
#endif
#ifdef __NR_chown
    T(chown)
#endif
#ifdef __NR_lchown
    T(lchown)
#endif
#ifdef __NR_mknod
    T(mknod)
#endif
#ifdef __NR_kexec_file_load
    T(kexec_file_load)
#endif
#undef T
};

static void on_fatal(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    uintptr_t a = (uintptr_t)si->si_addr;
    const char *kind = "crash", *signame = "SIG?", *what = NULL, *sys = NULL;
    switch (sig) {
    case SIGSEGV: signame = "SIGSEGV"; kind = "segfault"; break;
    case SIGBUS: signame = "SIGBUS"; kind = si->si_code == BUS_ADRALN ? "misaligned" : "bus_error"; break;
    case SIGFPE: signame = "SIGFPE"; kind = "arithmetic"; break;
    case SIGILL: signame = "SIGILL"; kind = "illegal_instruction"; break;
    case SIGABRT: signame = "SIGABRT"; kind = "abort"; break;
    case SIGXCPU: signame = "SIGXCPU"; kind = "cpu_limit"; break;
    case SIGSYS: signame = "SIGSYS"; kind = "forbidden_syscall"; break;
    }
    if (sig == SIGSYS) {
        sys = "unknown";
        for (size_t i = 0; i < sizeof g_trapped / sizeof g_trapped[0]; i++)
            if (g_trapped[i].nr == si->si_syscall)
                sys = g_trapped[i].name;
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
    if (sys) {
        put(" syscall=");
        put(sys);
        put(" nr=");
        put_dec(si->si_syscall);
    }
    if (sig == SIGSEGV || sig == SIGBUS) {
        put(" addr=");
        put_hex(a);
    }
    if (what) {
        put(" guard=");
        put(what);
    }
    put("\n");
    /* Die by the same signal, so the warden (and the supervisor) sees it. */
    signal(sig, SIG_DFL);
    if (sig == SIGABRT || sig == SIGXCPU || sig == SIGSYS)
        raise(sig);
}

/* ---- the jail's side: the seccomp filter ---------------------------------- */
#if defined(__x86_64__)
#define JAIL_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define JAIL_ARCH AUDIT_ARCH_AARCH64
#endif

typedef struct bpf_prog {
    struct sock_filter f[1024];
    unsigned short n;
} bpf_prog;

static void emit(bpf_prog *p, struct sock_filter s)
{
    if (p->n < 1024)
        p->f[p->n++] = s;
}

#define NR_OFF offsetof(struct seccomp_data, nr)
#define ARG_LO(i) offsetof(struct seccomp_data, args[i]) /* little endian: the low half */
#define RET(a) BPF_STMT(BPF_RET | BPF_K, (a))
#define ERRNO(e) (SECCOMP_RET_ERRNO | ((e) & SECCOMP_RET_DATA))

/* nr -> action */
static void rule(bpf_prog *p, long nr, uint32_t action)
{
    emit(p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, 1));
    emit(p, (struct sock_filter)RET(action));
}

/* nr: if (arg & mask) then if_set else if_clear */
static void rule_mask(bpf_prog *p, long nr, int arg, uint32_t mask, uint32_t if_set,
                      uint32_t if_clear)
{
    emit(p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, 4));
    emit(p, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(arg)));
    emit(p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, mask, 0, 1));
    emit(p, (struct sock_filter)RET(if_set));
    emit(p, (struct sock_filter)RET(if_clear));
}

/* nr: if (arg == v) then if_eq else if_ne */
static void rule_eq(bpf_prog *p, long nr, int arg, uint32_t v, uint32_t if_eq, uint32_t if_ne)
{
    emit(p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, 4));
    emit(p, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(arg)));
    emit(p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, v, 0, 1));
    emit(p, (struct sock_filter)RET(if_eq));
    emit(p, (struct sock_filter)RET(if_ne));
}

/* Stage A (while the object loads and its constructors run) allows read-only
 * opens; stage B (everything after) none.  Seccomp filters stack: stage B
 * is a second filter over the first, and the stricter answer wins. */
static int install_filter(int stage)
{
#ifndef JAIL_ARCH
    (void)stage;
    errno = ENOSYS;
    return -1;
#else
    bpf_prog p = {.n = 0};
    const uint32_t A = SECCOMP_RET_ALLOW, TRAP = SECCOMP_RET_TRAP;
    const uint32_t WRITE_FLAGS = O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND;
    uint32_t me = (uint32_t)getpid();
    emit(&p, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                          offsetof(struct seccomp_data, arch)));
    emit(&p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, JAIL_ARCH, 1, 0));
    emit(&p, (struct sock_filter)RET(SECCOMP_RET_KILL_PROCESS));
    emit(&p, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, NR_OFF));
#if defined(__x86_64__)
    /* the x32 ABI's numbers: a way around every rule below */
    emit(&p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1));
    emit(&p, (struct sock_filter)RET(SECCOMP_RET_KILL_PROCESS));
#endif
    if (stage == 1) {
        /* stage B: only what differs; everything else falls to stage A */
        rule_mask(&p, __NR_openat, 2, WRITE_FLAGS, TRAP, ERRNO(EACCES));
#ifdef __NR_open
        rule_mask(&p, __NR_open, 1, WRITE_FLAGS, TRAP, ERRNO(EACCES));
#endif
        emit(&p, (struct sock_filter)RET(A));
    } else {
        static const long allow[] = {
            __NR_read, __NR_write, __NR_readv, __NR_writev, __NR_pread64, __NR_pwrite64,
            __NR_close, __NR_fstat, __NR_newfstatat, __NR_statx, __NR_lseek, __NR_mmap,
            __NR_mprotect, __NR_munmap, __NR_mremap, __NR_madvise, __NR_brk, __NR_msync,
            __NR_mincore, __NR_mlock, __NR_munlock, __NR_rt_sigprocmask, __NR_rt_sigreturn,
            __NR_sigaltstack, __NR_rt_sigpending, __NR_rt_sigtimedwait, __NR_rt_sigsuspend,
            __NR_futex, __NR_set_robust_list, __NR_get_robust_list, __NR_set_tid_address,
            __NR_exit, __NR_exit_group, __NR_getpid, __NR_gettid, __NR_getppid, __NR_getuid,
            __NR_geteuid, __NR_getgid, __NR_getegid, __NR_sched_yield, __NR_sched_getaffinity,
            __NR_sched_setaffinity, __NR_sched_getparam, __NR_sched_getscheduler,
            __NR_sched_get_priority_max, __NR_sched_get_priority_min, __NR_getcpu,
            __NR_getrandom, __NR_clock_gettime, __NR_clock_getres, __NR_clock_nanosleep,
            __NR_nanosleep, __NR_gettimeofday, __NR_getrusage, __NR_getrlimit, __NR_uname,
            __NR_sysinfo, __NR_faccessat, __NR_readlinkat, __NR_getcwd, __NR_fcntl, __NR_dup,
            __NR_dup3, __NR_membarrier, __NR_getdents64, __NR_ppoll, __NR_pselect6,
            __NR_setitimer, __NR_getitimer, __NR_timer_create, __NR_timer_settime,
            __NR_timer_gettime, __NR_timer_delete, __NR_times, __NR_close_range, __NR_seccomp,
#ifdef __NR_rseq
            __NR_rseq,
#endif
#ifdef __NR_faccessat2
            __NR_faccessat2,
#endif
#ifdef __NR_futex_waitv
            __NR_futex_waitv,
#endif
#ifdef __NR_arch_prctl
            __NR_arch_prctl,
#endif
#ifdef __NR_access
            __NR_access,
#endif
#ifdef __NR_readlink
            __NR_readlink,
#endif
#ifdef __NR_poll
            __NR_poll,
#endif
#ifdef __NR_dup2
            __NR_dup2,
#endif
#ifdef __NR_alarm
            __NR_alarm,
#endif
#ifdef __NR_time
            __NR_time,
#endif
#ifdef __NR_stat
            __NR_stat, __NR_lstat,
#endif
#ifdef __NR_pause
            __NR_pause,
#endif
        };
        for (size_t i = 0; i < sizeof allow / sizeof allow[0]; i++)
            rule(&p, allow[i], A);
        /* threads, not processes */
        rule_mask(&p, __NR_clone, 0, CLONE_THREAD, A, TRAP);
        rule(&p, __NR_clone3, ERRNO(ENOSYS)); /* glibc falls back to clone */
        /* signals to itself only */
        rule_eq(&p, __NR_kill, 0, me, A, TRAP);
        rule_eq(&p, __NR_tgkill, 0, me, A, TRAP);
        /* its own fault handlers stay */
        rule_eq(&p, __NR_rt_sigaction, 0, SIGSYS, ERRNO(EPERM), A);
        rule_eq(&p, __NR_prlimit64, 0, 0, A, ERRNO(EPERM));
        rule_mask(&p, __NR_openat, 2, WRITE_FLAGS, TRAP, A);
#ifdef __NR_open
        rule_mask(&p, __NR_open, 1, WRITE_FLAGS, TRAP, A);
#endif
        rule(&p, __NR_openat2, ERRNO(ENOSYS));
        rule(&p, __NR_ioctl, ERRNO(ENOTTY));
        rule(&p, __NR_prctl, ERRNO(EPERM));
        for (size_t i = 0; i < sizeof g_trapped / sizeof g_trapped[0]; i++)
            rule(&p, g_trapped[i].nr, TRAP);
        emit(&p, (struct sock_filter)RET(ERRNO(EPERM)));
    }
    if (p.n >= 1024) {
        errno = E2BIG;
        return -1;
    }
    struct sock_fprog prog = {.len = p.n, .filter = p.f};
    /* set before stage A (and inherited from the warden); stage A makes
     * prctl fail, and allows seccomp, which can only add restrictions */
    (void)prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
#endif
}

/* ---- the jail's side: the process ----------------------------------------- */
typedef void (*entry_fn)(long, long, long, long, long, long, double, double, double, double,
                         double, double, double, double);

static _Noreturn void load_failed(kh_jail_ctl *c, const char *what, const char *why)
{
    snprintf(c->msg, sizeof c->msg, "%s%s", what, why ? why : "");
    post(&c->state, &c->state_sleeping, 2);
    futex_wake(&c->state);
    _exit(0);
}

/* Wait (as the jail) until *p != old. */
static uint32_t jail_wait(_Atomic uint32_t *p, _Atomic uint32_t *sleeping, uint32_t old,
                          double spin_s)
{
    double t0 = 0;
    for (unsigned long n = 0;; n++) {
        uint32_t v = atomic_load_explicit(p, memory_order_acquire);
        if (v != old)
            return v;
        relax();
        if ((n & 1023) == 1023) {
            double t = now_s();
            if (!t0)
                t0 = t;
            else if (t - t0 > spin_s)
                break;
        }
    }
    for (;;) {
        atomic_store(sleeping, 1);
        uint32_t v = atomic_load(p);
        if (v == old)
            futex_wait(p, old, 100000000);
        atomic_store(sleeping, 0);
        v = atomic_load_explicit(p, memory_order_acquire);
        if (v != old)
            return v;
        if (getppid() == 1)
            _exit(1);
    }
}

/* The call's arguments, as the C calling convention passes them: integers
 * and pointers in iv (6 registers), floating values in fv (8). */
static void load_args(const kh_jail_ctl *c, const unsigned char *arena, uint32_t slot, long iv[6],
                      double fv[8])
{
    int ni = 0, nf = 0;
    for (uint32_t k = 0; k < c->na && ni <= 6 && nf <= 8; k++) {
        const kh_jail_arg *a = &c->a[k];
        const unsigned char *d =
            a->tensor >= 0 && a->tensor < (int)c->nt ? arena + c->data_off[slot][a->tensor]
                                                     : NULL;
        uint64_t bits = 0;
        switch (a->kind) {
        case KH_JARG_PTR: if (ni < 6) iv[ni++] = (long)(uintptr_t)d; break;
        case KH_JARG_I32: if (ni < 6) iv[ni++] = (long)(int32_t)a->i; break;
        case KH_JARG_I64: if (ni < 6) iv[ni++] = (long)a->i; break;
        case KH_JARG_U32: if (ni < 6) iv[ni++] = (long)(uint32_t)a->i; break;
        case KH_JARG_U64: if (ni < 6) iv[ni++] = (long)(uint64_t)a->i; break;
        case KH_JARG_F64: if (nf < 8) fv[nf++] = a->f; break;
        case KH_JARG_F32: {
            /* a float travels in the low 32 bits of its vector register
             * (SysV x86-64 and AAPCS64 alike): put its bits there */
            float f = (float)a->f;
            uint32_t u;
            memcpy(&u, &f, 4);
            bits = u;
            if (nf < 8)
                memcpy(&fv[nf++], &bits, 8);
            break;
        }
        case KH_JARG_SCALAR:
            if (!d)
                break;
            if (a->scalar == KH_JSCALAR_F32) {
                uint32_t u;
                memcpy(&u, d, 4);
                bits = u;
                if (nf < 8)
                    memcpy(&fv[nf++], &bits, 8);
            } else if (a->scalar == KH_JSCALAR_I32) {
                int32_t v;
                memcpy(&v, d, 4);
                if (ni < 6)
                    iv[ni++] = v;
            } else if (a->scalar == KH_JSCALAR_I64) {
                int64_t v;
                memcpy(&v, d, 8);
                if (ni < 6)
                    iv[ni++] = (long)v;
            } else if (ni < 6) {
                iv[ni++] = d[0] != 0;
            }
            break;
        }
    }
}

int kh_jail_main(void)
{
    struct stat sb;
    if (fstat(FD_ARENA, &sb) || (size_t)sb.st_size < sizeof(kh_jail_ctl)) {
        fprintf(stderr, "khlua __host-jail: started by hand? (no arena on fd %d)\n", FD_ARENA);
        return 2;
    }
    size_t len = (size_t)sb.st_size;
    unsigned char *arena = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, FD_ARENA, 0);
    if (arena == MAP_FAILED)
        _exit(3);
    close(FD_ARENA);
    kh_jail_ctl *c = (kh_jail_ctl *)arena;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (c->nslots > KH_JAIL_MAX_SLOTS || c->nt > KH_JAIL_MAX_TENSORS ||
        c->na > KH_JAIL_MAX_ARGS || c->nguards > KH_JAIL_MAX_GUARDS)
        load_failed(c, "the jail's layout is out of range", NULL);

    /* guard pages: no access, and named for the fault description */
    for (uint32_t i = 0; i < c->nguards; i++) {
        const kh_jail_guard *g = &c->guards[i];
        if (g->off + g->len > len || g->off % page)
            load_failed(c, "a guard page is outside the arena", NULL);
        if (mprotect(arena + g->off, g->len, PROT_NONE))
            load_failed(c, "mprotect: ", strerror(errno));
        g_guards[g_nguards].lo = (uintptr_t)(arena + g->off);
        g_guards[g_nguards].hi = (uintptr_t)(arena + g->off + g->len);
        g_guards[g_nguards++].what = g->what;
    }

    /* limits: the CPU time of the call (hard, so it cannot be raised) */
    struct rlimit rl;
    if (c->cpu_s > 0) {
        rl.rlim_cur = rl.rlim_max = (rlim_t)c->cpu_s + 1;
        setrlimit(RLIMIT_CPU, &rl);
    }
    if (getrlimit(RLIMIT_AS, &rl) == 0)
        g_as_limit = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max = 0;
    setrlimit(RLIMIT_CORE, &rl);
    g_statm = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);

    /* fault descriptions: an alternate stack, the stack's bounds */
    volatile char here = 0;
    g_stack_hi = (uintptr_t)&here + 65536;
    struct rlimit st;
    if (getrlimit(RLIMIT_STACK, &st) == 0 && st.rlim_cur != RLIM_INFINITY)
        g_stack_lo = (uintptr_t)&here - st.rlim_cur;
    else
        g_stack_lo = (uintptr_t)&here - (8u << 20);
    static unsigned char altstack[64 * 1024];
    stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack, .ss_flags = 0};
    sigaltstack(&ss, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fatal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGXCPU, SIGSYS};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);

    if (kh_jail_restrict_fs())
        load_failed(c, "cannot confine the candidate (Landlock): ", strerror(errno));
    if (kh_jail_drop_capabilities())
        load_failed(c, "cannot drop the jail's capabilities: ", strerror(errno));
    if (install_filter(0))
        load_failed(c, "cannot confine the candidate (seccomp): ", strerror(errno));
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", FD_SO);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        load_failed(c, "cannot load the shared object: ", dlerror());
    close(FD_SO);
    char sym[sizeof c->symbol];
    memcpy(sym, c->symbol, sizeof sym);
    sym[sizeof sym - 1] = '\0';
    void *fp = dlsym(h, sym);
    if (!fp) {
        char m[320];
        snprintf(m, sizeof m, "entry symbol '%s' not found in the shared object", sym);
        load_failed(c, m, NULL);
    }
    entry_fn fn;
    memcpy(&fn, &fp, sizeof fp);
    if (install_filter(1))
        load_failed(c, "cannot confine the candidate (seccomp): ", strerror(errno));
    post(&c->state, &c->state_sleeping, 1);
    futex_wake(&c->state);

    uint32_t seq = 0;
    for (;;) {
        seq = jail_wait(&c->arm, &c->go_sleeping, seq, 0.0001);
        if (c->op != 1)
            _exit(0);
        uint32_t slot = c->slot;
        if (slot >= c->nslots)
            _exit(4);
        /* armed: spinning.  The warden writes the call's inputs (its scalars
         * among them) only after this answer: they are read after "go". */
        post(&c->armed, &c->armed_sleeping, seq);
        jail_wait(&c->go, &c->go_sleeping, seq - 1, 1.0);
        long iv[6] = {0};
        double fv[8] = {0};
        load_args(c, arena, slot, iv, fv);
        fn(iv[0], iv[1], iv[2], iv[3], iv[4], iv[5], fv[0], fv[1], fv[2], fv[3], fv[4], fv[5],
           fv[6], fv[7]);
        post(&c->done, &c->done_sleeping, seq);
    }
}
