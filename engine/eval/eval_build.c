/* eval_build.c: artifacts (eval_int.h), built once per content key and
 * kept by the evaluator.  Owns the key (backend, trust, every source path
 * and content), a candidate's host build (staged and checked by
 * kh_hostcc_build_candidate), a trusted shared object (cc, or nvcc for
 * cuda_so), and a cubin through the compile core (NVRTC, isolated for an
 * untrusted candidate).  A compile failure is an artifact with its
 * scrubbed log, not an error: the verdict says COMPILE_ERROR. */
#include "eval/eval_int.h"

#include "compile/compile.h"
#include "compile/hostcc.h"
#include "core/scrub.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

static kh_status write_whole(const char *path, const void *d, size_t n, kh_err *err)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return kh_err_set(err, KH_EIO, "cannot write %s: %s", path, strerror(errno));
    size_t w = fwrite(d, 1, n, f);
    if (fclose(f) || w != n)
        return kh_err_set(err, KH_EIO, "cannot write %s", path);
    return KH_OK;
}

kh_status eval_read_whole(const char *path, unsigned char **d, size_t *n, kh_err *err)
{
    char *b;
    if (kh_read_file(path, &b, n))
        return kh_err_set(err, errno == ENOMEM ? KH_ENOMEM : KH_EIO, "cannot read %s: %s", path,
                          strerror(errno));
    *d = (unsigned char *)b;
    return KH_OK;
}

/* The artifact's key: backend, trust, then every (path, content). */
static kh_status build_key(const kh_task_solution *sol, int trusted, char key[33], kh_err *err)
{
    json_t *srcs = json_object_get(sol->json, "sources");
    int host = eval_is_host(sol), so = eval_is_so(sol);
    const kh_task_manifest *man = sol->manifest;
    XXH3_state_t *hs = XXH3_createState();
    if (!hs)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    XXH3_128bits_reset(hs);
    const char *kind = host ? "so" : so ? "cuda_so" : "cubin";
    XXH3_128bits_update(hs, kind, strlen(kind) + 1);
    for (size_t l = 0; so && l < man->nlink; l++) /* -lcublas or not: another binary */
        XXH3_128bits_update(hs, man->link[l], strlen(man->link[l]) + 1);
    XXH3_128bits_update(hs, trusted ? "T" : "U", 1);
    size_t i;
    json_t *s;
    json_array_foreach(srcs, i, s) {
        const char *p = json_string_value(json_object_get(s, "path"));
        const char *c = json_string_value(json_object_get(s, "content"));
        XXH3_128bits_update(hs, p ? p : "", (p ? strlen(p) : 0) + 1);
        XXH3_128bits_update(hs, c ? c : "", (c ? strlen(c) : 0) + 1);
    }
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(hs));
    XXH3_freeState(hs);
    for (int k = 0; k < 16; k++)
        snprintf(key + 2 * k, 3, "%02x", canon.digest[k]);
    return KH_OK;
}

/* host: cc; cuda_so: the trusted nvcc path (a package's own solution,
 * checked in kh_eval_run), linked with the manifest's libraries */
static kh_status build_so(kh_eval *ev, const kh_task_solution *sol, int trusted, art *a,
                          kh_err *err)
{
    json_t *srcs = json_object_get(sol->json, "sources");
    int host = a->host, so = a->so;
    const kh_task_manifest *man = sol->manifest;
    kh_status st = KH_OK;
    size_t i;
    json_t *s;
    const char *tmp = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/khlua-build-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir))
        return kh_err_set(err, KH_EIO, "mkdtemp: %s", strerror(errno));
    char path[4600], sopath[4600], entry[4600] = "";
    /* a candidate's files, which its compile may read (ccguard.h) */
    size_t nsrc = json_array_size(srcs), nown = 0;
    char **own = calloc(nsrc + 1, sizeof *own);
    if (!own)
        st = kh_err_set(err, KH_ENOMEM, "out of memory");
    json_array_foreach(srcs, i, s) {
        if (st)
            break;
        const char *p = json_string_value(json_object_get(s, "path"));
        const char *c = json_string_value(json_object_get(s, "content"));
        if (!p || !c || strchr(p, '/') || p[0] == '.') {
            st = kh_err_set(err, KH_EUNSUPPORTED,
                            "host sources must be plain file names (got '%s')", p ? p : "?");
            break;
        }
        snprintf(path, sizeof path, "%s/%s", dir, p);
        if ((st = write_whole(path, c, strlen(c), err)))
            break;
        if (!(own[nown++] = eval_dupstr(path))) {
            st = kh_err_set(err, KH_ENOMEM, "out of memory");
            break;
        }
        if (sol->entry_file && !strcmp(p, sol->entry_file))
            snprintf(entry, sizeof entry, "%s", path);
    }
    if (!st && !entry[0])
        st = kh_err_set(err, KH_EINVAL, "entry file '%s' is not among the sources",
                        sol->entry_file ? sol->entry_file : "?");
    snprintf(sopath, sizeof sopath, "%s/candidate.so", dir);
    if (!st) {
        kh_hostcc_result res;
        char inc[4200], libs[16][140], rpath[4200];
        snprintf(inc, sizeof inc, "-I%s", dir);
        const char *flags[19] = {inc, "-lm"};
        size_t nf = 2;
        for (size_t l = 0; so && l < man->nlink && l < 16; l++) {
            snprintf(libs[l], sizeof libs[l], "-l%s", man->link[l]);
            flags[nf++] = libs[l];
        }
        if (so && man->nlink) {
            /* the toolkit's libraries (libcublas) found at load time without
             * LD_LIBRARY_PATH in the gpu worker */
            const char *home = kh_engine_cuda_home(ev->e);
            snprintf(rpath, sizeof rpath, "-Xlinker=-rpath,%s/lib64",
                     home && *home ? home : "/usr/local/cuda");
            flags[nf++] = rpath;
        }
        /* a candidate's C: staged and checked, its own files and system
         * headers only (-I of its directory is not needed: "x.h" is
         * looked for next to the file that includes it) */
        kh_status bs =
            host && !trusted
                ? kh_hostcc_build_candidate(ev->e, entry, sopath, (const char *const *)own,
                                            flags + 1, 1, 120, &res, err)
                : kh_hostcc_build(ev->e, so ? KH_HOSTCC_NVCC_SO : KH_HOSTCC_CC_SO, entry,
                                  sopath, NULL, flags, nf, 120, &res, err);
        if (bs == KH_OK) {
            st = eval_read_whole(sopath, &a->bytes, &a->len, err);
            a->ok = st == KH_OK;
        } else if (bs == KH_ECOMPILE || bs == KH_ETIMEOUT) {
            const char *text = res.log && *res.log ? res.log : err->msg;
            a->log = kh_scrub_text(text, strlen(text), KH_SCRUB_MAX, KH_SCRUB_HEAD);
            st = a->log ? KH_OK : kh_err_set(err, KH_ENOMEM, "out of memory");
        } else {
            st = bs;
        }
        if (bs != KH_EINVAL && bs != KH_ENOMEM)
            kh_hostcc_result_free(&res);
    }
    json_array_foreach(srcs, i, s) {
        const char *p = json_string_value(json_object_get(s, "path"));
        if (p && !strchr(p, '/')) {
            snprintf(path, sizeof path, "%s/%s", dir, p);
            unlink(path);
        }
    }
    unlink(sopath);
    rmdir(dir);
    for (size_t k = 0; own && k < nown; k++)
        free(own[k]);
    free(own);
    return st;
}

kh_status eval_compile_service(kh_eval *ev, kh_err *err)
{
    if (!ev->cs) {
        /* local servers of the workers' executable (a test binary's is not khlua) */
        kh_compile_service_opts so = {.exe = ev->exe};
        if (!(ev->cs = kh_compile_service_new(ev->e, &so, err)))
            return err->code;
    }
    return KH_OK;
}

/* The entry file is the translation unit; the other sources are its
 * headers, #include-able by their paths. */
static kh_status build_cubin(kh_eval *ev, kh_store *cache, const kh_task_solution *sol,
                             int trusted, art *a, kh_err *err)
{
    const char *src = NULL;
    size_t src_len = 0, nh = 0;
    kh_source *hdrs = NULL;
    kh_status st = kh_task_cuda_sources(sol, &src, &src_len, &hdrs, &nh, err);
    if (!st)
        st = eval_compile_service(ev, err);
    if (!st) {
        const kh_task_manifest *m = sol->manifest;
        const char *kernels[64];
        size_t nk = 0;
        for (size_t l = 0; l < m->nlaunches && nk < 64; l++)
            kernels[nk++] = m->launches[l].kernel;
        kh_compile_req rq = {.source = src, .source_len = src_len,
                             .name = sol->entry_file, .headers = hdrs, .n_headers = nh,
                             .kernels = kernels, .n_kernels = nk,
                             .trusted = trusted};
        kh_artifact *ar = NULL;
        kh_status bs = kh_compile_service_build(ev->cs, cache, &rq, &ar, err);
        if (bs == KH_OK) {
            a->bytes = malloc(ar->cubin_len);
            if (!a->bytes)
                st = kh_err_set(err, KH_ENOMEM, "out of memory");
            else {
                memcpy(a->bytes, ar->cubin, ar->cubin_len);
                a->len = ar->cubin_len;
                a->ok = 1;
            }
        } else if (bs == KH_ECOMPILE || bs == KH_ETIMEOUT) {
            const char *text = ar && ar->log ? ar->log : err->msg;
            a->log = kh_scrub_text(text, strlen(text), KH_SCRUB_MAX, KH_SCRUB_HEAD);
            if (!a->log)
                st = kh_err_set(err, KH_ENOMEM, "out of memory");
        } else {
            st = bs;
        }
        kh_artifact_free(ar);
    }
    free(hdrs);
    return st;
}

kh_status eval_build(kh_eval *ev, kh_store *cache, const kh_task_solution *sol, int trusted,
                     art **out, kh_err *err)
{
    char key[33];
    kh_status st = build_key(sol, trusted, key, err);
    if (st)
        return st;
    for (art *a = ev->arts; a; a = a->next)
        if (!strcmp(a->key, key)) {
            *out = a;
            return KH_OK;
        }
    art *a = calloc(1, sizeof *a);
    if (!a)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    memcpy(a->key, key, 33);
    a->host = eval_is_host(sol);
    a->so = eval_is_so(sol);
    st = a->host || a->so ? build_so(ev, sol, trusted, a, err)
                          : build_cubin(ev, cache, sol, trusted, a, err);
    if (st) {
        free(a->bytes);
        free(a->log);
        free(a);
        return st;
    }
    if (a->ok)
        eval_hex128(a->bytes, a->len, a->hash);
    a->next = ev->arts;
    ev->arts = a;
    *out = a;
    return KH_OK;
}

kh_status eval_build_reference(wctx *c, art **out, kh_err *err)
{
    const kh_task_solution *ref = c->ref;
    kh_status st = eval_build(c->ev, eval_cache_store(c), ref, 1, out, err);
    if (st)
        return st;
    if (!(*out)->ok)
        return kh_err_set(err, KH_ECOMPILE, "the trusted reference '%s' does not build: %.300s",
                          ref->name, (*out)->log ? (*out)->log : "");
    return KH_OK;
}
