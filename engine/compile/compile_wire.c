/* compile_wire.c: the wire form of compile requests and artifacts (the last
 * section of compile_service.h), shared by the compile service and the
 * compile role (role_compile.c): a request as JSON plus its texts as one
 * payload, and an artifact rebuilt from kh_artifact_to_json's object and
 * its cubin.  Sending them is the service's and the worker protocol's. */
#include "compile/compile_service.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *str_array(const char *const *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_string(v[i] ? v[i] : ""))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

json_t *kh_compile_req_to_json(const kh_compile_req *r)
{
    json_t *o = str_array(r->options, r->n_options), *k = str_array(r->kernels, r->n_kernels);
    json_t *h = json_array();
    for (size_t i = 0; h && i < r->n_headers; i++)
        if (json_array_append_new(h, json_pack("{s:s, s:I}", "name",
                                               r->headers[i].name ? r->headers[i].name : "",
                                               "bytes", (json_int_t)r->headers[i].len))) {
            json_decref(h);
            h = NULL;
        }
    if (!o || !k || !h) {
        json_decref(o);
        json_decref(k);
        json_decref(h);
        return NULL;
    }
    return json_pack("{s:s, s:s?, s:o, s:o, s:o, s:f, s:b, s:b, s:I, s:b, s:b}", "name",
                     r->name ? r->name : "candidate.cu", "arch", r->arch, "options", o,
                     "kernels", k, "headers", h, "deadline", r->deadline_s, "trusted",
                     r->trusted, "allow_device_launch", r->allow_device_launch,
                     "max_source_bytes", (json_int_t)r->max_source_bytes, "no_pch", r->no_pch,
                     "no_cache", r->no_cache);
}

kh_status kh_compile_req_payload(const kh_compile_req *r, void **buf, size_t *len, kh_err *err)
{
    size_t n = r->source_len;
    for (size_t i = 0; i < r->n_headers; i++)
        n += r->headers[i].len;
    char *b = malloc(n ? n : 1);
    if (!b)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    memcpy(b, r->source, r->source_len);
    size_t at = r->source_len;
    for (size_t i = 0; i < r->n_headers; i++) {
        if (r->headers[i].len)
            memcpy(b + at, r->headers[i].text, r->headers[i].len);
        at += r->headers[i].len;
    }
    *buf = b;
    *len = n;
    return KH_OK;
}

static kh_status strings_from(const json_t *a, const char *field, const char **v, size_t *n,
                              kh_err *err)
{
    *n = 0;
    if (!a)
        return KH_OK;
    if (!json_is_array(a))
        return kh_err_set(err, KH_EINVAL, "compile request: '%s' must be an array", field);
    for (size_t i = 0; i < json_array_size(a); i++) {
        const char *x = json_string_value(json_array_get(a, i));
        if (!x)
            return kh_err_set(err, KH_EINVAL, "compile request: '%s'[%zu] must be a string",
                              field, i + 1);
        v[(*n)++] = x;
    }
    return KH_OK;
}

/* The headers of params ([{name, bytes}]) cut from the payload after the
 * source, into hv (room for json_array_size(h)); the source is what is left
 * in front of them. */
static kh_status headers_from(const json_t *h, const char *payload, size_t n, kh_source *hv,
                              kh_compile_req *req, kh_err *err)
{
    if (h && !json_is_array(h))
        return kh_err_set(err, KH_EINVAL, "compile request: 'headers' must be an array");
    size_t nh = json_array_size(h), total = 0;
    for (size_t i = 0; i < nh; i++) {
        json_t *x = json_array_get(h, i);
        const char *name = json_string_value(json_object_get(x, "name"));
        json_t *b = json_object_get(x, "bytes");
        if (!name || !json_is_integer(b) || json_integer_value(b) < 0 ||
            (uint64_t)json_integer_value(b) > n - total)
            return kh_err_set(err, KH_EINVAL, "compile request: headers[%zu] needs a name and "
                              "its size in bytes, within the payload", i + 1);
        hv[i] = (kh_source){.name = name, .len = (size_t)json_integer_value(b)};
        total += hv[i].len;
    }
    req->source = payload ? payload : "";
    req->source_len = n - total;
    size_t at = req->source_len;
    for (size_t i = 0; i < nh; i++) {
        hv[i].text = req->source + at;
        at += hv[i].len;
    }
    req->headers = nh ? hv : NULL;
    req->n_headers = nh;
    return KH_OK;
}

kh_status kh_compile_req_from_json(const json_t *p, const void *payload, size_t n,
                                   kh_compile_req *req, void **scratch, kh_err *err)
{
    memset(req, 0, sizeof *req);
    *scratch = NULL;
    if (!json_is_object(p))
        return kh_err_set(err, KH_EINVAL, "compile request: params must be an object");
    json_t *o = json_object_get(p, "options"), *k = json_object_get(p, "kernels");
    json_t *h = json_object_get(p, "headers");
    size_t no = json_array_size(o), nk = json_array_size(k), nh = json_array_size(h);
    if (no > 256 || nk > 256 || nh > KH_COMPILE_MAX_HEADERS)
        return kh_err_set(err, KH_EINVAL, "compile request: too many options, kernels or "
                          "headers");
    /* one allocation: the string arrays, then the headers */
    size_t vbytes = (no + nk + 1) * sizeof(const char *);
    vbytes = (vbytes + _Alignof(kh_source) - 1) / _Alignof(kh_source) * _Alignof(kh_source);
    char *mem = calloc(1, vbytes + (nh ? nh : 1) * sizeof(kh_source));
    if (!mem)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    *scratch = mem;
    const char **v = (const char **)(void *)mem;
    kh_status st = strings_from(o, "options", v, &req->n_options, err);
    if (!st)
        st = strings_from(k, "kernels", v + no, &req->n_kernels, err);
    if (!st)
        st = headers_from(h, payload, n, (kh_source *)(void *)(mem + vbytes), req, err);
    if (st)
        return st;
    req->options = v;
    req->kernels = v + no;
    req->name = json_string_value(json_object_get(p, "name"));
    req->arch = json_string_value(json_object_get(p, "arch"));
    req->deadline_s = json_number_value(json_object_get(p, "deadline"));
    req->trusted = json_is_true(json_object_get(p, "trusted"));
    req->allow_device_launch = json_is_true(json_object_get(p, "allow_device_launch"));
    json_int_t mb = json_integer_value(json_object_get(p, "max_source_bytes"));
    if (mb < 0 || mb > (json_int_t)KH_COMPILE_MAX_SOURCE || req->deadline_s < 0)
        return kh_err_set(err, KH_EINVAL, "compile request: bad max_source_bytes or deadline");
    req->max_source_bytes = (size_t)mb;
    req->no_pch = json_is_true(json_object_get(p, "no_pch"));
    req->no_cache = json_is_true(json_object_get(p, "no_cache"));
    return KH_OK;
}

static int unhex(const char *h, unsigned char key[16])
{
    if (!h || strlen(h) != 32)
        return -1;
    for (int i = 0; i < 32; i++) {
        char c = h[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0)
            return -1;
        key[i / 2] = (unsigned char)(i % 2 ? key[i / 2] | v : v << 4);
    }
    return 0;
}

/* kh_artifact.pch is a static string: map the word back onto ours. */
static const char *pch_static(const char *w)
{
    static const char *const words[] = {"off", "created", "reused or not needed",
                                        "heap exhausted (grown for next time)",
                                        "creation failed"};
    for (size_t i = 0; w && i < KH_ARRAY_LEN(words); i++)
        if (!strcmp(w, words[i]))
            return words[i];
    return "unknown";
}

kh_status kh_artifact_from_json(const json_t *j, const void *cubin, size_t len,
                                kh_artifact **out, kh_err *err)
{
    *out = NULL;
    if (!json_is_object(j))
        return kh_err_set(err, KH_EPARSE, "artifact: not a JSON object");
    kh_artifact *a = calloc(1, sizeof *a);
    if (!a)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    const char *hash = json_string_value(json_object_get(j, "hash"));
    const char *arch = json_string_value(json_object_get(j, "arch"));
    const char *nv = json_string_value(json_object_get(j, "nvrtc"));
    json_t *log = json_object_get(j, "log"), *opts = json_object_get(j, "options");
    if (!hash || unhex(hash, a->key) || !arch || !nv || !json_is_string(log) ||
        !json_is_array(opts)) {
        kh_artifact_free(a);
        return kh_err_set(err, KH_EPARSE, "artifact: missing or malformed hash, arch, nvrtc, "
                                          "log or options");
    }
    memcpy(a->hash, hash, 33);
    snprintf(a->nvrtc_version, sizeof a->nvrtc_version, "%s", nv);
    a->ok = json_is_true(json_object_get(j, "ok"));
    a->cache_hit = json_is_true(json_object_get(j, "cache_hit"));
    a->pch = pch_static(json_string_value(json_object_get(j, "pch")));
    a->arch = kh_strdup(arch);
    a->log = kh_utf8_sanitize(json_string_value(log), json_string_length(log), &a->log_len);
    a->options = calloc(json_array_size(opts) + 1, sizeof *a->options);
    if (!a->arch || !a->log || !a->options)
        goto oom;
    for (; a->n_options < json_array_size(opts); a->n_options++) {
        const char *o = json_string_value(json_array_get(opts, a->n_options));
        if (!(a->options[a->n_options] = kh_strdup(o ? o : "")))
            goto oom;
    }
    json_t *t = json_object_get(j, "timings");
    a->t.check = json_number_value(json_object_get(t, "check"));
    a->t.key = json_number_value(json_object_get(t, "key"));
    a->t.warm = json_number_value(json_object_get(t, "warm"));
    a->t.create = json_number_value(json_object_get(t, "create"));
    a->t.compile = json_number_value(json_object_get(t, "compile"));
    a->t.extract = json_number_value(json_object_get(t, "extract"));
    a->t.parse = json_number_value(json_object_get(t, "parse"));
    a->t.total = json_number_value(json_object_get(t, "total"));
    if (a->ok) {
        if (!cubin || !len) {
            kh_artifact_free(a);
            return kh_err_set(err, KH_EPARSE, "artifact %s: ok but no cubin", hash);
        }
        if (!(a->cubin = malloc(len)))
            goto oom;
        memcpy(a->cubin, cubin, len);
        a->cubin_len = len;
        kh_status st = kh_cubin_parse(a->cubin, len, &a->res, err);
        if (st) {
            kh_artifact_free(a);
            return kh_err_prefix(err, "artifact %s", hash);
        }
    }
    *out = a;
    return KH_OK;
oom:
    kh_artifact_free(a);
    return kh_err_set(err, KH_ENOMEM, "out of memory");
}
