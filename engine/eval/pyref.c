/* pyref.c: reference outputs from a definition's Python `run` (pyref.h).
 * Owns the host-side inputs (the same bits as the workers' generators), the
 * job file and safetensors exchange with scripts/khlua_pyref.py, finding the
 * interpreter, and reading the outputs back.  Caching them (memory, store)
 * is eval_ref.c's. */
#include "eval/pyref.h"

#include "core/proc.h"
#include "task/rng.h"
#include "task/safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

int kh_pyref_available(const kh_task_def *d)
{
    const char *src = json_string_value(json_object_get(d->json, "reference"));
    return src && strstr(src, "def run");
}

static kh_status tensor_shape(const kh_task_tensor *t, const int64_t *axes, int *nd,
                              int64_t *shape, kh_dtype *dt, kh_err *err)
{
    kh_status st = kh_dtype_parse(t->dtype, dt, err);
    if (st)
        return st;
    *nd = t->is_scalar ? 0 : (int)t->rank;
    if (*nd > KH_TENSOR_MAX_DIMS)
        return kh_err_set(err, KH_EUNSUPPORTED, "'%s': more than %d dimensions", t->name,
                          KH_TENSOR_MAX_DIMS);
    for (int i = 0; i < *nd; i++)
        shape[i] = axes[t->dims[i]];
    return KH_OK;
}

kh_status kh_pyref_dsa_pages(const kh_tensor *block_table, const kh_tensor *seq_lens,
                             int64_t num_pages, int64_t page_size, int64_t **pages, size_t *n,
                             kh_err *err)
{
    int64_t B = block_table->shape[0], M = block_table->shape[1];
    unsigned char *seen = calloc((size_t)num_pages + 1, 1);
    int64_t *list = malloc(((size_t)(B * M) + 1) * sizeof *list);
    *pages = NULL;
    *n = 0;
    if (!seen || !list) {
        free(seen);
        free(list);
        return kh_err_set(err, KH_ENOMEM, "out of memory for the k cache's page list");
    }
    for (int64_t b = 0; b < B; b++) {
        int64_t len = (int64_t)kh_tensor_get(seq_lens, (uint64_t)b);
        for (int64_t m = 0; m < M && m * page_size < len; m++) {
            int64_t pg = (int64_t)kh_tensor_get(block_table, (uint64_t)(b * M + m));
            if (pg >= 0 && pg < num_pages && !seen[pg]) {
                seen[pg] = 1;
                list[(*n)++] = pg;
            }
        }
    }
    free(seen);
    *pages = list;
    return KH_OK;
}

/* The DSA top-k k cache (ins[ki], allocated zeroed): only the pages some
 * batch row can reach (kh_pyref_dsa_pages), which is all a score
 * recomputed at a reachable index reads; the rest stay zero (fp8 0 with
 * scale 0: a zero score, never NaN).  A workload of 12k pages regenerated
 * whole took 13.5 s per seed on the build machine, for 32 reachable pages.
 * Without block_table / seq_lens: every page. */
static kh_status dsa_kcache_fill(kh_engine *e, const kh_task_def *d, kh_tensor **ins, size_t ki,
                                 uint64_t seed, kh_err *err)
{
    const kh_tensor *bt = NULL, *sl = NULL;
    for (size_t i = 0; i < d->ninputs; i++) {
        if (!strcmp(d->inputs[i].name, "block_table"))
            bt = ins[i];
        else if (!strcmp(d->inputs[i].name, "seq_lens"))
            sl = ins[i];
    }
    kh_tensor *k = ins[ki];
    if (!bt || !sl || bt->ndim != 2 || sl->ndim != 1 || bt->shape[0] != sl->shape[0] ||
        k->ndim != 4 || k->shape[1] < 1)
        return kh_rng_fill_dsa_kcache(e, k, seed, (uint32_t)ki, err);
    int64_t *pages;
    size_t n;
    kh_status st = kh_pyref_dsa_pages(bt, sl, k->shape[0], k->shape[1], &pages, &n, err);
    if (st)
        return st;
    st = kh_rng_fill_dsa_kcache_pages(e, k, seed, (uint32_t)ki, pages, n, err);
    free(pages);
    return st;
}

kh_status kh_pyref_inputs(kh_engine *e, const kh_task_def *d, const kh_task_workload *w,
                          const char *base, uint64_t seed, int dsa_kcache, uint64_t skip,
                          kh_tensor **ins, kh_err *err)
{
    json_t *wins = json_object_get(w->json, "inputs");
    kh_status st = KH_OK;
    for (size_t i = 0; i < d->ninputs; i++)
        ins[i] = NULL;
    for (size_t i = 0; i < d->ninputs && !st; i++) {
        const kh_task_tensor *t = &d->inputs[i];
        json_t *in = json_object_get(wins, t->name);
        const char *type = json_string_value(json_object_get(in, "type"));
        int nd;
        int64_t shape[KH_TENSOR_MAX_DIMS];
        kh_dtype dt;
        if ((st = tensor_shape(t, w->axes, &nd, shape, &dt, err)))
            break;
        if (type && !strcmp(type, "scalar"))
            continue; /* passed as the workload's own value */
        if (i < 64 && (skip >> i & 1))
            continue;
        if (!type || !strcmp(type, "random")) {
            /* stream = the input's position, seed = the trial's: what the
             * coordinator asks the workers for (eval_request.c input_gen) */
            if ((st = kh_tensor_new(&ins[i], dt, nd, shape, err)))
                break;
            if (dsa_kcache && !strcmp(t->name, "k_index_cache_fp8"))
                continue; /* after the others: it may need block_table */
            st = kh_rng_fill(e, ins[i], seed, (uint32_t)i, err);
        } else if (!strcmp(type, "safetensors")) {
            const char *path = json_string_value(json_object_get(in, "path"));
            const char *key = json_string_value(json_object_get(in, "tensor_key"));
            if (!path || !key) {
                st = kh_err_set(err, KH_EINVAL, "workload %s: input '%s': safetensors needs "
                                "path and tensor_key", w->uuid, t->name);
                break;
            }
            char full[4096];
            snprintf(full, sizeof full, "%s/%s", base ? base : ".", path);
            kh_st_file *f = NULL;
            if (!(st = kh_st_open(full, &f, err))) {
                st = kh_st_get_expect(f, key, t->name, dt, nd, shape, &ins[i], err);
                if (!st) { /* own the bytes: the file closes now */
                    kh_tensor *copy = NULL;
                    st = kh_tensor_clone(&copy, ins[i], err);
                    kh_tensor_free(ins[i]);
                    ins[i] = copy;
                }
                kh_st_close(f);
            }
        } else {
            st = kh_err_set(err, KH_EINVAL, "workload %s: input '%s': unknown type '%s'", w->uuid,
                            t->name, type);
        }
    }
    for (size_t i = 0; i < d->ninputs && !st && dsa_kcache; i++) {
        json_t *in = json_object_get(wins, d->inputs[i].name);
        const char *type = json_string_value(json_object_get(in, "type"));
        if (strcmp(d->inputs[i].name, "k_index_cache_fp8") || (type && strcmp(type, "random")) ||
            !ins[i])
            continue;
        st = dsa_kcache_fill(e, d, ins, i, seed, err);
    }
    if (st)
        for (size_t i = 0; i < d->ninputs; i++) {
            kh_tensor_free(ins[i]);
            ins[i] = NULL;
        }
    return st;
}

void kh_pyref_key(const kh_task_def *d, const kh_task_workload *w, uint64_t seed, int dsa_kcache,
                  char out[33])
{
    XXH3_state_t *hs = XXH3_createState();
    char *dj = json_dumps(d->json, JSON_COMPACT | JSON_SORT_KEYS);
    char *wj = json_dumps(w->json, JSON_COMPACT | JSON_SORT_KEYS);
    char tail[64];
    snprintf(tail, sizeof tail, "|%llu|%d", (unsigned long long)seed, dsa_kcache);
    XXH128_hash_t h = {0, 0};
    if (hs) {
        XXH3_128bits_reset(hs);
        XXH3_128bits_update(hs, "khlua-pyref-1|", 14);
        XXH3_128bits_update(hs, dj ? dj : "", dj ? strlen(dj) : 0);
        XXH3_128bits_update(hs, "|", 1);
        XXH3_128bits_update(hs, wj ? wj : "", wj ? strlen(wj) : 0);
        XXH3_128bits_update(hs, tail, strlen(tail));
        h = XXH3_128bits_digest(hs);
        XXH3_freeState(hs);
    }
    free(dj);
    free(wj);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, h);
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", c.digest[i]);
}

void kh_pyref_result_free(kh_pyref_result *res)
{
    if (!res)
        return;
    for (size_t i = 0; res->out && i < res->nseeds * res->noutputs; i++)
        kh_tensor_free(res->out[i]);
    free(res->out);
    memset(res, 0, sizeof *res);
}

static void rmtree_flat(const char *dir, size_t ncases)
{
    char p[4200];
    for (size_t s = 0; s < ncases; s++) {
        snprintf(p, sizeof p, "%s/in_%zu.safetensors", dir, s);
        unlink(p);
        snprintf(p, sizeof p, "%s/out_%zu.safetensors", dir, s);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/job.json", dir);
    unlink(p);
    rmdir(dir);
}

static json_t *tensor_spec(const kh_task_tensor *t, const int64_t *axes)
{
    json_t *shape = json_null();
    if (!t->is_scalar) {
        shape = json_array();
        for (size_t i = 0; i < t->rank; i++)
            json_array_append_new(shape, json_integer(axes[t->dims[i]]));
    }
    return json_pack("{s:s, s:s, s:o}", "name", t->name, "dtype", t->dtype, "shape", shape);
}

/* The last part of what the runner wrote: the useful end of a traceback. */
static const char *tail_of(const kh_child_result *r, size_t n)
{
    if (!r->out)
        return "";
    return r->out_len > n ? r->out + r->out_len - n : r->out;
}

/* The runner: $KHLUA_PYREF_SCRIPT, else scripts/khlua_pyref.py under
 * $KH_SOURCE_DIR, above the executable's folder (build/khlua, a carried
 * build-portable/khlua), or in the tree this was built from. */
static int find_runner(char *out, size_t n)
{
    const char *env = getenv("KHLUA_PYREF_SCRIPT");
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return access(out, R_OK) == 0;
    }
    const char *src = getenv("KH_SOURCE_DIR");
    if (src && *src) {
        snprintf(out, n, "%s/scripts/khlua_pyref.py", src);
        if (!access(out, R_OK))
            return 1;
    }
    char exe[4096];
    ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (l > 0) {
        exe[l] = 0;
        char *sl = strrchr(exe, '/');
        if (sl) {
            *sl = 0;
            snprintf(out, n, "%s/../scripts/khlua_pyref.py", exe);
            if (!access(out, R_OK))
                return 1;
        }
    }
    snprintf(out, n, "%s/scripts/khlua_pyref.py", KH_SOURCE_DIR);
    return access(out, R_OK) == 0;
}

/* The runner's outputs, one file per seed in dir, into res (its tensors
 * checked against the definition's dtypes and shapes). */
static kh_status read_outputs(const kh_task_def *d, const kh_task_workload *w, const char *dir,
                              const uint64_t *seeds, size_t n, kh_pyref_result *res, kh_err *err)
{
    kh_status st = KH_OK;
    res->nseeds = n;
    res->noutputs = d->noutputs;
    res->out = calloc(n * d->noutputs + 1, sizeof *res->out);
    if (!res->out)
        st = kh_err_set(err, KH_ENOMEM, "out of memory");
    for (size_t s = 0; s < n && !st; s++) {
        char op[4200];
        snprintf(op, sizeof op, "%s/out_%zu.safetensors", dir, s);
        kh_st_file *f = NULL;
        if ((st = kh_st_open(op, &f, err))) {
            kh_err_prefix(err, "the Python reference's outputs for seed %llu",
                          (unsigned long long)seeds[s]);
            break;
        }
        for (size_t k = 0; k < d->noutputs && !st; k++) {
            int nd;
            int64_t shape[KH_TENSOR_MAX_DIMS];
            kh_dtype dt;
            kh_tensor *t = NULL;
            if ((st = tensor_shape(&d->outputs[k], w->axes, &nd, shape, &dt, err)))
                break;
            if ((st = kh_st_get(f, d->outputs[k].name, &t, err))) {
                char why[sizeof err->msg];
                memcpy(why, err->msg, sizeof why);
                st = kh_err_set(err, KH_ECORRUPT, "the Python reference of '%s' wrote no output "
                                "'%s': %s", d->name, d->outputs[k].name, why);
                break;
            }
            int same = t->dtype == dt && t->ndim == nd;
            for (int i = 0; same && i < nd; i++)
                same = t->shape[i] == shape[i];
            if (!same) {
                char a[128], b[128];
                st = kh_err_set(err, KH_ECORRUPT, "the Python reference of '%s' returned output "
                                "'%s' as %s %s; the definition says %s %s", d->name,
                                d->outputs[k].name, kh_dtype_name(t->dtype),
                                kh_tensor_shape_str(t->ndim, t->shape, a, sizeof a),
                                kh_dtype_name(dt), kh_tensor_shape_str(nd, shape, b, sizeof b));
            } else {
                st = kh_tensor_clone(&res->out[s * d->noutputs + k], t, err);
            }
            kh_tensor_free(t);
        }
        kh_st_close(f);
    }
    return st;
}

kh_status kh_pyref_run(kh_engine *e, const kh_task_def *d, const kh_task_workload *w,
                       const char *base, const uint64_t *seeds, size_t n, int dsa_kcache,
                       double timeout_s, kh_pyref_result *res, kh_err *err)
{
    memset(res, 0, sizeof *res);
    if (!kh_pyref_available(d))
        return kh_err_set(err, KH_ENOTFOUND, "definition '%s' has no Python reference (no "
                          "\"reference\" defining run)", d->name);
    /* the interpreter and the runner */
    const char *py = NULL;
    char *pypath = kh_which_python(&py);
    if (!pypath)
        return kh_err_set(err, KH_ENOTFOUND,
                          "definition '%s' has only a Python reference; computing its outputs "
                          "needs python3 with torch; not found: %s (set KHLUA_PYTHON to an "
                          "interpreter that has torch)", d->name, py);
    snprintf(res->python, sizeof res->python, "%s", pypath);
    char script[4096];
    if (!find_runner(script, sizeof script)) {
        free(pypath);
        return kh_err_set(err, KH_ENOTFOUND, "the Python reference runner scripts/khlua_pyref.py "
                          "is missing (looked in $KHLUA_PYREF_SCRIPT, $KH_SOURCE_DIR, next to "
                          "the executable and in %s; set KHLUA_PYREF_SCRIPT)", KH_SOURCE_DIR);
    }
    const char *tmp = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/khlua-pyref-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        free(pypath);
        return kh_err_set(err, KH_EIO, "mkdtemp: %s", strerror(errno));
    }
    /* the job */
    json_t *job = json_pack("{s:i, s:O, s:[], s:[], s:{}, s:s, s:[]}", "version", 1, "definition",
                            d->json, "inputs", "outputs", "scalars", "device",
                            getenv("KHLUA_PYREF_DEVICE") && *getenv("KHLUA_PYREF_DEVICE")
                                ? getenv("KHLUA_PYREF_DEVICE") : "auto",
                            "cases");
    json_t *wins = json_object_get(w->json, "inputs");
    for (size_t i = 0; i < d->ninputs; i++) {
        const kh_task_tensor *t = &d->inputs[i];
        json_array_append_new(json_object_get(job, "inputs"), tensor_spec(t, w->axes));
        json_t *in = json_object_get(wins, t->name);
        const char *type = json_string_value(json_object_get(in, "type"));
        if (type && !strcmp(type, "scalar"))
            json_object_set(json_object_get(job, "scalars"), t->name,
                            json_object_get(in, "value"));
    }
    for (size_t k = 0; k < d->noutputs; k++)
        json_array_append_new(json_object_get(job, "outputs"), tensor_spec(&d->outputs[k], w->axes));
    kh_status st = KH_OK;
    kh_tensor *ins[256];
    const char *names[256];
    if (d->ninputs > 256)
        st = kh_err_set(err, KH_EUNSUPPORTED, "more than 256 inputs");
    for (size_t s = 0; s < n && !st; s++) {
        char ip[4200], op[4200];
        snprintf(ip, sizeof ip, "%s/in_%zu.safetensors", dir, s);
        snprintf(op, sizeof op, "%s/out_%zu.safetensors", dir, s);
        if ((st = kh_pyref_inputs(e, d, w, base, seeds[s], dsa_kcache, 0, ins, err)))
            break;
        size_t m = 0;
        const kh_tensor *tv[256];
        for (size_t i = 0; i < d->ninputs; i++)
            if (ins[i]) {
                names[m] = d->inputs[i].name;
                tv[m++] = ins[i];
            }
        st = kh_st_write(ip, m, names, tv, 0, NULL, NULL, err);
        for (size_t i = 0; i < d->ninputs; i++)
            kh_tensor_free(ins[i]);
        json_array_append_new(json_object_get(job, "cases"),
                              json_pack("{s:I, s:s, s:s}", "seed", (json_int_t)seeds[s],
                                        "inputs", ip, "outputs", op));
    }
    char jp[4200];
    snprintf(jp, sizeof jp, "%s/job.json", dir);
    if (!st && json_dump_file(job, jp, JSON_COMPACT))
        st = kh_err_set(err, KH_EIO, "cannot write %s", jp);
    json_decref(job);
    kh_child_result cr;
    memset(&cr, 0, sizeof cr);
    if (!st) {
        char *argv[] = {pypath, script, jp, NULL};
        st = kh_proc_run(argv, timeout_s, 256 * 1024, &cr, err);
    }
    free(pypath);
    if (!st) {
        res->seconds = cr.seconds;
        if (cr.timed_out)
            st = kh_err_set(err, KH_ETIMEOUT, "the Python reference of '%s' ran past %.0f s on "
                            "workload %s", d->name, timeout_s, w->uuid);
        else if (cr.exited && cr.exit_code == 3)
            st = kh_err_set(err, KH_ENOTFOUND, "definition '%s' has only a Python reference; "
                            "computing its outputs needs python3 with torch; not found: %s",
                            d->name, tail_of(&cr, 600));
        else if (!cr.exited || cr.exit_code != 0) {
            char how[128];
            kh_child_describe(&cr, how, sizeof how);
            st = kh_err_set(err, KH_ECHILD, "the Python reference of '%s' failed on workload %s "
                            "(%s %s: %s): %s", d->name, w->uuid, res->python, script, how,
                            tail_of(&cr, 700));
        }
    }
    kh_child_result_free(&cr);
    /* the outputs */
    if (!st)
        st = read_outputs(d, w, dir, seeds, n, res, err);
    rmtree_flat(dir, n);
    if (st)
        kh_pyref_result_free(res);
    return st;
}
