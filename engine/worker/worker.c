/* worker.c: the serving loop behind `khlua worker --role R` (see worker.h).
 * Owns the request/reply cycle, the built-in methods (ping, shutdown) and the
 * hello; the work itself belongs to each role's module. */
#include "worker/worker.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct kh_worker {
    kh_engine *engine;
    const kh_worker_role *role;
    void *state;
    int exit_after;  /* -1: keep serving */
    double started;
    long served;
};

kh_engine *kh_worker_engine(kh_worker *w) { return w->engine; }
void *kh_worker_state(kh_worker *w) { return w->state; }
void kh_worker_set_state(kh_worker *w, void *state) { w->state = state; }
void kh_worker_exit_after_reply(kh_worker *w, int code) { w->exit_after = code; }

const kh_worker_role *kh_worker_role_find(const char *name)
{
    for (size_t i = 0; name && kh_worker_roles[i]; i++)
        if (!strcmp(kh_worker_roles[i]->name, name))
            return kh_worker_roles[i];
    return NULL;
}

static kh_worker_method find_method(const kh_worker_role *role, const char *name)
{
    for (const kh_worker_method_entry *m = role->methods; m && m->name; m++)
        if (!strcmp(m->name, name))
            return m->fn;
    return NULL;
}

static int send_reply(int out, json_t *id, kh_status st, const kh_err *err, json_t *result,
                      const unsigned char *payload, size_t n, int exiting)
{
    json_t *head = json_object();
    json_object_set(head, "id", id ? id : json_null());
    /* Tell the supervisor this process is about to leave, so it does not
     * hand the next request to a dying worker. */
    if (exiting)
        json_object_set_new(head, "exiting", json_true());
    json_object_set_new(head, "ok", json_boolean(st == KH_OK));
    if (st == KH_OK) {
        json_object_set_new(head, "result", result ? result : json_object());
    } else {
        json_decref(result);
        size_t ml;
        char *msg = kh_utf8_sanitize(err->msg, strlen(err->msg), &ml);
        json_object_set_new(head, "error",
                            json_pack("{s:s, s:s}", "code", kh_status_name(st), "message",
                                      msg ? msg : "?"));
        free(msg);
    }
    kh_err werr;
    kh_status ws = kh_wire_write(out, head, payload, n, 0, &werr);
    json_decref(head);
    if (ws)
        fprintf(stderr, "khlua worker: cannot reply: %s\n", werr.msg);
    return ws == KH_OK;
}

int kh_worker_main(kh_engine *e, const kh_worker_role *role, int in_fd, int out_fd)
{
    /* Frames get a private copy of stdout; fd 1 becomes stderr. */
    int out = dup(out_fd);
    if (out < 0) {
        perror("khlua worker: dup");
        return 1;
    }
    if (out_fd == STDOUT_FILENO)
        dup2(STDERR_FILENO, STDOUT_FILENO);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, SIG_IGN); /* the coordinator decides when a worker stops */
    /* behind srun: slurmstepd passes output on at newlines (kh_wire_set_newline) */
    if (getenv("KHLUA_WIRE_NEWLINE"))
        kh_wire_set_newline(1);

    kh_worker w = {.engine = e, .role = role, .exit_after = -1, .started = kh_now()};
    kh_err err;
    kh_err_clear(&err);
    kh_timeline("worker %s init", role->name);
    kh_status ist = role->init ? role->init(&w, &err) : KH_OK;
    kh_timeline("worker %s ready", role->name);
    json_t *hello = json_pack("{s:{s:s, s:i, s:i, s:s}}", "hello", "role", role->name, "pid",
                              (int)getpid(), "protocol", KH_WIRE_VERSION, "khlua", KH_VERSION);
    {
        /* where it runs: the coordinator records it with every verdict (a
         * worker started through srun or ssh is on another host, in a job) */
        char host[256] = "";
        if (gethostname(host, sizeof host - 1) != 0)
            host[0] = '\0';
        const char *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
        char sj[64] = "";
        if (job)
            snprintf(sj, sizeof sj, "%s%s%s", job, step ? "." : "", step ? step : "");
        json_t *hj = json_object_get(hello, "hello");
        json_object_set_new(hj, "host", json_string(host));
        if (sj[0])
            json_object_set_new(hj, "slurm_job", json_string(sj));
    }
    if (ist)
        json_object_set_new(hello, "error",
                            json_pack("{s:s, s:s}", "code", kh_status_name(ist), "message",
                                      err.msg));
    kh_status hs = kh_wire_write(out, hello, NULL, 0, 0, &err);
    json_decref(hello);
    if (hs || ist) {
        if (role->fini)
            role->fini(&w);
        return 1;
    }

    int code = 0;
    for (;;) {
        kh_msg req;
        kh_status st = kh_wire_read(in_fd, &req, 0, &err);
        if (st == KH_EIO)
            break; /* the coordinator went away: nothing left to do */
        if (st) {
            fprintf(stderr, "khlua worker (%s): %s\n", role->name, err.msg);
            code = 1;
            break;
        }
        json_t *id = json_object_get(req.head, "id");
        const char *method = json_string_value(json_object_get(req.head, "method"));
        json_t *params = json_object_get(req.head, "params");
        json_t *result = NULL;
        unsigned char *rp = NULL;
        size_t rn = 0;
        kh_err_clear(&err);
        int shutdown = 0;
        if (!method) {
            st = kh_err_set(&err, KH_EINVAL, "request without a method");
        } else if (!strcmp(method, "ping")) {
            result = json_pack("{s:s, s:i, s:f, s:I}", "role", role->name, "pid", (int)getpid(),
                               "uptime_s", kh_now() - w.started, "served", (json_int_t)w.served);
            st = KH_OK;
        } else if (!strcmp(method, "shutdown")) {
            shutdown = 1;
            st = KH_OK;
        } else {
            kh_worker_method fn = find_method(role, method);
            if (!fn)
                st = kh_err_set(&err, KH_EINVAL, "role %s has no method '%s'", role->name,
                                method);
            else {
                kh_timeline("worker %s %s begin", role->name, method);
                st = fn(&w, params, req.payload, req.payload_len, &result, &rp, &rn, &err);
                kh_timeline("worker %s %s end", role->name, method);
            }
        }
        w.served++;
        int sent = send_reply(out, id, st, &err, result, rp, rn, shutdown || w.exit_after >= 0);
        free(rp);
        kh_msg_free(&req);
        if (!sent) {
            code = 1;
            break;
        }
        if (shutdown)
            break;
        if (w.exit_after >= 0) {
            code = w.exit_after;
            break;
        }
    }
    if (role->fini)
        role->fini(&w);
    close(out);
    return code;
}

kh_status kh_worker_slice(const json_t *j, size_t payload_len, size_t *off, size_t *len,
                          const char *what, kh_err *err)
{
    if (!json_is_array(j) || json_array_size(j) != 2 ||
        !json_is_integer(json_array_get(j, 0)) || !json_is_integer(json_array_get(j, 1)))
        return kh_err_set(err, KH_EINVAL, "%s: payload slice [offset, length] required", what);
    json_int_t o = json_integer_value(json_array_get(j, 0)),
               l = json_integer_value(json_array_get(j, 1));
    if (o < 0 || l < 0 || (size_t)o > payload_len || (size_t)l > payload_len - (size_t)o)
        return kh_err_set(err, KH_EINVAL, "%s: slice [%lld, %lld] outside the %zu-byte payload",
                          what, (long long)o, (long long)l, payload_len);
    *off = (size_t)o;
    *len = (size_t)l;
    return KH_OK;
}

kh_status kh_worker_gen_bytes(const json_t *gen, size_t payload_len, size_t nbytes, size_t *off,
                              size_t *len, const char *what, kh_err *err)
{
    char field[160];
    snprintf(field, sizeof field, "%s: gen.payload", what);
    kh_status st = kh_worker_slice(json_object_get(gen, "payload"), payload_len, off, len, field,
                                   err);
    if (st)
        return st;
    json_t *tj = json_object_get(gen, "tile");
    json_int_t tile = tj ? json_integer_value(tj) : 1;
    if ((tj && !json_is_integer(tj)) || tile < 1 || (size_t)tile > nbytes + 1)
        return kh_err_set(err, KH_EINVAL, "%s: gen.tile must be a positive integer", what);
    if (*len * (size_t)tile != nbytes)
        return kh_err_set(err, KH_EINVAL, "%s: %zu payload bytes x %lld for a %zu-byte tensor",
                          what, *len, (long long)tile, nbytes);
    return KH_OK;
}
