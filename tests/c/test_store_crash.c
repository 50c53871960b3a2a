/* test_store_crash.c: crash safety of the artifact store.  A child process
 * writes runs, rounds, model calls and blobs in a loop (starting from a
 * small map, so the map grows while it is killed) and reports each committed
 * transaction's ids through a pipe; the parent kills it with SIGKILL at a
 * random moment, then checks that `verify` is clean and that every id whose
 * commit had returned is in the store.  60 kills; every other child writes
 * in bulk mode (commits unsynced, killed before its end): a killed process
 * must lose nothing there either.  Also: a reader process
 * beside a writer that grows the map many times over. */
#include "kh_test.h"

#include "store/store.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KILLS 60

static uint64_t rng;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

struct step {
    unsigned char *blob;
    size_t len;
    char ids[4][KH_STORE_ID_MAX];
};

static kh_status write_step(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct step *s = arg;
    kh_hash h;
    kh_status st = kh_store_txn_put_blob(tx, s->blob, s->len, &h, err);
    if (st)
        return st;
    char hx[33];
    kh_hash_hex(&h, hx);
    json_t *run = json_pack("{s:s, s:s, s:s}", "type", "run", "policy", "crash", "status",
                            "running");
    st = kh_store_txn_put(tx, run, 0, s->ids[0], err);
    json_decref(run);
    for (int i = 1; i < 3 && !st; i++) {
        json_t *r = json_pack("{s:s, s:s, s:i, s:s}", "type", "round", "run", s->ids[0],
                              "index", i, "notes_blob", hx);
        st = kh_store_txn_put(tx, r, 0, s->ids[i], err);
        json_decref(r);
    }
    if (!st) {
        json_t *c = json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", "llm_call", "model", "m",
                              "run", s->ids[0], "response_blob", hx, "fingerprint", hx);
        st = kh_store_txn_put(tx, c, 0, s->ids[3], err);
        json_decref(c);
    }
    return st;
}

static void child(const char *path, int fd, uint64_t seed, int bulk) __attribute__((noreturn));
static void child(const char *path, int fd, uint64_t seed, int bulk)
{
    rng = seed;
    kh_store *s;
    kh_err err;
    kh_store_opts o = {.map_size = 512 * 1024};
    if (kh_store_open(path, &o, &s, &err)) {
        dprintf(fd, "ERR open: %s\n", err.msg);
        _exit(3);
    }
    if (bulk && kh_store_bulk_begin(s, &err)) {
        dprintf(fd, "ERR bulk: %s\n", err.msg);
        _exit(3);
    }
    unsigned char *buf = malloc(1 << 21);
    for (;;) {
        struct step st = {.blob = buf, .len = (size_t)(rnd() % ((rnd() % 8) ? 20000 : 1500000))};
        for (size_t i = 0; i < st.len; i += 8) {
            uint64_t v = rnd();
            memcpy(buf + i, &v, st.len - i < 8 ? st.len - i : 8);
        }
        if (kh_store_update(s, write_step, &st, &err)) {
            dprintf(fd, "ERR update: %s\n", err.msg);
            _exit(3);
        }
        /* the commit returned: report it in one atomic pipe write */
        char line[4 * KH_STORE_ID_MAX + 8];
        int n = snprintf(line, sizeof line, "%s %s %s %s\n", st.ids[0], st.ids[1], st.ids[2],
                         st.ids[3]);
        if (write(fd, line, (size_t)n) != n)
            _exit(4);
    }
}

struct idlist {
    char **v;
    size_t n, cap;
};

static void add_id(struct idlist *l, const char *id, size_t n)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 1024;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n] = strndup(id, n);
    l->n++;
}

static kh_status check_all(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct idlist *l = arg;
    for (size_t i = 0; i < l->n; i++) {
        json_t *r;
        kh_status st = kh_store_txn_get(tx, l->v[i], &r, err);
        if (st)
            return kh_err_prefix(err, "committed record %s lost: ", l->v[i]), st;
        json_decref(r);
    }
    return KH_OK;
}

static void test_kill_writer(void **state)
{
    (void)state;
    char *dir = kh_test_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/store", dir);
    struct idlist ids = {0};
    int mid_commit_kills = 0;
    for (int k = 0; k < KILLS; k++) {
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        uint64_t seed = rnd();
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(fds[0]);
            child(path, fds[1], seed, k % 2);
        }
        close(fds[1]);
        usleep((useconds_t)(2000 + rnd() % 80000));
        assert_int_equal(kill(pid, SIGKILL), 0);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        /* read what the child reported before it died */
        char *buf = NULL;
        size_t len = 0, cap = 0;
        for (;;) {
            if (len + 4096 > cap) {
                cap = cap ? cap * 2 : 65536;
                buf = realloc(buf, cap);
            }
            ssize_t r = read(fds[0], buf + len, 4096);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            len += (size_t)r;
        }
        close(fds[0]);
        if (len && !memcmp(buf, "ERR", 3))
            fail_msg("writer failed: %.*s", (int)len, buf);
        assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        size_t before = ids.n;
        for (size_t i = 0; i < len;) {
            char *nl = memchr(buf + i, '\n', len - i);
            if (!nl)
                break; /* never happens: lines are written atomically */
            for (char *p = buf + i; p < nl;) {
                char *sp = memchr(p, ' ', (size_t)(nl - p));
                char *end = sp ? sp : nl;
                add_id(&ids, p, (size_t)(end - p));
                p = end + 1;
            }
            i = (size_t)(nl - buf) + 1;
        }
        if (ids.n > before)
            mid_commit_kills++;
        free(buf);

        kh_store *s;
        kh_err err;
        kh_store_opts o = {.readonly = 1};
        kh_status st = kh_store_open(path, &o, &s, &err);
        if (st == KH_ENOTFOUND && ids.n == 0)
            continue; /* killed before its first commit */
        if (st)
            fail_msg("kill %d: reopen failed: %s", k, err.msg);
        json_t *rep;
        assert_int_equal(kh_store_verify(s, &rep, &err), KH_OK);
        if (json_integer_value(json_object_get(rep, "problems_total"))) {
            char *t = json_dumps(rep, JSON_INDENT(1));
            fail_msg("kill %d: verify: %s", k, t);
        }
        json_decref(rep);
        if (kh_store_view(s, check_all, &ids, &err))
            fail_msg("kill %d: %s", k, err.msg);
        kh_store_close(s);
    }
    print_message("%d kills, %zu committed records checked, %d kills after some commit\n",
                  KILLS, ids.n, mid_commit_kills);
    /* and the command a user would run agrees */
    kh_child_result res;
    kh_test_run_khlua(&res, 120, "store", "verify", "--store", path, NULL);
    if (!res.exited || res.exit_code != 0)
        fail_msg("khlua store verify after the kills: %s", res.out);
    kh_child_result_free(&res);
    assert_true(ids.n > 0);
    for (size_t i = 0; i < ids.n; i++)
        free(ids.v[i]);
    free(ids.v);
    kh_test_rmtree(dir);
    free(dir);
}

/* One process writes (growing the map from 256 KiB many times over), another
 * reads at the same time: the reader follows every growth (MDB_MAP_RESIZED)
 * and always sees a consistent store. */
static void grow_writer(const char *path, int fd) __attribute__((noreturn));
static void grow_writer(const char *path, int fd)
{
    kh_store *s;
    kh_err err;
    kh_store_opts o = {0};
    if (kh_store_open(path, &o, &s, &err)) {
        dprintf(fd, "ERR open: %s\n", err.msg);
        _exit(3);
    }
    unsigned char *buf = malloc(300000);
    for (int i = 0; i < 60; i++) {
        struct step st = {.blob = buf, .len = 200000 + (size_t)(rnd() % 100000)};
        for (size_t k = 0; k < st.len; k += 8) {
            uint64_t v = rnd();
            memcpy(buf + k, &v, st.len - k < 8 ? st.len - k : 8);
        }
        if (kh_store_update(s, write_step, &st, &err)) {
            dprintf(fd, "ERR update: %s\n", err.msg);
            _exit(3);
        }
    }
    kh_store_close(s);
    free(buf);
    _exit(0);
}

static void test_reader_during_growth(void **state)
{
    (void)state;
    char *dir = kh_test_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/store", dir);
    kh_store *s;
    kh_err err;
    kh_store_opts o = {.map_size = 256 * 1024};
    assert_int_equal(kh_store_open(path, &o, &s, &err), KH_OK); /* create it small */
    kh_store_close(s);
    o = (kh_store_opts){.readonly = 1};
    assert_int_equal(kh_store_open(path, &o, &s, &err), KH_OK);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        grow_writer(path, fds[1]);
    }
    close(fds[1]);
    size_t reads = 0, last = 0;
    int status = 0;
    for (;;) {
        json_t *arr;
        kh_store_filter q = {.type = "llm_call"};
        kh_status st = kh_store_query(s, &q, 0, &arr, &err);
        if (st)
            fail_msg("reader: %s", err.msg);
        /* the count only grows, and every blob named is readable */
        assert_true(json_array_size(arr) >= last);
        last = json_array_size(arr);
        if (last) {
            kh_hash h;
            const char *hx = json_string_value(
                json_object_get(json_array_get(arr, rnd() % last), "response_blob"));
            assert_int_equal(kh_hash_parse(hx, &h, &err), KH_OK);
            void *got;
            size_t n;
            assert_int_equal(kh_store_get_blob(s, &h, &got, &n, &err), KH_OK);
            kh_hash back;
            kh_hash_bytes(got, n, &back);
            assert_memory_equal(back.b, h.b, 16);
            free(got);
        }
        json_decref(arr);
        reads++;
        if (waitpid(pid, &status, WNOHANG) == pid)
            break;
    }
    char msg[512] = {0};
    ssize_t r = read(fds[0], msg, sizeof msg - 1);
    close(fds[0]);
    if (r > 0)
        fail_msg("writer: %s", msg);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    json_t *st;
    assert_int_equal(kh_store_stats(s, &st, &err), KH_OK);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(st, "records"), "run")),
                     60);
    assert_true(json_integer_value(json_object_get(st, "map_size")) >= 16 << 20);
    json_decref(st);
    print_message("%zu reads while the writer grew the map\n", reads);
    kh_store_close(s);
    kh_test_rmtree(dir);
    free(dir);
}

int main(void)
{
    rng = (uint64_t)time(NULL) * 6364136223846793005ULL + (uint64_t)getpid();
    printf("# seed %llu\n", (unsigned long long)rng);
    unsetenv("KHLUA_API_KEY");
    unsetenv("OPENAI_API_KEY");
    unsetenv("ANTHROPIC_API_KEY");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill_writer),
        cmocka_unit_test(test_reader_during_growth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
