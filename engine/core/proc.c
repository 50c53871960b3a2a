/* proc.c: fork/exec with a deadline and captured output (see proc.h).  Owns
 * only process mechanics; what a child does and what its output means belong
 * to the caller. */
#include "core/proc.h"

#include "core/scrub.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Read from fd until EOF or the deadline; then reap pid (killing it first if
 * the deadline passed). */
static kh_status collect(pid_t pid, int fd, double timeout_s, size_t max_out,
                         kh_child_result *res, double t0, kh_err *err)
{
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close(fd);
        return kh_err_set(err, KH_ENOMEM, "out of memory reading child output");
    }
    for (;;) {
        double left = timeout_s - (kh_now() - t0);
        if (left <= 0) {
            res->timed_out = 1;
            break;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int ms = left > 1e6 ? 1000000000 : (int)(left * 1000) + 1;
        int r = poll(&p, 1, ms);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            continue; /* re-check the deadline */
        if (r < 0)
            break;
        if (len + 4096 + 1 > cap) {
            size_t ncap = cap * 2;
            char *nb = realloc(buf, ncap);
            if (!nb)
                break;
            buf = nb;
            cap = ncap;
        }
        ssize_t n = read(fd, buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (len + (size_t)n > max_out) {
            res->truncated = 1;
            n = (ssize_t)(max_out - len);
        }
        len += (size_t)n;
    }
    close(fd);
    /* kh_proc_run's child leads its own group: what it started goes too (a
     * compiler driver's cc1 blocked on a file the source named) */
    if (res->timed_out) {
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status)) {
        res->exited = 1;
        res->exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
        res->signaled = 1;
        res->signal = WTERMSIG(status);
    }
    buf[len] = '\0';
    res->out = buf;
    res->out_len = len;
    res->seconds = kh_now() - t0;
    return KH_OK;
}

kh_status kh_proc_fork_call(kh_child_fn fn, void *arg, double timeout_s, size_t max_out,
                            kh_child_result *res, kh_err *err)
{
    memset(res, 0, sizeof *res);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0)
        return kh_err_set(err, KH_EIO, "pipe: %s", strerror(errno));
    fflush(NULL);
    double t0 = kh_now();
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return kh_err_set(err, KH_EIO, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        close(fds[0]);
        signal(SIGPIPE, SIG_DFL);
        int rc = fn(arg, fds[1]);
        close(fds[1]);
        _exit(rc);
    }
    close(fds[1]);
    return collect(pid, fds[0], timeout_s, max_out, res, t0, err);
}

kh_status kh_proc_run(char *const argv[], double timeout_s, size_t max_out,
                      kh_child_result *res, kh_err *err)
{
    return kh_proc_run_limited(argv, timeout_s, max_out, 0, res, err);
}

kh_status kh_proc_run_limited(char *const argv[], double timeout_s, size_t max_out,
                              size_t max_as, kh_child_result *res, kh_err *err)
{
    memset(res, 0, sizeof *res);
    /* built before the fork: a child of a threaded process must not allocate */
    char **env = kh_scrub_env(environ, NULL, NULL);
    if (!env)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    int fds[2], efd[2];
    if (pipe2(fds, O_CLOEXEC) < 0) {
        free(env);
        return kh_err_set(err, KH_EIO, "pipe: %s", strerror(errno));
    }
    /* A second pipe reports an exec failure (errno) to the parent. */
    if (pipe2(efd, O_CLOEXEC) < 0) {
        close(fds[0]);
        close(fds[1]);
        free(env);
        return kh_err_set(err, KH_EIO, "pipe: %s", strerror(errno));
    }
    fflush(NULL);
    double t0 = kh_now();
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]); close(fds[1]); close(efd[0]); close(efd[1]);
        free(env);
        return kh_err_set(err, KH_EIO, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, 0);
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        signal(SIGPIPE, SIG_DFL);
        setpgid(0, 0);
        if (max_as) {
            struct rlimit rl = {max_as, max_as};
            setrlimit(RLIMIT_AS, &rl);
        }
        execvpe(argv[0], argv, env);
        int e = errno;
        if (write(efd[1], &e, sizeof e) < 0) {
        }
        _exit(127);
    }
    free(env);
    close(fds[1]);
    close(efd[1]);
    int child_errno = 0;
    ssize_t n = read(efd[0], &child_errno, sizeof child_errno);
    close(efd[0]);
    if (n == (ssize_t)sizeof child_errno) {
        close(fds[0]);
        waitpid(pid, NULL, 0);
        return kh_err_set(err, KH_ENOTFOUND, "cannot run %s: %s", argv[0],
                          strerror(child_errno));
    }
    return collect(pid, fds[0], timeout_s, max_out, res, t0, err);
}

void kh_child_result_free(kh_child_result *res)
{
    if (res) {
        free(res->out);
        res->out = NULL;
    }
}

void kh_child_describe(const kh_child_result *res, char *buf, size_t n)
{
    if (res->timed_out)
        snprintf(buf, n, "timed out after %.1f s", res->seconds);
    else if (res->signaled)
        snprintf(buf, n, "killed by %s", sigabbrev_np(res->signal) ? sigabbrev_np(res->signal)
                                                                   : "a signal");
    else if (res->exited)
        snprintf(buf, n, "exit %d", res->exit_code);
    else
        snprintf(buf, n, "ended in an unknown way");
}

static char *try_dir(const char *dir, size_t dlen, const char *name)
{
    size_t n = dlen + strlen(name) + 2;
    char *p = malloc(n);
    if (!p)
        return NULL;
    snprintf(p, n, "%.*s/%s", (int)dlen, dir, name);
    struct stat st;
    if (stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, X_OK) == 0)
        return p;
    free(p);
    return NULL;
}

static char *search_list(const char *list, const char *name)
{
    if (!list)
        return NULL;
    const char *s = list;
    while (*s) {
        const char *c = strchr(s, ':');
        size_t len = c ? (size_t)(c - s) : strlen(s);
        if (len) {
            char *p = try_dir(s, len, name);
            if (p)
                return p;
        }
        if (!c)
            break;
        s = c + 1;
    }
    return NULL;
}

char *kh_which(const char *name, const char *extra_dirs)
{
    if (strchr(name, '/'))
        return access(name, X_OK) == 0 ? kh_strdup(name) : NULL;
    char *p = search_list(getenv("PATH"), name);
    if (!p)
        p = search_list(extra_dirs, name);
    return p;
}

char *kh_which_python(const char **asked)
{
    const char *py = getenv("KHLUA_PYTHON");
    if (!py || !*py)
        py = "python3";
    if (asked)
        *asked = py;
    return strchr(py, '/') ? (access(py, X_OK) ? NULL : strdup(py)) : kh_which(py, NULL);
}

unsigned long long kh_proc_start_time(long pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    /* the command name (field 2) may hold blanks and parentheses: count the
     * fields from the last ')' */
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    int field = 2;
    for (p++; *p && field < 22; p++)
        if (*p == ' ')
            field++;
    return field == 22 ? strtoull(p, NULL, 10) : 0;
}

int kh_proc_alive(long pid, unsigned long long start)
{
    if (pid <= 0)
        return 0;
    if (access("/proc/self/stat", R_OK))
        return -1;
    unsigned long long now = kh_proc_start_time(pid);
    if (!now)
        return 0;
    return !start || now == start;
}
