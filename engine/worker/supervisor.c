/* supervisor.c: worker processes under deadlines (see supervisor.h).  Owns
 * process start, pipes, deadlines, kills, reaping and respawn policy; the
 * command line a launch template makes is supervisor_launch.c's, the meaning
 * of requests belongs to the callers and the roles. */
#include "worker/supervisor.h"
#include "worker/supervisor_int.h"

#include "core/scrub.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define ERR_TAIL 8192

struct kh_wproc {
    char role[64];
    pid_t pid;
    int to_fd, from_fd, err_fd;
    kh_wire_reader reader;
    int alive;
    /* the request in flight */
    int busy;
    long next_id, busy_id;
    char method[64];
    double submitted, deadline;
    /* stderr ring: the last ERR_TAIL bytes */
    char err_ring[ERR_TAIL];
    size_t err_len, err_pos;
    int err_wrapped; /* the ring has dropped bytes: its first line is partial */
    char err_tail[ERR_TAIL + 1];
    int status;
    double exit_grace; /* kh_wproc_opts.exit_grace_s */
    int remote;            /* launched through another program (srun, ssh) */
    int reaped;            /* the launcher was reaped by the wait loop; status holds it */
    char **argv;           /* its command line while its hello is not read yet
                            * (kh_wproc_ready): NULL once it is */
    double hello_deadline;
    int worker_pid;        /* from the hello */
    char worker_host[256];
    char slurm_job[64];
};

/* How long a worker that is leaving (a sticky error, a crash) gets before
 * its process group is killed: dflt, or longer when the launch asked. */
static double grace(const kh_wproc *w, double dflt)
{
    return w->exit_grace > dflt ? w->exit_grace : dflt;
}

static void set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void drain_stderr(kh_wproc *w)
{
    if (w->err_fd < 0)
        return;
    char buf[4096];
    for (;;) {
        ssize_t n = read(w->err_fd, buf, sizeof buf);
        if (n <= 0) {
            if (n == 0) {
                close(w->err_fd);
                w->err_fd = -1;
            }
            return;
        }
        for (ssize_t i = 0; i < n; i++) {
            w->err_ring[w->err_pos] = buf[i];
            w->err_pos = (w->err_pos + 1) % ERR_TAIL;
            if (w->err_len < ERR_TAIL)
                w->err_len++;
            else
                w->err_wrapped = 1;
        }
    }
}

const char *kh_wproc_stderr_tail(kh_wproc *w)
{
    drain_stderr(w);
    size_t start = (w->err_pos + ERR_TAIL - w->err_len) % ERR_TAIL;
    for (size_t i = 0; i < w->err_len; i++)
        w->err_tail[i] = w->err_ring[(start + i) % ERR_TAIL];
    /* What a worker prints is what a candidate can make it print: cut and
     * scrubbed before it reaches a message, a verdict or a record.  A line
     * the ring cut may hold the end of a key no rule recognises: it goes. */
    const char *t = w->err_tail;
    size_t n = w->err_len;
    const char *nl = w->err_wrapped ? memchr(t, '\n', n) : NULL;
    if (nl) {
        n -= (size_t)(nl + 1 - t);
        t = nl + 1;
    }
    char *clean = kh_scrub_text(t, n, KH_SCRUB_MAX, KH_SCRUB_TAIL);
    snprintf(w->err_tail, sizeof w->err_tail, "%s", clean ? clean : "");
    free(clean);
    return w->err_tail;
}

/* The last non-empty line of the worker's stderr, for error messages. */
static void last_line(kh_wproc *w, char *buf, size_t n)
{
    const char *t = kh_wproc_stderr_tail(w);
    size_t len = strlen(t);
    while (len && (t[len - 1] == '\n' || t[len - 1] == '\r'))
        len--;
    size_t s = len;
    while (s && t[s - 1] != '\n')
        s--;
    snprintf(buf, n, "%.*s", (int)(len - s > 300 ? 300 : len - s), t + s);
}

/* Kill the worker's process group and reap it. */
static void kill_and_reap(kh_wproc *w, double grace_s)
{
    if (w->pid <= 0)
        return;
    int st = w->status;
    if (w->reaped) {
        kill(-w->pid, SIGKILL); /* what it left in its group */
        goto reaped;
    }
    if (w->remote && grace_s < 1.0) {
        /* srun forwards SIGTERM to its step and cancels it; ssh closes the
         * connection.  A SIGKILL would leave the remote worker running. */
        kill(-w->pid, SIGTERM);
        grace_s = 1.0;
    }
    double end = kh_now() + grace_s;
    for (;;) {
        pid_t r = waitpid(w->pid, &st, WNOHANG);
        if (r == w->pid || (r < 0 && errno == ECHILD))
            break;
        if (kh_now() >= end) {
            kill(-w->pid, SIGKILL);
            kill(w->pid, SIGKILL);
            while (waitpid(w->pid, &st, 0) < 0 && errno == EINTR) {
            }
            break;
        }
        usleep(2000);
    }
    kill(-w->pid, SIGKILL); /* leftovers in its group */
reaped:
    w->status = st;
    w->pid = -1;
    w->alive = 0;
    drain_stderr(w);
    if (w->to_fd >= 0)
        close(w->to_fd);
    if (w->from_fd >= 0)
        close(w->from_fd);
    w->to_fd = w->from_fd = -1;
}

static void describe_status(int st, char *buf, size_t n)
{
    if (WIFSIGNALED(st)) {
        const char *abbr = sigabbrev_np(WTERMSIG(st));
        snprintf(buf, n, "killed by SIG%s", abbr ? abbr : "?");
    } else if (WIFEXITED(st)) {
        snprintf(buf, n, "exited with code %d", WEXITSTATUS(st));
    } else {
        snprintf(buf, n, "ended");
    }
}

/* Wait for the worker's hello (until w->hello_deadline) and check the role
 * it names.  w; or NULL with err set, w stopped.  Frees w->argv. */
static kh_wproc *await_hello(kh_wproc *w, kh_err *err)
{
    double deadline = w->hello_deadline;
    char **argv = w->argv;
    const char *role_want = w->role;
    w->argv = NULL;
    kh_msg hello = {0};
    for (;;) {
        int done = 0;
        kh_err rerr;
        kh_status st = kh_wire_read_some(&w->reader, w->from_fd, &hello, &done, &rerr);
        drain_stderr(w);
        if (st == KH_OK && done)
            break;
        if (st || kh_now() > deadline) {
            char line[400];
            if (st)
                kill_and_reap(w, 1.0);
            else
                kill_and_reap(w, 0);
            char how[64];
            describe_status(w->status, how, sizeof how);
            last_line(w, line, sizeof line);
            kh_err_set(err, st ? KH_ECHILD : KH_ETIMEOUT,
                       "worker '%s' (%s) %s before saying hello (%s)%s%s", role_want, argv[0],
                       st ? how : "did not answer", st ? rerr.msg : "timeout",
                       line[0] ? "; last stderr: " : "", line);
            kh_wproc_free_argv(argv);
            kh_wproc_stop(w, 0);
            return NULL;
        }
        struct pollfd p[2] = {{.fd = w->from_fd, .events = POLLIN},
                              {.fd = w->err_fd, .events = POLLIN}};
        poll(p, w->err_fd >= 0 ? 2 : 1, 50);
    }
    kh_wproc_free_argv(argv);
    json_t *h = json_object_get(hello.head, "hello");
    w->worker_pid = (int)json_integer_value(json_object_get(h, "pid"));
    const char *hh = json_string_value(json_object_get(h, "host"));
    const char *hj = json_string_value(json_object_get(h, "slurm_job"));
    snprintf(w->worker_host, sizeof w->worker_host, "%s", hh ? hh : "");
    snprintf(w->slurm_job, sizeof w->slurm_job, "%s", hj ? hj : "");
    json_t *herr = json_object_get(hello.head, "error");
    const char *role = json_string_value(json_object_get(h, "role"));
    if (herr || !role || strcmp(role, role_want)) {
        if (herr)
            kh_err_set(err, KH_ECHILD, "worker '%s' could not start: %s", role_want,
                       json_string_value(json_object_get(herr, "message")));
        else
            kh_err_set(err, KH_EPARSE, "worker answered hello as role '%s', expected '%s'",
                       role ? role : "(none)", role_want);
        kh_msg_free(&hello);
        kh_wproc_stop(w, 1.0);
        return NULL;
    }
    kh_msg_free(&hello);
    return w;
}

kh_wproc *kh_wproc_spawn(const kh_wproc_opts *o, kh_err *err)
{
    /* A worker that dies mid-request must not take the coordinator with it
     * through SIGPIPE; write errors are handled where they happen. */
    struct sigaction sa;
    if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL)
        signal(SIGPIPE, SIG_IGN);
    char exe[4096];
    if (o->exe) {
        snprintf(exe, sizeof exe, "%s", o->exe);
    } else {
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0) {
            kh_err_set(err, KH_EIO, "cannot find this executable: %s", strerror(errno));
            return NULL;
        }
        exe[n] = '\0';
    }
    /* A template that does not start with {exe} runs a launcher (srun,
     * ssh) in front of the worker. */
    const char *tpl = o->launch && o->launch[0] ? o->launch : KH_LAUNCH_LOCAL;
    while (*tpl == ' ' || *tpl == '\t')
        tpl++;
    int remote = strncmp(tpl, "{exe}", 5) != 0;
    char **env = kh_wproc_build_env(o, exe, remote);
    char **argv = env ? kh_wproc_build_argv(o, exe, env) : NULL;
    if (!argv || !argv[0]) {
        kh_err_set(err, argv ? KH_EINVAL : KH_ENOMEM,
                   argv ? "empty worker launch template" : "out of memory");
        kh_wproc_free_argv(argv);
        kh_wproc_free_argv(env);
        return NULL;
    }
    /* Workers run candidate code: they get this environment without the
     * variables that may hold a credential, plus the launch's entries.  An
     * ssh launcher keeps its agent; the remote side gets {env} only. */
    const char *base = strrchr(argv[0], '/');
    base = base ? base + 1 : argv[0];
    static const char *const ssh_keep[] = {"SSH_AUTH_SOCK", NULL};
    char **child_env = kh_scrub_env(environ, remote && !strncmp(base, "ssh", 3) ? ssh_keep : NULL,
                                    env);
    if (!child_env) {
        kh_err_set(err, KH_ENOMEM, "out of memory");
        kh_wproc_free_argv(argv);
        kh_wproc_free_argv(env);
        return NULL;
    }
    kh_wproc *w = calloc(1, sizeof *w);
    int in[2] = {-1, -1}, out[2] = {-1, -1}, er[2] = {-1, -1}, ex[2] = {-1, -1};
    if (!w || pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(er, O_CLOEXEC) ||
        pipe2(ex, O_CLOEXEC)) {
        kh_err_set(err, KH_EIO, "cannot create worker pipes: %s", strerror(errno));
        goto fail_pipes;
    }
    snprintf(w->role, sizeof w->role, "%s", o->role);
    w->exit_grace = o->exit_grace_s;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        kh_err_set(err, KH_EIO, "fork: %s", strerror(errno));
        goto fail_pipes;
    }
    if (pid == 0) {
        setpgid(0, 0);
        dup2(in[0], 0);
        dup2(out[1], 1);
        dup2(er[1], 2);
        signal(SIGPIPE, SIG_DFL);
        signal(SIGINT, SIG_IGN);
        execvpe(argv[0], argv, child_env);
        int e = errno;
        if (write(ex[1], &e, sizeof e) < 0) {
        }
        _exit(127);
    }
    setpgid(pid, pid);
    free(child_env);
    kh_wproc_free_argv(env); /* the child has its copy */
    env = NULL;
    close(in[0]);
    close(out[1]);
    close(er[1]);
    close(ex[1]);
    int child_errno = 0;
    ssize_t got = read(ex[0], &child_errno, sizeof child_errno);
    close(ex[0]);
    w->pid = pid;
    w->to_fd = in[1];
    w->from_fd = out[0];
    w->err_fd = er[0];
    w->alive = 1;
    w->next_id = 1;
    /* a launcher in front of the worker gets a chance to pass a termination
     * on (srun cancels its step on SIGTERM) */
    w->remote = remote;
    set_nonblock(w->to_fd);
    set_nonblock(w->from_fd);
    set_nonblock(w->err_fd);
    kh_wire_reader_init(&w->reader);
    if (got == (ssize_t)sizeof child_errno) {
        kh_err_set(err, KH_ENOTFOUND, "cannot start worker '%s' (%s): %s", o->role, argv[0],
                   strerror(child_errno));
        kh_wproc_free_argv(argv);
        kh_wproc_stop(w, 0);
        return NULL;
    }

    /* The hello comes later: kh_wproc_ready. */
    kh_timeline("spawned %s (pid %d)", o->role, (int)pid);
    w->argv = argv;
    w->hello_deadline = kh_now() + (o->hello_timeout_s > 0 ? o->hello_timeout_s : 30.0);
    return w;

fail_pipes:
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0) close(in[i]);
        if (out[i] >= 0) close(out[i]);
        if (er[i] >= 0) close(er[i]);
        if (ex[i] >= 0) close(ex[i]);
    }
    free(w);
    free(child_env);
    kh_wproc_free_argv(argv);
    kh_wproc_free_argv(env);
    return NULL;
}

kh_wproc *kh_wproc_ready(kh_wproc *w, kh_err *err)
{
    if (!w->argv)
        return w;
    kh_wproc *ready = await_hello(w, err);
    kh_timeline("hello %s", ready ? ready->role : "(failed)");
    return ready;
}

int kh_wproc_starting(const kh_wproc *w) { return w->argv != NULL; }

kh_wproc *kh_wproc_start(const kh_wproc_opts *o, kh_err *err)
{
    kh_wproc *w = kh_wproc_spawn(o, err);
    return w ? kh_wproc_ready(w, err) : NULL;
}

kh_status kh_wproc_submit(kh_wproc *w, const char *method, const json_t *params,
                          const void *payload, size_t payload_len, double timeout_s,
                          kh_err *err)
{
    if (!w->alive)
        return kh_err_set(err, KH_ESTATE, "worker '%s' is not running", w->role);
    if (w->busy)
        return kh_err_set(err, KH_ESTATE, "worker '%s' is busy with '%s'", w->role, w->method);
    if (w->remote && !w->reaped) {
        /* a launcher that has left took the connection with it */
        int wst = 0;
        if (waitpid(w->pid, &wst, WNOHANG) == w->pid) {
            w->reaped = 1;
            w->status = wst;
            kill_and_reap(w, 0);
            char how[64];
            describe_status(w->status, how, sizeof how);
            return kh_err_set(err, KH_ECHILD, "worker '%s' lost before '%s': its launcher %s (the "
                              "connection to the worker was lost)", w->role, method, how);
        }
    }
    long id = w->next_id++;
    json_t *head = json_pack("{s:I, s:s, s:O}", "id", (json_int_t)id, "method", method,
                             "params", params ? (json_t *)params : json_object());
    if (!params)
        json_decref(json_object_get(head, "params")); /* s:O took a new empty object */
    w->submitted = kh_now();
    w->deadline = w->submitted + (timeout_s > 0 ? timeout_s : 1e9);
    kh_status st = kh_wire_write(w->to_fd, head, payload, payload_len, w->deadline, err);
    json_decref(head);
    if (st) {
        /* A worker that cannot take its request is as good as dead. */
        kill_and_reap(w, 0);
        return kh_err_prefix(err, "sending '%s' to worker '%s'", method, w->role);
    }
    w->busy = 1;
    w->busy_id = id;
    snprintf(w->method, sizeof w->method, "%s", method);
    kh_timeline("submit %s %s (%zu bytes)", w->role, method, payload_len);
    return KH_OK;
}

/* Complete w's request as failed because the process is gone. */
static void complete_dead(kh_wproc *w, kh_wdone *d, int timed_out, const char *why)
{
    memset(d, 0, sizeof *d);
    d->w = w;
    d->seconds = kh_now() - w->submitted;
    if (timed_out && !w->remote)
        kill(-w->pid, SIGKILL), kill(w->pid, SIGKILL);
    kill_and_reap(w, timed_out ? 0 : grace(w, 2.0));
    char how[64], line[400];
    describe_status(w->status, how, sizeof how);
    last_line(w, line, sizeof line);
    d->worker_died = 1;
    if (!why && w->remote)
        why = "the connection to the worker was lost";
    if (timed_out)
        d->status = kh_err_set(&d->err, KH_ETIMEOUT,
                               "worker '%s' did not finish '%s' within %.1f s and was killed",
                               w->role, w->method, w->deadline - w->submitted);
    else
        d->status = kh_err_set(&d->err, KH_ECHILD, "worker '%s' died during '%s': %s%s%s%s%s",
                               w->role, w->method, how, why ? " (" : "", why ? why : "",
                               why ? ")" : "", line[0] ? "" : "");
    if (!timed_out && line[0]) {
        size_t l = strlen(d->err.msg);
        snprintf(d->err.msg + l, sizeof d->err.msg - l, "; last stderr: %s", line);
    }
    w->busy = 0;
}

size_t kh_wproc_wait(kh_wproc *const *ws, size_t n, double wait_s, kh_wdone *done,
                     size_t max_done)
{
    size_t nd = 0;
    double end = kh_now() + (wait_s > 0 ? wait_s : 0);
    struct pollfd *pfd = calloc(2 * n + 1, sizeof *pfd);
    if (!pfd)
        return 0;
    for (;;) {
        /* Check deadlines and collect what is ready. */
        size_t np = 0;
        double next = end;
        for (size_t i = 0; i < n && nd < max_done; i++) {
            kh_wproc *w = ws[i];
            if (!w || !w->busy)
                continue;
            /* A launcher (srun, ssh) that exits has lost its worker even
             * when the worker, still in its group, holds the pipes open.
             * Checked before reading, so a reply already written wins. */
            int gone = 0;
            if (w->remote && !w->reaped) {
                int wst = 0;
                if (waitpid(w->pid, &wst, WNOHANG) == w->pid) {
                    w->reaped = 1;
                    w->status = wst;
                    gone = 1;
                }
            }
            /* Read whatever is there. */
            for (;;) {
                kh_msg m = {0};
                int got = 0;
                kh_err rerr;
                kh_status st = kh_wire_read_some(&w->reader, w->from_fd, &m, &got, &rerr);
                if (st) {
                    complete_dead(w, &done[nd++], 0, st == KH_EPARSE ? rerr.msg : NULL);
                    break;
                }
                if (!got)
                    break;
                json_int_t id = json_integer_value(json_object_get(m.head, "id"));
                if (id != w->busy_id) {
                    kh_msg_free(&m); /* a stale reply: ignore */
                    continue;
                }
                kh_wdone *d = &done[nd++];
                memset(d, 0, sizeof *d);
                d->w = w;
                d->reply = m;
                d->seconds = kh_now() - w->submitted;
                w->busy = 0;
                kh_timeline("reply %s %s", w->role, w->method);
                if (json_is_true(json_object_get(m.head, "exiting"))) {
                    /* It leaves by itself (a sticky error): reap it now. */
                    kill_and_reap(w, grace(w, 5.0));
                    d->worker_died = 1;
                }
                if (json_is_true(json_object_get(m.head, "ok"))) {
                    d->status = KH_OK;
                } else {
                    json_t *e = json_object_get(m.head, "error");
                    const char *code = json_string_value(json_object_get(e, "code"));
                    kh_status sc = KH_ECHILD;
                    for (int c = 1; code && c < KH_STATUS_COUNT; c++)
                        if (!strcmp(code, kh_status_name((kh_status)c)))
                            sc = (kh_status)c;
                    const char *msg = json_string_value(json_object_get(e, "message"));
                    d->status = kh_err_set(&d->err, sc, "%s", msg ? msg : "worker error");
                }
                break;
            }
            drain_stderr(w);
            if (!w->busy)
                continue;
            if (gone) {
                complete_dead(w, &done[nd++], 0, "its launcher exited: connection lost");
                continue;
            }
            if (kh_now() >= w->deadline) {
                complete_dead(w, &done[nd++], 1, NULL);
                continue;
            }
            if (w->deadline < next)
                next = w->deadline;
            pfd[np++] = (struct pollfd){.fd = w->from_fd, .events = POLLIN};
            if (w->err_fd >= 0)
                pfd[np++] = (struct pollfd){.fd = w->err_fd, .events = POLLIN};
        }
        if (nd > 0 || np == 0)
            break;
        double left = next - kh_now();
        if (left <= 0 && kh_now() >= end)
            break;
        int ms = left <= 0 ? 0 : (int)(left * 1000) + 1;
        if (ms > 100)
            ms = 100; /* re-check deadlines and stderr regularly */
        poll(pfd, np, ms);
        if (kh_now() >= end && wait_s <= 0)
            break;
    }
    free(pfd);
    return nd;
}

kh_status kh_wproc_call(kh_wproc *w, const char *method, const json_t *params,
                        const void *payload, size_t payload_len, double timeout_s,
                        kh_msg *reply, kh_err *err)
{
    memset(reply, 0, sizeof *reply);
    kh_status st = kh_wproc_submit(w, method, params, payload, payload_len, timeout_s, err);
    if (st)
        return st;
    for (;;) {
        kh_wdone d;
        if (kh_wproc_wait(&w, 1, 3600, &d, 1) == 0)
            continue;
        *reply = d.reply;
        if (d.status && err)
            *err = d.err;
        return d.status;
    }
}

int kh_wproc_busy(const kh_wproc *w) { return w->busy; }
int kh_wproc_alive(const kh_wproc *w) { return w->alive; }
int kh_wproc_pid(const kh_wproc *w) { return w->pid; }
int kh_wproc_worker_pid(const kh_wproc *w) { return w->worker_pid; }
const char *kh_wproc_worker_host(const kh_wproc *w) { return w->worker_host; }
const char *kh_wproc_slurm_job(const kh_wproc *w) { return w->slurm_job; }
const char *kh_wproc_role(const kh_wproc *w) { return w->role; }

void kh_wproc_ask_exit(kh_wproc *w, double grace_s)
{
    if (!w)
        return;
    if (w->alive && !w->busy && grace_s > 0 && w->to_fd >= 0) {
        json_t *head = json_pack("{s:I, s:s}", "id", (json_int_t)0, "method", "shutdown");
        kh_wire_write(w->to_fd, head, NULL, 0, kh_now() + grace_s, NULL);
        json_decref(head);
    }
    if (w->to_fd >= 0) {
        close(w->to_fd); /* EOF also tells a worker to leave */
        w->to_fd = -1;
    }
}

void kh_wproc_stop(kh_wproc *w, double grace_s)
{
    if (!w)
        return;
    kh_wproc_ask_exit(w, grace_s);
    if (w->alive)
        kill_and_reap(w, grace_s);
    if (w->err_fd >= 0)
        close(w->err_fd);
    kh_wire_reader_free(&w->reader);
    kh_wproc_free_argv(w->argv);
    free(w);
}

/* ---- pools ---------------------------------------------------------------- */
struct kh_pool {
    kh_wproc_opts opts;
    char role[64];
    char launch[1024];
    char exe[4096];
    size_t n;
    kh_wproc **w;
    char (*gpu)[128];   /* per slot: {gpu}, {host} */
    char (*host)[256];
    int consecutive_deaths;
    int max_deaths;
    double last_death;
    kh_err last_err;
    kh_pool_stats stats;
};

kh_pool *kh_pool_new(const kh_wproc_opts *o, size_t n, kh_err *err)
{
    kh_pool *p = calloc(1, sizeof *p);
    if (!p || n == 0 || !(p->w = calloc(n, sizeof *p->w)) ||
        !(p->gpu = calloc(n, sizeof *p->gpu)) || !(p->host = calloc(n, sizeof *p->host))) {
        if (p) {
            free(p->w);
            free(p->gpu);
        }
        free(p);
        kh_err_set(err, n ? KH_ENOMEM : KH_EINVAL, n ? "out of memory" : "a pool needs workers");
        return NULL;
    }
    p->opts = *o;
    snprintf(p->role, sizeof p->role, "%s", o->role);
    p->opts.role = p->role;
    if (o->launch) {
        snprintf(p->launch, sizeof p->launch, "%s", o->launch);
        p->opts.launch = p->launch;
    }
    if (o->exe) {
        snprintf(p->exe, sizeof p->exe, "%s", o->exe);
        p->opts.exe = p->exe;
    }
    p->n = n;
    p->max_deaths = 5;
    return p;
}

void kh_pool_free(kh_pool *p)
{
    if (!p)
        return;
    /* every worker asked at once: their exits (a CUDA context's teardown)
     * overlap */
    for (size_t i = 0; i < p->n; i++)
        kh_wproc_ask_exit(p->w[i], 1.0);
    for (size_t i = 0; i < p->n; i++)
        kh_wproc_stop(p->w[i], 1.0);
    free(p->w);
    free(p->gpu);
    free(p->host);
    free(p);
}

void kh_pool_set_max_deaths(kh_pool *p, int max_deaths) { p->max_deaths = max_deaths; }
void kh_pool_reset(kh_pool *p) { p->consecutive_deaths = 0; }
void kh_pool_stats_get(const kh_pool *p, kh_pool_stats *s) { *s = p->stats; }

kh_status kh_pool_place(kh_pool *p, size_t slot, const char *gpu, const char *host,
                        kh_err *err)
{
    if (slot >= p->n)
        return kh_err_set(err, KH_EINVAL, "pool '%s' has %zu slots, not %zu", p->role, p->n,
                          slot + 1);
    if ((gpu && strlen(gpu) >= sizeof p->gpu[0]) || (host && strlen(host) >= sizeof p->host[0]))
        return kh_err_set(err, KH_EINVAL, "GPU or host name too long: '%.60s' '%.60s'",
                          gpu ? gpu : "", host ? host : "");
    snprintf(p->gpu[slot], sizeof p->gpu[slot], "%s", gpu ? gpu : "");
    snprintf(p->host[slot], sizeof p->host[slot], "%s", host ? host : "");
    return KH_OK;
}

const char *kh_pool_slot_gpu(const kh_pool *p, size_t slot)
{
    return slot < p->n ? p->gpu[slot] : "";
}

const char *kh_pool_slot_host(const kh_pool *p, size_t slot)
{
    return slot < p->n ? p->host[slot] : "";
}

const kh_wproc *kh_pool_slot_worker(const kh_pool *p, size_t slot)
{
    return slot < p->n && p->w[slot] && p->w[slot]->alive && !p->w[slot]->argv
               ? p->w[slot]
               : NULL;
}

/* The pool's options for a worker in slot i. */
static const kh_wproc_opts *slot_opts(kh_pool *p, size_t i)
{
    p->opts.index = (int)i;
    p->opts.gpu = p->gpu[i];
    p->opts.host = p->host[i][0] ? p->host[i] : NULL;
    return &p->opts;
}

/* A worker kh_pool_prestart spawned: its hello read now; a failure counts
 * as a death and empties the slot (the caller starts another there). */
static void pool_ready(kh_pool *p, size_t i)
{
    if (!p->w[i] || !kh_wproc_starting(p->w[i]))
        return;
    double t0 = kh_now();
    kh_err err;
    kh_err_clear(&err);
    p->w[i] = kh_wproc_ready(p->w[i], &err);
    if (!p->w[i]) {
        p->consecutive_deaths++;
        p->last_death = kh_now();
        p->last_err = err;
        return;
    }
    p->stats.last_restart_s = kh_now() - t0;
}

kh_status kh_pool_prestart(kh_pool *p, size_t max, kh_err *err)
{
    size_t live = 0;
    for (size_t i = 0; i < p->n; i++)
        live += p->w[i] && p->w[i]->alive;
    for (size_t i = 0; i < p->n && live < max; i++) {
        if (p->w[i] && p->w[i]->alive)
            continue;
        live++;
        kh_wproc_stop(p->w[i], 0);
        if (!(p->w[i] = kh_wproc_spawn(slot_opts(p, i), err)))
            return err->code;
        p->stats.started++;
    }
    return KH_OK;
}

/* An idle live worker (the one in slot prefer if it qualifies), starting one
 * (after the backoff) if none is; *slot its index. */
static kh_wproc *pool_worker_in(kh_pool *p, size_t prefer, int strict, size_t *slot,
                                 kh_err *err)
{
    /* the prestarted workers that could serve this request say hello first */
    for (size_t i = 0; i < p->n; i++)
        if (!strict || i == prefer)
            pool_ready(p, i);
    if (prefer < p->n && p->w[prefer] && p->w[prefer]->alive && !p->w[prefer]->busy) {
        *slot = prefer;
        return p->w[prefer];
    }
    if (strict && prefer < p->n && p->w[prefer] && p->w[prefer]->alive) {
        kh_err_set(err, KH_ESTATE, "'%s' worker %zu is busy", p->role, prefer);
        return NULL;
    }
    for (size_t i = 0; i < p->n && !strict; i++)
        if (p->w[i] && p->w[i]->alive && !p->w[i]->busy) {
            *slot = i;
            return p->w[i];
        }
    if (p->consecutive_deaths >= p->max_deaths) {
        kh_err_set(err, KH_ENODEV, "worker role '%s' keeps failing (%d deaths in a row); "
                   "last: %s", p->role, p->consecutive_deaths, p->last_err.msg);
        return NULL;
    }
    for (size_t i = strict ? prefer : 0; i < p->n; i++) {
        if (p->w[i] && p->w[i]->alive)
            continue;
        kh_wproc_stop(p->w[i], 0);
        p->w[i] = NULL;
        if (p->consecutive_deaths > 1) {
            /* Back off from a role that keeps dying: 50 ms, 100 ms, ... 2 s. */
            double b = 0.025 * (double)(1 << (p->consecutive_deaths > 7 ? 7 : p->consecutive_deaths));
            if (b > 2.0)
                b = 2.0;
            double until = p->last_death + b;
            while (kh_now() < until)
                usleep(5000);
        }
        double t0 = kh_now();
        p->w[i] = kh_wproc_start(slot_opts(p, i), err);
        if (!p->w[i]) {
            p->consecutive_deaths++;
            p->last_death = kh_now();
            p->last_err = *err;
            return NULL;
        }
        p->stats.started++;
        p->stats.last_restart_s = kh_now() - t0;
        *slot = i;
        return p->w[i];
    }
    if (strict && prefer >= p->n)
        kh_err_set(err, KH_EINVAL, "pool '%s' has no slot %zu", p->role, prefer);
    else
        kh_err_set(err, KH_ESTATE, "all %zu '%s' workers are busy", p->n, p->role);
    return NULL;
}

static kh_wproc *pool_worker(kh_pool *p, kh_err *err)
{
    size_t slot;
    return pool_worker_in(p, (size_t)-1, 0, &slot, err);
}

/* What a finished request says about the role's health. */
static void pool_account(kh_pool *p, const kh_wproc *w, kh_status st, const kh_err *err)
{
    if (!w->alive) {
        p->stats.deaths++;
        if (st == KH_ETIMEOUT)
            p->stats.timeouts++;
        p->consecutive_deaths++;
        p->last_death = kh_now();
        if (err)
            p->last_err = *err;
    } else if (st == KH_OK) {
        p->consecutive_deaths = 0;
    }
}

kh_status kh_pool_call(kh_pool *p, const char *method, const json_t *params,
                       const void *payload, size_t payload_len, double timeout_s,
                       kh_msg *reply, kh_err *err)
{
    memset(reply, 0, sizeof *reply);
    kh_wproc *w = pool_worker(p, err);
    if (!w)
        return err ? err->code : KH_ECHILD;
    p->stats.calls++;
    kh_status st = kh_wproc_call(w, method, params, payload, payload_len, timeout_s, reply, err);
    pool_account(p, w, st, err);
    return st;
}

static kh_status pool_submit(kh_pool *p, const char *method, const json_t *params,
                             const void *payload, size_t payload_len, double timeout_s,
                             size_t prefer, int strict, size_t *slot, kh_err *err)
{
    size_t i = 0;
    kh_wproc *w = pool_worker_in(p, prefer, strict, &i, err);
    if (!w)
        return err ? err->code : KH_ECHILD;
    p->stats.calls++;
    kh_status st = kh_wproc_submit(w, method, params, payload, payload_len, timeout_s, err);
    if (st) {
        pool_account(p, w, st, err); /* a worker that cannot take a request died */
        return st;
    }
    *slot = i;
    return KH_OK;
}

kh_status kh_pool_submit(kh_pool *p, const char *method, const json_t *params,
                         const void *payload, size_t payload_len, double timeout_s,
                         size_t prefer, size_t *slot, kh_err *err)
{
    return pool_submit(p, method, params, payload, payload_len, timeout_s, prefer, 0, slot, err);
}

kh_status kh_pool_submit_to(kh_pool *p, const char *method, const json_t *params,
                            const void *payload, size_t payload_len, double timeout_s,
                            size_t slot, kh_err *err)
{
    size_t used;
    return pool_submit(p, method, params, payload, payload_len, timeout_s, slot, 1, &used, err);
}

size_t kh_pool_wait(kh_pool *p, double wait_s, kh_pool_done *done, size_t max_done)
{
    size_t nb = 0;
    kh_wproc **busy = calloc(p->n ? p->n : 1, sizeof *busy);
    kh_wdone *wd = calloc(max_done ? max_done : 1, sizeof *wd);
    int *pids = calloc(p->n ? p->n : 1, sizeof *pids);
    if (!busy || !wd || !pids || !max_done) {
        free(busy);
        free(wd);
        free(pids);
        return 0;
    }
    for (size_t i = 0; i < p->n; i++)
        if (p->w[i] && p->w[i]->busy) {
            pids[nb] = p->w[i]->pid;
            busy[nb++] = p->w[i];
        }
    size_t nd = nb ? kh_wproc_wait(busy, nb, wait_s, wd, max_done) : 0;
    for (size_t k = 0; k < nd; k++) {
        done[k].d = wd[k];
        done[k].slot = 0;
        done[k].pid = 0;
        for (size_t i = 0; i < p->n; i++)
            if (p->w[i] == wd[k].w)
                done[k].slot = i;
        for (size_t b = 0; b < nb; b++)
            if (busy[b] == wd[k].w)
                done[k].pid = pids[b];
        pool_account(p, wd[k].w, wd[k].status, &wd[k].err);
    }
    free(busy);
    free(wd);
    free(pids);
    return nd;
}

size_t kh_pool_size(const kh_pool *p) { return p->n; }

size_t kh_pool_in_flight(const kh_pool *p)
{
    size_t n = 0;
    for (size_t i = 0; i < p->n; i++)
        n += p->w[i] && p->w[i]->busy;
    return n;
}

int kh_pool_slot_pid(const kh_pool *p, size_t slot)
{
    return slot < p->n && p->w[slot] && p->w[slot]->alive ? (int)p->w[slot]->pid : 0;
}

int kh_pool_slot_busy(const kh_pool *p, size_t slot)
{
    return slot < p->n && p->w[slot] && p->w[slot]->busy;
}
