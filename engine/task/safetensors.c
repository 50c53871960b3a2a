/* safetensors.c: the safetensors reader and writer (safetensors.h).  Owns
 * the format's validation; the JSON syntax is jansson's.  Tensors handed out
 * borrow the caller's buffer or this file's private mapping. */
#include "task/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct st_entry {
    char *name;
    kh_dtype dtype;
    int ndim;
    int64_t shape[KH_TENSOR_MAX_DIMS];
    uint64_t begin, end;
} st_entry;

struct kh_st_file {
    const uint8_t *data; /* the byte buffer (after the header) */
    uint64_t data_len;
    st_entry *entries;
    size_t n;
    json_t *meta; /* __metadata__ object or NULL */
    void *map;    /* mmap of the whole file, when opened from a path */
    size_t map_len;
    char *what; /* "file 'x.safetensors'" or "buffer", for messages */
};

void kh_st_close(kh_st_file *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n; i++)
        free(f->entries[i].name);
    free(f->entries);
    json_decref(f->meta);
    if (f->map)
        munmap(f->map, f->map_len);
    free(f->what);
    free(f);
}

size_t kh_st_count(const kh_st_file *f) { return f->n; }
const char *kh_st_name(const kh_st_file *f, size_t i) { return i < f->n ? f->entries[i].name : NULL; }

const char *kh_st_metadata(const kh_st_file *f, const char *key)
{
    return f->meta ? json_string_value(json_object_get(f->meta, key)) : NULL;
}

const json_t *kh_st_metadata_all(const kh_st_file *f) { return f->meta; }

static kh_status bad(kh_st_file *f, kh_err *err, kh_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static kh_status bad(kh_st_file *f, kh_err *err, kh_status code, const char *fmt, ...)
{
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kh_err_set(err, code, "safetensors %s: %s", f->what, msg);
}

static int cmp_entry(const void *a, const void *b)
{
    const st_entry *x = *(st_entry *const *)a, *y = *(st_entry *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* A JSON integer >= 0 (jansson keeps integers as int64). */
static int get_uint(json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return 0;
    *out = (uint64_t)json_integer_value(v);
    return 1;
}

static kh_status parse_entry(kh_st_file *f, const char *name, json_t *v, st_entry *e,
                             uint64_t data_len, kh_err *err)
{
    if (!json_is_object(v))
        return bad(f, err, KH_EINVAL, "tensor '%s': entry is not an object", name);
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        if (strcmp(k, "dtype") && strcmp(k, "shape") && strcmp(k, "data_offsets"))
            return bad(f, err, KH_EINVAL, "tensor '%s': unknown field \"%s\"", name, k);
    }
    json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
           *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt))
        return bad(f, err, KH_EINVAL, "tensor '%s': dtype is missing or not a string", name);
    kh_err e2;
    kh_status st = kh_dtype_parse_st(json_string_value(dt), &e->dtype, &e2);
    if (st)
        return bad(f, err, st, "tensor '%s': %s", name, e2.msg);
    if (!json_is_array(sh))
        return bad(f, err, KH_EINVAL, "tensor '%s': shape is missing or not a list", name);
    if (json_array_size(sh) > KH_TENSOR_MAX_DIMS)
        return bad(f, err, KH_EINVAL, "tensor '%s': shape has %zu dimensions (at most %d)", name,
                   json_array_size(sh), KH_TENSOR_MAX_DIMS);
    e->ndim = (int)json_array_size(sh);
    for (int i = 0; i < e->ndim; i++) {
        uint64_t d;
        if (!get_uint(json_array_get(sh, (size_t)i), &d))
            return bad(f, err, KH_EINVAL,
                       "tensor '%s': shape[%d] is not a non-negative integer", name, i);
        e->shape[i] = (int64_t)d;
    }
    uint64_t numel;
    size_t nbytes;
    if (kh_tensor_shape_check(e->dtype, e->ndim, e->shape, &numel, &nbytes, &e2))
        return bad(f, err, KH_EINVAL, "tensor '%s': %s", name, e2.msg);
    if (e->dtype == KH_DTYPE_F4E2M1 && (numel & 1))
        return bad(f, err, KH_EINVAL,
                   "tensor '%s': F4 with an odd element count (%llu) does not fill whole bytes",
                   name, (unsigned long long)numel);
    if (!json_is_array(off) || json_array_size(off) != 2 ||
        !get_uint(json_array_get(off, 0), &e->begin) ||
        !get_uint(json_array_get(off, 1), &e->end))
        return bad(f, err, KH_EINVAL,
                   "tensor '%s': data_offsets must be [begin, end], two non-negative integers",
                   name);
    if (e->begin > e->end)
        return bad(f, err, KH_EINVAL, "tensor '%s': data_offsets [%llu, %llu] run backwards",
                   name, (unsigned long long)e->begin, (unsigned long long)e->end);
    if (e->end > data_len)
        return bad(f, err, KH_EINVAL,
                   "tensor '%s': data_offsets end %llu is past the %llu-byte data buffer", name,
                   (unsigned long long)e->end, (unsigned long long)data_len);
    if (e->end - e->begin != (uint64_t)nbytes) {
        char s[256];
        return bad(f, err, KH_EINVAL,
                   "tensor '%s': data_offsets span %llu bytes but %s %s needs %zu", name,
                   (unsigned long long)(e->end - e->begin), kh_dtype_st_name(e->dtype),
                   kh_tensor_shape_str(e->ndim, e->shape, s, sizeof s), nbytes);
    }
    e->name = kh_strdup(name);
    if (!e->name)
        return bad(f, err, KH_ENOMEM, "out of memory");
    return KH_OK;
}

static kh_status parse_into(kh_st_file *f, const uint8_t *buf, size_t len, kh_err *err)
{
    static const char lfs[] = "version https://git-lfs";
    if (len >= sizeof lfs - 1 && memcmp(buf, lfs, sizeof lfs - 1) == 0)
        return bad(f, err, KH_EINVAL,
                   "is a Git LFS pointer, not the data (fetch it: git lfs pull --include "
                   "<path>)");
    if (len < 8)
        return bad(f, err, KH_EINVAL, "%zu bytes: too short for the 8-byte header length", len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | buf[i];
    if (hlen < 2)
        return bad(f, err, KH_EINVAL, "header length %llu is too small for a JSON object",
                   (unsigned long long)hlen);
    if (hlen > KH_ST_MAX_HEADER)
        return bad(f, err, KH_EINVAL, "header length %llu exceeds the %u-byte limit",
                   (unsigned long long)hlen, KH_ST_MAX_HEADER);
    if (hlen > len - 8)
        return bad(f, err, KH_EINVAL,
                   "header length %llu runs past the end of the %zu-byte input",
                   (unsigned long long)hlen, len);
    const char *h = (const char *)buf + 8;
    if (h[0] != '{')
        return bad(f, err, KH_EINVAL, "header does not start with '{' (byte 8 is 0x%02x)",
                   (unsigned char)h[0]);
    json_error_t je;
    json_t *root = json_loadb(h, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return bad(f, err, KH_EINVAL, "header is not valid JSON: %s (at header byte %d)",
                   je.text, je.position);
    kh_status st = KH_OK;
    if (!json_is_object(root)) {
        st = bad(f, err, KH_EINVAL, "header is not a JSON object");
        goto out;
    }
    f->data = buf + 8 + hlen;
    f->data_len = len - 8 - hlen;
    size_t cap = json_object_size(root);
    f->entries = calloc(cap ? cap : 1, sizeof *f->entries);
    if (!f->entries) {
        st = bad(f, err, KH_ENOMEM, "out of memory for %zu entries", cap);
        goto out;
    }
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        if (strcmp(k, "__metadata__") == 0) {
            if (!json_is_object(v)) {
                st = bad(f, err, KH_EINVAL, "__metadata__ is not an object");
                goto out;
            }
            const char *mk;
            json_t *mv;
            json_object_foreach(v, mk, mv) {
                if (!json_is_string(mv)) {
                    st = bad(f, err, KH_EINVAL, "__metadata__ value of \"%s\" is not a string",
                             mk);
                    goto out;
                }
            }
            f->meta = json_incref(v);
            continue;
        }
        st = parse_entry(f, k, v, &f->entries[f->n], f->data_len, err);
        if (st)
            goto out;
        f->n++;
    }
    /* the sorted offsets must tile [0, data_len) exactly */
    st_entry **order = malloc((f->n ? f->n : 1) * sizeof *order);
    if (!order) {
        st = bad(f, err, KH_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < f->n; i++)
        order[i] = &f->entries[i];
    qsort(order, f->n, sizeof *order, cmp_entry);
    uint64_t at = 0;
    for (size_t i = 0; i < f->n && !st; i++) {
        if (order[i]->begin < at)
            st = bad(f, err, KH_EINVAL, "tensors '%s' and '%s' overlap (bytes %llu..%llu)",
                     order[i - 1]->name, order[i]->name, (unsigned long long)order[i]->begin,
                     (unsigned long long)at);
        else if (order[i]->begin > at)
            st = bad(f, err, KH_EINVAL,
                     "bytes %llu..%llu of the data buffer belong to no tensor (a hole before "
                     "'%s')", (unsigned long long)at, (unsigned long long)order[i]->begin,
                     order[i]->name);
        else
            at = order[i]->end;
    }
    free(order);
    if (!st && at != f->data_len)
        st = bad(f, err, KH_EINVAL,
                 "the data buffer has %llu bytes but the tensors cover only %llu "
                 "(trailing bytes belong to no tensor)",
                 (unsigned long long)f->data_len, (unsigned long long)at);
out:
    json_decref(root);
    return st;
}

static kh_st_file *new_file(const char *what)
{
    kh_st_file *f = calloc(1, sizeof *f);
    if (f && !(f->what = kh_strdup(what))) {
        free(f);
        f = NULL;
    }
    return f;
}

kh_status kh_st_parse(const void *buf, size_t len, kh_st_file **out, kh_err *err)
{
    *out = NULL;
    kh_st_file *f = new_file("buffer");
    if (!f)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    kh_status st = parse_into(f, buf, len, err);
    if (st) {
        kh_st_close(f);
        return st;
    }
    *out = f;
    return KH_OK;
}

kh_status kh_st_open(const char *path, kh_st_file **out, kh_err *err)
{
    *out = NULL;
    char what[600];
    snprintf(what, sizeof what, "file '%s'", path);
    kh_st_file *f = new_file(what);
    if (!f)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        kh_st_close(f);
        return kh_err_set(err, e == ENOENT ? KH_ENOTFOUND : KH_EIO,
                          "cannot open safetensors file '%s': %s", path, strerror(e));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        int e = errno;
        close(fd);
        kh_st_close(f);
        return kh_err_set(err, KH_EIO, "safetensors file '%s' is not a regular file%s%s", path,
                          e ? ": " : "", e ? strerror(e) : "");
    }
    size_t len = (size_t)sb.st_size;
    if (len > 0) {
        void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            kh_st_close(f);
            return kh_err_set(err, KH_EIO, "cannot map '%s': %s", path, strerror(e));
        }
        f->map = m;
        f->map_len = len;
    }
    close(fd);
    kh_status st = parse_into(f, f->map ? f->map : (const void *)"", len, err);
    if (st) {
        kh_st_close(f);
        return st;
    }
    *out = f;
    return KH_OK;
}

static const st_entry *find(const kh_st_file *f, const char *name, kh_err *err)
{
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->entries[i].name, name) == 0)
            return &f->entries[i];
    char keys[600] = "";
    size_t used = 0;
    for (size_t i = 0; i < f->n && used < sizeof keys - 8; i++)
        used += (size_t)snprintf(keys + used, sizeof keys - used, "%s'%s'", i ? ", " : "",
                                 f->entries[i].name);
    kh_err_set(err, KH_ENOTFOUND, "safetensors %s has no tensor '%s' (it has %s)", f->what, name,
               f->n ? keys : "none");
    return NULL;
}

kh_status kh_st_get(const kh_st_file *f, const char *name, kh_tensor **out, kh_err *err)
{
    *out = NULL;
    const st_entry *e = find(f, name, err);
    if (!e)
        return KH_ENOTFOUND;
    return kh_tensor_borrow(out, e->dtype, e->ndim, e->shape, (void *)(f->data + e->begin),
                            (size_t)(e->end - e->begin), err);
}

kh_status kh_st_get_expect(const kh_st_file *f, const char *name, const char *label,
                           kh_dtype dtype, int ndim, const int64_t *shape, kh_tensor **out,
                           kh_err *err)
{
    kh_status st = kh_st_get(f, name, out, err);
    if (st)
        return st;
    kh_tensor *t = *out;
    int same = t->dtype == dtype && t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = t->shape[i] == shape[i];
    if (same)
        return KH_OK;
    char want[256], got[256];
    kh_tensor_shape_str(ndim, shape, want, sizeof want);
    kh_tensor_shape_str(t->ndim, t->shape, got, sizeof got);
    st = kh_err_set(err, KH_EINVAL,
                    "input '%s': expected %s %s, but tensor '%s' in %s is %s %s",
                    label ? label : name, kh_dtype_name(dtype), want, name, f->what,
                    kh_dtype_name(t->dtype), got);
    kh_tensor_free(t);
    *out = NULL;
    return st;
}

kh_status kh_st_get_copy(const kh_st_file *f, const char *name, kh_tensor **out, kh_err *err)
{
    *out = NULL;
    const st_entry *e = find(f, name, err);
    if (!e)
        return KH_ENOTFOUND;
    kh_status st = kh_tensor_new(out, e->dtype, e->ndim, e->shape, err);
    if (st == KH_OK && (*out)->nbytes)
        memcpy((*out)->data, f->data + e->begin, (*out)->nbytes);
    return st;
}

static kh_status write_all(FILE *fp, const void *p, size_t n, const char *tmp, kh_err *err)
{
    if (n && fwrite(p, 1, n, fp) != n)
        return kh_err_set(err, KH_EIO, "writing '%s': %s", tmp, strerror(errno));
    return KH_OK;
}

kh_status kh_st_write(const char *path, size_t n, const char *const *names,
                      const kh_tensor *const *tensors, size_t n_meta,
                      const char *const *meta_keys, const char *const *meta_values,
                      kh_err *err)
{
    json_t *root = json_object();
    if (!root)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    kh_status st = KH_OK;
    char *text = NULL;
    if (n_meta) {
        json_t *m = json_object();
        if (!m || json_object_set_new(root, "__metadata__", m)) {
            st = kh_err_set(err, KH_ENOMEM, "out of memory");
            goto out;
        }
        for (size_t i = 0; i < n_meta; i++) {
            json_t *s = json_string(meta_values[i]);
            if (!s || json_object_set_new(m, meta_keys[i], s)) {
                st = kh_err_set(err, KH_EINVAL,
                                "metadata \"%s\": key and value must be valid UTF-8",
                                meta_keys[i]);
                goto out;
            }
        }
    }
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const kh_tensor *t = tensors[i];
        if (!names[i] || !names[i][0] || strcmp(names[i], "__metadata__") == 0) {
            st = kh_err_set(err, KH_EINVAL, "tensor %zu: name must be non-empty and not "
                            "__metadata__", i);
            goto out;
        }
        if (json_object_get(root, names[i])) {
            st = kh_err_set(err, KH_EINVAL, "tensor name '%s' appears twice", names[i]);
            goto out;
        }
        if (t->dtype == KH_DTYPE_F4E2M1 && (t->numel & 1)) {
            st = kh_err_set(err, KH_EINVAL,
                            "tensor '%s': float4_e2m1 with an odd element count cannot be "
                            "stored (safetensors needs whole bytes)", names[i]);
            goto out;
        }
        json_t *shape = json_array(), *e = json_object();
        int bad = !shape || !e;
        for (int d = 0; !bad && d < t->ndim; d++)
            bad = json_array_append_new(shape, json_integer(t->shape[d])) != 0;
        if (bad) {
            json_decref(shape);
            json_decref(e);
            st = kh_err_set(err, KH_ENOMEM, "out of memory");
            goto out;
        }
        /* the _new setters take the value's reference even when they fail */
        bad = json_object_set_new(e, "dtype", json_string(kh_dtype_st_name(t->dtype))) ||
              json_object_set_new(e, "shape", shape) ||
              json_object_set_new(e, "data_offsets",
                                  json_pack("[II]", (json_int_t)at, (json_int_t)(at + t->nbytes)));
        if (bad) {
            json_decref(e);
            st = kh_err_set(err, KH_ENOMEM, "out of memory");
            goto out;
        }
        if (json_object_set_new(root, names[i], e)) {
            st = kh_err_set(err, KH_EINVAL, "tensor name '%s' is not valid UTF-8", names[i]);
            goto out;
        }
        at += t->nbytes;
    }
    text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!text) {
        st = kh_err_set(err, KH_ENOMEM, "out of memory encoding the header");
        goto out;
    }
    size_t hl = strlen(text), padded = (hl + 8 + 7) / 8 * 8 - 8;
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        st = kh_err_set(err, KH_EINVAL, "path too long: %s", path);
        goto out;
    }
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        st = kh_err_set(err, errno == ENOENT ? KH_ENOTFOUND : KH_EIO, "cannot create '%s': %s",
                        tmp, strerror(errno));
        goto out;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    static const char spaces[8] = "        ";
    st = write_all(fp, len8, 8, tmp, err);
    if (!st)
        st = write_all(fp, text, hl, tmp, err);
    if (!st)
        st = write_all(fp, spaces, padded - hl, tmp, err);
    for (size_t i = 0; !st && i < n; i++)
        st = write_all(fp, tensors[i]->data, tensors[i]->nbytes, tmp, err);
    if (!st && fflush(fp) != 0)
        st = kh_err_set(err, KH_EIO, "writing '%s': %s", tmp, strerror(errno));
    if (!st && fsync(fileno(fp)) != 0)
        st = kh_err_set(err, KH_EIO, "syncing '%s': %s", tmp, strerror(errno));
    if (fclose(fp) != 0 && !st)
        st = kh_err_set(err, KH_EIO, "closing '%s': %s", tmp, strerror(errno));
    if (!st && rename(tmp, path) != 0)
        st = kh_err_set(err, KH_EIO, "renaming '%s' to '%s': %s", tmp, path, strerror(errno));
    if (st)
        unlink(tmp);
out:
    free(text);
    json_decref(root);
    return st;
}
