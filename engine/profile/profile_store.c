/* profile_store.c: profiles and device peaks in the artifact store (see
 * profile.h).  Owns the shape of the "profile" record (the report of
 * kh_profile_run, ncu's report and raw CSV as blobs, the cubin as a blob) and
 * of the "device" record (a GPU's measured peaks, one per UUID, replaced when
 * measured again).  Measuring is the profile worker's; classifying is
 * profile.c's; the store's own rules are store.c's. */
#include "profile/profile.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kh_status kh_profile_device_id(const char *uuid, char id[KH_STORE_ID_MAX], kh_err *err)
{
    if (!uuid || !*uuid)
        return kh_err_set(err, KH_EINVAL, "device peaks: the GPU has no UUID");
    for (const char *p = uuid; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_' || *p == '.' || *p == ':'))
            return kh_err_set(err, KH_EINVAL, "device peaks: GPU UUID '%s' has a character "
                              "an id cannot hold", uuid);
    if (strlen(uuid) + strlen("device-") >= KH_STORE_ID_MAX)
        return kh_err_set(err, KH_EINVAL, "device peaks: GPU UUID too long");
    snprintf(id, KH_STORE_ID_MAX, "device-%s", uuid);
    return KH_OK;
}

static const char *str(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

kh_status kh_profile_peaks_lookup(kh_store *s, const json_t *gpu, double max_age_s,
                                  json_t **peaks, const char **why, kh_err *err)
{
    *peaks = NULL;
    *why = NULL;
    char id[KH_STORE_ID_MAX];
    kh_status st = kh_profile_device_id(str(gpu, "uuid"), id, err);
    if (st)
        return st;
    json_t *rec = NULL;
    st = kh_store_get(s, id, &rec, err);
    if (st == KH_ENOTFOUND) {
        *why = "never measured on this GPU";
        return KH_OK;
    }
    if (st)
        return st;
    const json_t *p = json_object_get(rec, "peaks");
    const json_t *bw = json_object_get(p, "copy_bytes_per_s");
    int64_t at = 0;
    kh_err terr;
    const char *drv = str(gpu, "driver_version"), *rdrv = str(rec, "driver_version");
    if (!json_is_number(bw) || json_number_value(bw) <= 0) {
        *why = "the stored record holds no copy bandwidth";
    } else if (!str(rec, "measured_at") ||
               kh_store_parse_time(str(rec, "measured_at"), &at, &terr)) {
        *why = "the stored record has no valid measured_at";
    } else if (max_age_s >= 0 && kh_wall_now() - (double)at * 1e-6 > max_age_s) {
        *why = "the stored peaks are older than the maximum age";
    } else if (drv && *drv && (!rdrv || strcmp(drv, rdrv))) {
        *why = "measured under another driver";
    } else {
        json_t *out = json_deep_copy(p);
        json_object_set_new(out, "source", json_string("store"));
        json_object_set(out, "measured_at", json_object_get(rec, "measured_at"));
        json_object_set_new(out, "record", json_string(id));
        *peaks = out;
    }
    json_decref(rec);
    return KH_OK;
}

kh_status kh_profile_peaks_save(kh_store *s, const json_t *gpu, const json_t *peaks,
                                char id_out[KH_STORE_ID_MAX], kh_err *err)
{
    char id[KH_STORE_ID_MAX];
    kh_status st = kh_profile_device_id(str(gpu, "uuid"), id, err);
    if (st)
        return st;
    const json_t *bw = json_object_get(peaks, "copy_bytes_per_s");
    if (!json_is_number(bw) || json_number_value(bw) <= 0)
        return kh_err_set(err, KH_EINVAL, "device peaks: no copy bandwidth to keep%s%s",
                          str(peaks, "error") ? ": " : "",
                          str(peaks, "error") ? str(peaks, "error") : "");
    json_t *p = json_deep_copy(peaks);
    /* the record's own fields, not the report's decorations */
    json_object_del(p, "source");
    json_object_del(p, "record");
    json_object_del(p, "measured_at");
    json_object_del(p, "uuid");
    /* when the caller timed the measurement, its time; else now */
    char at[40];
    int64_t us;
    kh_err terr;
    const char *given = str(peaks, "measured_at");
    if (given && !kh_store_parse_time(given, &us, &terr))
        snprintf(at, sizeof at, "%s", given);
    else
        kh_store_format_time((int64_t)(kh_wall_now() * 1e6), at);
    json_t *rec = json_pack("{s:s, s:s, s:s, s:o, s:s, s:s}", "type", "device", "id", id,
                            "gpu_uuid", str(gpu, "uuid"), "peaks", p, "measured_at", at,
                            "measured_by", "khlua profile worker at start");
    const char *copy[] = {"name", "driver_version", "cuda_driver_api", "compute_capability",
                          "sms", "l2_bytes", "memory_bytes", "sm_clock_khz"};
    for (size_t i = 0; i < KH_ARRAY_LEN(copy); i++) {
        json_t *v = json_object_get(gpu, copy[i]);
        if (v)
            json_object_set(rec, copy[i], v);
    }
    st = kh_store_put(s, rec, KH_STORE_REPLACE, id_out, err);
    json_decref(rec);
    return st;
}

/* ---- the profile record --------------------------------------------------------- */

static unsigned char *read_file(const char *path, size_t *len, kh_err *err)
{
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        kh_err_set(err, KH_EIO, "%s: %s", path, strerror(errno));
        return NULL;
    }
    unsigned char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        kh_err_set(err, KH_EIO, "%s: cannot size it", path);
        return NULL;
    }
    buf = malloc((size_t)n + 1);
    if (!buf) {
        fclose(f);
        kh_err_set(err, KH_ENOMEM, "out of memory reading %s", path);
        return NULL;
    }
    size_t r = fread(buf, 1, (size_t)n, f);
    int bad = ferror(f) || r != (size_t)n;
    fclose(f);
    if (bad) {
        free(buf);
        kh_err_set(err, KH_EIO, "%s: read failed", path);
        return NULL;
    }
    *len = r;
    return buf;
}

typedef struct put_arg {
    json_t *rec;
    const unsigned char *cubin;
    size_t cubin_len;
    unsigned char *ncu_rep, *ncu_csv;
    size_t ncu_rep_len, ncu_csv_len;
    char *id;
} put_arg;

static kh_status put_fn(kh_store_txn *tx, void *argp, kh_err *err)
{
    put_arg *a = argp;
    kh_hash h;
    char hex[33];
    json_t *ncu = json_object_get(a->rec, "ncu");
    if (a->cubin && a->cubin_len) {
        if (kh_store_txn_put_blob(tx, a->cubin, a->cubin_len, &h, err))
            return err->code;
        kh_hash_hex(&h, hex);
        json_object_set_new(a->rec, "cubin_blob", json_string(hex));
        json_object_set_new(a->rec, "cubin_hash", json_string(hex));
    }
    if (a->ncu_rep) {
        if (kh_store_txn_put_blob(tx, a->ncu_rep, a->ncu_rep_len, &h, err))
            return err->code;
        kh_hash_hex(&h, hex);
        json_object_set_new(ncu, "report_blob", json_string(hex));
        json_object_set_new(ncu, "report_bytes", json_integer((json_int_t)a->ncu_rep_len));
    }
    if (a->ncu_csv) {
        if (kh_store_txn_put_blob(tx, a->ncu_csv, a->ncu_csv_len, &h, err))
            return err->code;
        kh_hash_hex(&h, hex);
        json_object_set_new(ncu, "csv_blob", json_string(hex));
    }
    return kh_store_txn_put(tx, a->rec, 0, a->id, err);
}

/* The report, reshaped as the record: its "device" (the launch limits) would
 * read as a reference to a device record, so it moves to "device_limits". */
static json_t *record_of(const json_t *rep, const kh_profile_store_opts *o)
{
    json_t *rec = json_deep_copy(rep);
    json_t *lim = json_object_get(rec, "device");
    if (lim) {
        json_object_set(rec, "device_limits", lim);
        json_object_del(rec, "device");
    }
    json_t *names = json_object_get(rec, "metrics");
    if (names) {
        json_object_set(rec, "metric_names", names);
        json_object_del(rec, "metrics");
    }
    /* the run's own bookkeeping, not the evidence */
    json_object_del(rec, "store_id");
    json_object_del(rec, "store_error");
    json_object_set_new(rec, "type", json_string("profile"));
    const json_t *ncu = json_object_get(rec, "ncu");
    json_object_set_new(rec, "tool", json_string(ncu && !json_object_get(ncu, "error")
                                                     ? "cupti+ncu"
                                                     : "cupti"));
    const char *kind = str(json_object_get(rec, "state"), "kind");
    if (kind)
        json_object_set_new(rec, "status", json_string(kind));
    const char *uuid = str(json_object_get(rec, "gpu"), "uuid");
    if (uuid)
        json_object_set_new(rec, "gpu_uuid", json_string(uuid));
    /* the peaks used: link their device record when they have one */
    const char *prec = str(json_object_get(rec, "peaks"), "record");
    if (prec)
        json_object_set_new(rec, "device", json_string(prec));
    if (o->spec)
        json_object_set(rec, "launch_list", (json_t *)o->spec);
    if (o->task)
        json_object_set_new(rec, "task", json_string(o->task));
    if (o->candidate)
        json_object_set_new(rec, "candidate", json_string(o->candidate));
    if (o->evaluation)
        json_object_set_new(rec, "evaluation", json_string(o->evaluation));
    if (o->context)
        json_object_set(rec, "context", (json_t *)o->context);
    return rec;
}

kh_status kh_profile_store(kh_store *s, const json_t *report, const kh_profile_store_opts *o,
                           char id_out[KH_STORE_ID_MAX], kh_err *err)
{
    if (!s || !json_is_object(report))
        return kh_err_set(err, KH_EINVAL, "profile store: a store and a report are required");
    static const kh_profile_store_opts none = {0};
    if (!o)
        o = &none;
    put_arg a = {.rec = record_of(report, o), .cubin = o->cubin, .cubin_len = o->cubin_len,
                 .id = id_out};
    kh_status st = KH_OK;
    /* ncu's files as they are on disk: the blobs are their bytes */
    json_t *ncu = json_object_get(a.rec, "ncu");
    if (ncu && !json_object_get(ncu, "error")) {
        const char *rp = str(ncu, "report"), *cp = str(ncu, "csv");
        if (rp && !(a.ncu_rep = read_file(rp, &a.ncu_rep_len, err)))
            st = err->code;
        if (!st && cp && !(a.ncu_csv = read_file(cp, &a.ncu_csv_len, err)))
            st = err->code;
    }
    if (!st)
        st = kh_store_update(s, put_fn, &a, err);
    free(a.ncu_rep);
    free(a.ncu_csv);
    json_decref(a.rec);
    return st;
}
