/* gpu_eval_so.c: the gpu worker's trusted shared objects (backend cuda_so: a
 * package's own nvcc-built solution such as a cuBLAS anchor, never a
 * candidate; the coordinator refuses those): loaded from the request's
 * payload, its entry's arguments parsed against the request's tensors, and
 * called on the GPU's stream (docs/evaluation.md).  gpu_eval.c calls it. */
#include "gpu/gpu_eval_int.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- trusted shared objects (cuda_so) ----------------------------------------
 * The entry is called as if it took 16 integer-class and 8 floating-point
 * arguments: under the x86-64 System V and AArch64 calling conventions the
 * callee's own parameters (at most 15 integers or pointers, then the stream,
 * and 8 floats or doubles) land where it expects them, in order per class;
 * extra integer slots are ignored.  A float travels in the low 32 bits of its
 * register.  The entry returns 0 on success. */
typedef int (*so_fn)(long, long, long, long, long, long, long, long, long, long, long, long,
                     long, long, long, long, double, double, double, double, double, double,
                     double, double);
enum { SA_PTR, SA_INT, SA_F32, SA_F64 };
#define SO_MAX_INT 15 /* the stream takes the next integer slot */
#define SO_MAX_FP 8

typedef struct so_entry {
    void *handle;
    so_fn fn;
    void (*fini)(void);
    char symbol[128];
    int nargs;
    struct {
        int kind;
        size_t tensor;
        long i;
        double f;
    } a[SO_MAX_INT + SO_MAX_FP];
} so_entry;

void gev_so_free(struct so_entry *x)
{
    if (!x)
        return;
    if (x->fini)
        x->fini(); /* e.g. cublasDestroy: the handle and its workspace go now */
    if (x->handle)
        dlclose(x->handle);
    free(x);
}

/* Write the object to a private file, dlopen it, unlink it; find the entry
 * and its optional <symbol>_fini.  Then parse the entry's arguments against
 * the request's tensors. */
kh_status gev_so_load(ev_run *r, const unsigned char *img, size_t n, const json_t *entry,
                         kh_err *err)
{
    const char *symbol = json_string_value(json_object_get(entry, "symbol"));
    const json_t *args = json_object_get(entry, "args");
    if (!symbol || !*symbol || strlen(symbol) > 100 || !json_is_array(args))
        return kh_err_set(err, KH_EINVAL, "entry: {symbol, args} is required with a shared "
                          "object artifact");
    so_entry *x = calloc(1, sizeof *x);
    if (!x)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    snprintf(x->symbol, sizeof x->symbol, "%s", symbol);
    int ni = 0, nf = 0;
    size_t i;
    json_t *a;
    json_array_foreach(args, i, a) {
        const char *key;
        json_t *val;
        int ok = json_object_size(a) == 1, k = -1;
        if (x->nargs >= SO_MAX_INT + SO_MAX_FP) {
            gev_so_free(x);
            return kh_err_set(err, KH_EUNSUPPORTED, "entry: more than %d arguments",
                              SO_MAX_INT + SO_MAX_FP);
        }
        json_object_foreach(a, key, val) {
            if (!strcmp(key, "tensor") && json_is_string(val)) {
                for (size_t t = 0; t < r->nt; t++)
                    if (!strcmp(r->ts[t].name, json_string_value(val))) {
                        x->a[x->nargs].tensor = t;
                        k = SA_PTR;
                    }
                if (k < 0) {
                    gev_so_free(x);
                    return kh_err_set(err, KH_EINVAL, "entry.args[%zu]: no tensor '%s'", i,
                                      json_string_value(val));
                }
            } else if ((!strcmp(key, "i32") || !strcmp(key, "i64")) && json_is_integer(val)) {
                k = SA_INT;
                x->a[x->nargs].i = (long)json_integer_value(val);
            } else if ((!strcmp(key, "u32") || !strcmp(key, "u64")) && json_is_integer(val)) {
                k = SA_INT;
                x->a[x->nargs].i = (long)(uint64_t)json_integer_value(val);
            } else if ((!strcmp(key, "f32") || !strcmp(key, "f64")) && json_is_number(val)) {
                k = !strcmp(key, "f32") ? SA_F32 : SA_F64;
                x->a[x->nargs].f = json_number_value(val);
            } else if (!strcmp(key, "scalar")) {
                gev_so_free(x);
                return kh_err_set(err, KH_EUNSUPPORTED, "entry.args[%zu]: a random scalar input "
                                  "is not supported by the gpu worker yet; give the workload a "
                                  "scalar value", i);
            } else {
                ok = 0;
            }
        }
        if (!ok || k < 0) {
            gev_so_free(x);
            return kh_err_set(err, KH_EINVAL, "entry.args[%zu]: expected one of "
                              "{tensor|i32|i64|u32|u64|f32|f64: value}", i);
        }
        if ((k == SA_F32 || k == SA_F64) ? ++nf > SO_MAX_FP : ++ni > SO_MAX_INT) {
            gev_so_free(x);
            return kh_err_set(err, KH_EUNSUPPORTED, "entry: at most %d integer or pointer and %d "
                              "floating-point arguments (the stream comes last)", SO_MAX_INT,
                              SO_MAX_FP);
        }
        x->a[x->nargs++].kind = k;
    }

    const char *tmp = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/khlua-gpu-XXXXXX.so", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemps(path, 3);
    if (fd < 0) {
        gev_so_free(x);
        return kh_err_set(err, KH_EIO, "cannot create a temporary file for the shared object: %s",
                          strerror(errno));
    }
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(fd, img + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            unlink(path);
            gev_so_free(x);
            return kh_err_set(err, KH_EIO, "cannot write the shared object: %s", strerror(e));
        }
        off += (size_t)w;
    }
    close(fd);
    x->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    unlink(path);
    if (!x->handle) {
        kh_status st = kh_err_set(err, KH_ECOMPILE, "cannot load the shared object: %s",
                                  dlerror());
        gev_so_free(x);
        return st;
    }
    dlerror();
    void *f = dlsym(x->handle, symbol);
    if (!f) {
        gev_so_free(x);
        return kh_err_set(err, KH_ECOMPILE, "entry symbol '%s' not found in the shared object",
                          symbol);
    }
    memcpy(&x->fn, &f, sizeof f); /* object pointer to function pointer (POSIX allows it) */
    char fini[160];
    snprintf(fini, sizeof fini, "%s_fini", symbol);
    void *g = dlsym(x->handle, fini);
    if (g)
        memcpy(&x->fini, &g, sizeof g);
    gev_so_free(r->so);
    r->so = x;
    return KH_OK;
}

/* One call of the entry against the buffers of a view, on the GPU's stream. */
kh_status gev_so_call(ev_run *r, const kh_launch_buf *bufs, kh_err *err)
{
    const so_entry *x = r->so;
    long iv[16] = {0};
    double fv[SO_MAX_FP] = {0};
    int ni = 0, nf = 0;
    for (int k = 0; k < x->nargs; k++) {
        switch (x->a[k].kind) {
        case SA_PTR: iv[ni++] = (long)bufs[x->a[k].tensor].buf.ptr; break;
        case SA_INT: iv[ni++] = x->a[k].i; break;
        case SA_F32: {
            float f = (float)x->a[k].f;
            uint64_t bits = 0;
            memcpy(&bits, &f, sizeof f);
            memcpy(&fv[nf++], &bits, sizeof bits);
            break;
        }
        default: fv[nf++] = x->a[k].f; break;
        }
    }
    iv[ni] = (long)(uintptr_t)kh_gpu_stream(r->ev->g);
    int rc = x->fn(iv[0], iv[1], iv[2], iv[3], iv[4], iv[5], iv[6], iv[7], iv[8], iv[9], iv[10],
                   iv[11], iv[12], iv[13], iv[14], iv[15], fv[0], fv[1], fv[2], fv[3], fv[4],
                   fv[5], fv[6], fv[7]);
    if (rc)
        return kh_err_set(err, KH_ECUDA, "the trusted entry '%s' returned %d", x->symbol, rc);
    return KH_OK;
}

