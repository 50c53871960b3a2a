/* ncu.c: Nsight Compute as a subprocess (see ncu.h).  Owns the command
 * lines, the raw-CSV parser and the report files in the caller's folder;
 * classifying the metrics is bottleneck.c's, running the target is
 * `khlua profile --run-only`'s. */
#include "profile/ncu.h"

#include "profile/bottleneck.h"
#include "core/proc.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- CSV ------------------------------------------------------------------ */

typedef struct row {
    char **f;
    size_t n, cap;
} row;

static void row_free(row *r)
{
    for (size_t i = 0; i < r->n; i++)
        free(r->f[i]);
    free(r->f);
    memset(r, 0, sizeof *r);
}

static int row_push(row *r, const char *s, size_t n)
{
    if (r->n == r->cap) {
        size_t c = r->cap ? 2 * r->cap : 16;
        char **f = realloc(r->f, c * sizeof *f);
        if (!f)
            return -1;
        r->f = f;
        r->cap = c;
    }
    char *d = malloc(n + 1);
    if (!d)
        return -1;
    memcpy(d, s, n);
    d[n] = 0;
    r->f[r->n++] = d;
    return 0;
}

/* Read one CSV record at *pos (RFC 4180 quoting); 0 at the end of text,
 * -1 out of memory or an unterminated quote. */
static int read_record(const char *t, size_t len, size_t *pos, row *r)
{
    size_t i = *pos;
    if (i >= len)
        return 0;
    char *buf = malloc(len - i + 1);
    if (!buf)
        return -1;
    size_t b = 0;
    int quoted = 0, in_q = 0;
    for (;; i++) {
        char c = i < len ? t[i] : '\n';
        if (in_q) {
            if (i >= len) {
                free(buf);
                return -1;
            }
            if (c == '"' && i + 1 < len && t[i + 1] == '"') {
                buf[b++] = '"';
                i++;
            } else if (c == '"') {
                in_q = 0;
            } else {
                buf[b++] = c;
            }
            continue;
        }
        if (c == '"' && b == 0 && !quoted) {
            in_q = quoted = 1;
        } else if (c == ',' || c == '\n' || c == '\r') {
            if (row_push(r, buf, b) < 0) {
                free(buf);
                return -1;
            }
            b = 0;
            quoted = 0;
            if (c != ',') {
                if (c == '\r' && i + 1 < len && t[i + 1] == '\n')
                    i++;
                break;
            }
        } else {
            buf[b++] = c;
        }
    }
    free(buf);
    *pos = i + 1;
    return 1;
}

static size_t line_end(const char *t, size_t len, size_t i)
{
    while (i < len && t[i] != '\n')
        i++;
    return i < len ? i + 1 : len;
}

static long col(const row *h, const char *name)
{
    for (size_t i = 0; i < h->n; i++)
        if (!strcmp(h->f[i], name))
            return (long)i;
    return -1;
}

/* ncu prints times and sizes in whatever unit reads best ("usecond",
 * "Mbyte"); the engine wants ns and bytes.  Returns the factor, and sets
 * *norm to the unit the value is normalized to (u itself if unknown). */
static double unit_scale(const char *u, const char **norm)
{
    static const struct {
        const char *name, *norm;
        double f;
    } t[] = {
        {"nsecond", "nsecond", 1}, {"usecond", "nsecond", 1e3}, {"msecond", "nsecond", 1e6},
        {"second", "nsecond", 1e9}, {"byte", "byte", 1},        {"Kbyte", "byte", 1e3},
        {"Mbyte", "byte", 1e6},     {"Gbyte", "byte", 1e9},     {"Tbyte", "byte", 1e12},
    };
    *norm = u;
    for (size_t i = 0; u && i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(u, t[i].name)) {
            *norm = t[i].norm;
            return t[i].f;
        }
    return 1;
}

kh_status kh_ncu_parse_csv(const char *t, size_t len, json_t **kernels, kh_err *err)
{
    *kernels = NULL;
    /* Skip tool lines and anything the target printed before the header. */
    size_t pos = 0;
    while (pos < len && strncmp(t + pos, "\"ID\",", 5))
        pos = line_end(t, len, pos);
    if (pos >= len)
        return kh_err_set(err, KH_EPARSE,
                          "ncu CSV: no header row (a line starting with \"ID\",); did ncu "
                          "profile any kernel?");
    row h = {0}, r = {0};
    if (read_record(t, len, &pos, &h) <= 0) {
        row_free(&h);
        return kh_err_set(err, KH_EPARSE, "ncu CSV: the header row is cut short");
    }
    long c_id = col(&h, "ID"), c_name = col(&h, "Kernel Name"), c_grid = col(&h, "Grid Size"),
         c_block = col(&h, "Block Size");
    /* The details page (and older exports) is long: one row per metric,
     * with "Metric Name", "Metric Unit" and "Metric Value"; read it too. */
    long c_mname = col(&h, "Metric Name"), c_mval = col(&h, "Metric Value"),
         c_munit = col(&h, "Metric Unit");
    int long_form = c_mname >= 0 && c_mval >= 0;
    if (c_name < 0) {
        row_free(&h);
        return kh_err_set(err, KH_EPARSE, "ncu CSV: no \"Kernel Name\" column");
    }
    json_t *out = json_array(), *units = NULL, *raw_units = NULL;
    kh_status st = KH_OK;
    size_t line = 1;
    for (;;) {
        while (pos < len && !strncmp(t + pos, "==", 2)) /* ==PROF== / ==WARNING== lines */
            pos = line_end(t, len, pos);
        int got = read_record(t, len, &pos, &r);
        if (got == 0)
            break;
        line++;
        if (got < 0) {
            st = kh_err_set(err, KH_EPARSE, "ncu CSV: record %zu: unterminated quote", line);
            break;
        }
        if (r.n == 1 && !r.f[0][0]) { /* blank line */
            row_free(&r);
            continue;
        }
        if (r.n != h.n) {
            st = kh_err_set(err, KH_EPARSE, "ncu CSV: record %zu has %zu fields, the header %zu",
                            line, r.n, h.n);
            break;
        }
        if (long_form) {
            json_t *last = json_array_get(out, json_array_size(out) - 1);
            const char *lid = json_string_value(json_object_get(last, "_id"));
            const char *rid = c_id >= 0 ? r.f[c_id] : "";
            if (!last || !lid || strcmp(lid, rid)) {
                double id;
                last = json_pack("{s:s, s:s, s:{}, s:{}}", "_id", rid, "kernel", r.f[c_name],
                                 "metrics", "units");
                if (kh_bn_parse_number(rid, &id))
                    json_object_set_new(last, "id", json_integer((json_int_t)id));
                if (c_grid >= 0)
                    json_object_set_new(last, "grid", json_string(r.f[c_grid]));
                if (c_block >= 0)
                    json_object_set_new(last, "block", json_string(r.f[c_block]));
                json_array_append_new(out, last);
            }
            const char *name = r.f[c_mname];
            double v;
            if (name[0]) {
                json_t *m = json_object_get(last, "metrics");
                const char *unit = c_munit >= 0 && r.f[c_munit][0] ? r.f[c_munit] : NULL;
                const char *norm = unit;
                double f = unit_scale(unit, &norm);
                if (kh_bn_parse_number(r.f[c_mval], &v))
                    json_object_set_new(m, name, json_real(v * f));
                else if (r.f[c_mval][0])
                    json_object_set_new(m, name, json_string(r.f[c_mval]));
                if (norm)
                    json_object_set_new(json_object_get(last, "units"), name,
                                        json_string(norm));
            }
            row_free(&r);
            continue;
        }
        /* The units row: no ID. */
        if (!units && c_id >= 0 && !r.f[c_id][0]) {
            units = json_object();
            raw_units = json_object();
            for (size_t i = 0; i < h.n; i++)
                if (strstr(h.f[i], "__") && r.f[i][0]) {
                    const char *norm;
                    unit_scale(r.f[i], &norm);
                    json_object_set_new(units, h.f[i], json_string(norm));
                    json_object_set_new(raw_units, h.f[i], json_string(r.f[i]));
                }
            row_free(&r);
            continue;
        }
        json_t *k = json_object(), *m = json_object();
        double id;
        if (c_id >= 0 && kh_bn_parse_number(r.f[c_id], &id))
            json_object_set_new(k, "id", json_integer((json_int_t)id));
        json_object_set_new(k, "kernel", json_string(r.f[c_name]));
        if (c_grid >= 0)
            json_object_set_new(k, "grid", json_string(r.f[c_grid]));
        if (c_block >= 0)
            json_object_set_new(k, "block", json_string(r.f[c_block]));
        for (size_t i = 0; i < h.n; i++) {
            if (!strstr(h.f[i], "__"))
                continue;
            double v;
            const char *norm;
            double f = unit_scale(json_string_value(json_object_get(raw_units, h.f[i])), &norm);
            if (kh_bn_parse_number(r.f[i], &v))
                json_object_set_new(m, h.f[i], json_real(v * f));
            else if (r.f[i][0])
                json_object_set_new(m, h.f[i], json_string(r.f[i]));
        }
        json_object_set_new(k, "metrics", m);
        json_object_set_new(k, "units", units ? json_incref(units) : json_object());
        json_array_append_new(out, k);
        row_free(&r);
    }
    row_free(&r);
    row_free(&h);
    json_decref(units);
    json_decref(raw_units);
    size_t i;
    json_t *k;
    json_array_foreach(out, i, k)
        json_object_del(k, "_id");
    if (st) {
        json_decref(out);
        return st;
    }
    *kernels = out;
    return KH_OK;
}

/* ---- running ncu ------------------------------------------------------------ */

/* Kernel names go into a regex: escape everything but [A-Za-z0-9_]. */
static int append_escaped(char *buf, size_t n, size_t *l, const char *s)
{
    for (; *s; s++) {
        int esc = !(isalnum((unsigned char)*s) || *s == '_');
        if (*l + 3 >= n)
            return -1;
        if (esc)
            buf[(*l)++] = '\\';
        buf[(*l)++] = *s;
    }
    buf[*l] = 0;
    return 0;
}

static const char *tail(const char *s, size_t keep)
{
    size_t n = strlen(s);
    return n > keep ? s + n - keep : s;
}

static kh_status write_file(const char *path, const char *data, size_t n, kh_err *err)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return kh_err_set(err, KH_EIO, "%s: %s", path, strerror(errno));
    size_t w = fwrite(data, 1, n, f);
    if (fclose(f) != 0 || w != n)
        return kh_err_set(err, KH_EIO, "%s: write failed", path);
    return KH_OK;
}

kh_status kh_ncu_run(const kh_ncu_opts *o, json_t **result, kh_err *err)
{
    *result = NULL;
    if (!o->exe || !o->cubin_path || !o->spec_path || !o->out_dir || !o->nkernels)
        return kh_err_set(err, KH_EINVAL, "ncu: exe, cubin, spec, kernels and out_dir are "
                          "required");
    char extra[600] = "";
    if (o->cuda_home)
        snprintf(extra, sizeof extra, "%s/bin", o->cuda_home);
    char *ncu = o->ncu ? kh_strdup(o->ncu) : kh_which("ncu", extra[0] ? extra : NULL);
    if (!ncu)
        return kh_err_set(err, KH_ENOTFOUND, "ncu not found on PATH%s%s (install Nsight "
                          "Compute, or pass its path)", extra[0] ? " or in " : "", extra);
    char kre[4096] = "regex:^(";
    size_t kl = strlen(kre);
    for (size_t i = 0; i < o->nkernels; i++) {
        int bad = 0;
        if (i) {
            if (kl + 2 >= sizeof kre)
                bad = 1;
            else
                kre[kl++] = '|', kre[kl] = 0;
        }
        if (bad || append_escaped(kre, sizeof kre, &kl, o->kernels[i]) < 0 ||
            kl + 3 >= sizeof kre) {
            free(ncu);
            return kh_err_set(err, KH_EINVAL, "ncu: kernel names too long for a filter");
        }
    }
    snprintf(kre + kl, sizeof kre - kl, ")$");
    char count[32], rep_base[1024], rep[1100], csv[1100];
    snprintf(count, sizeof count, "%zu", o->launches ? o->launches : o->nkernels);
    snprintf(rep_base, sizeof rep_base, "%s/report", o->out_dir);
    snprintf(rep, sizeof rep, "%s.ncu-rep", rep_base);
    snprintf(csv, sizeof csv, "%s/raw.csv", o->out_dir);

    const char *argv[64];
    int a = 0;
    /* ncu preloads its injection library into the target; a sanitizer build
     * of khlua would refuse that ("ASan runtime does not come first") and
     * report the CUDA driver's allocations at exit.  Harmless otherwise. */
    char asan[1024];
    const char *prev = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof asan, "ASAN_OPTIONS=%s%sverify_asan_link_order=0:detect_leaks=0",
             prev ? prev : "", prev && *prev ? ":" : "");
    argv[a++] = "env";
    argv[a++] = asan;
    argv[a++] = ncu;
    /* Never lock base clocks: durations must stay comparable with the
     * contest's timing (gpu-facts.md §4). */
    argv[a++] = "--clock-control";
    argv[a++] = "none";
    argv[a++] = "--kernel-name-base";
    argv[a++] = "function";
    argv[a++] = "-k";
    argv[a++] = kre;
    argv[a++] = "-c";
    argv[a++] = count;
    char secs[1024];
    snprintf(secs, sizeof secs, "%s",
             o->sections ? o->sections : "SpeedOfLight,LaunchStats,Occupancy,"
                                         "MemoryWorkloadAnalysis");
    for (char *s = strtok(secs, ","); s && a < 40; s = strtok(NULL, ",")) {
        argv[a++] = "--section";
        argv[a++] = s;
    }
    if (o->metrics && *o->metrics) {
        argv[a++] = "--metrics";
        argv[a++] = o->metrics;
    }
    argv[a++] = "-f";
    argv[a++] = "-o";
    argv[a++] = rep_base;
    argv[a++] = o->exe;
    argv[a++] = "profile";
    argv[a++] = "--run-only";
    argv[a++] = "--cubin";
    argv[a++] = o->cubin_path;
    argv[a++] = "--spec";
    argv[a++] = o->spec_path;
    argv[a] = NULL;

    char command[4096] = "";
    for (int i = 0; i < a; i++) {
        size_t l = strlen(command);
        snprintf(command + l, sizeof command - l, "%s%s", i ? " " : "", argv[i]);
    }
    double timeout = o->timeout_s > 0 ? o->timeout_s : 300;
    double t0 = kh_now();
    kh_child_result res;
    kh_status st = kh_proc_run((char *const *)argv, timeout, 1u << 20, &res, err);
    if (st) {
        free(ncu);
        return st;
    }
    const char *outp = res.out ? res.out : "";
    if (strstr(outp, "ERR_NVGPUCTRPERM")) {
        st = kh_err_set(err, KH_EUNSUPPORTED, "no counters: ncu: ERR_NVGPUCTRPERM (the driver "
                        "restricts GPU performance counters to admin users)");
    } else if (!res.exited || res.exit_code != 0 || res.timed_out) {
        char how[128];
        kh_child_describe(&res, how, sizeof how);
        st = kh_err_set(err, KH_ECHILD, "ncu: %s: ...%s", how, tail(outp, 700));
    }
    kh_child_result_free(&res);
    if (st) {
        free(ncu);
        return st;
    }
    /* Base units (nsecond, byte): ncu's automatic scaling prints whatever
     * reads best, and a unit the table above misses would be read as ns. */
    const char *argv2[] = {ncu,       "--import", rep, "--csv", "--page", "raw",
                           "--print-units", "base", NULL};
    st = kh_proc_run((char *const *)argv2, timeout, 256u << 20, &res, err);
    free(ncu);
    if (st)
        return st;
    if (!res.exited || res.exit_code != 0 || res.truncated) {
        char how[128];
        kh_child_describe(&res, how, sizeof how);
        st = kh_err_set(err, KH_ECHILD, "ncu --import: %s%s: ...%s", how,
                        res.truncated ? " (output truncated)" : "",
                        tail(res.out ? res.out : "", 500));
        kh_child_result_free(&res);
        return st;
    }
    json_t *kernels = NULL;
    st = write_file(csv, res.out, res.out_len, err);
    if (!st)
        st = kh_ncu_parse_csv(res.out, res.out_len, &kernels, err);
    kh_child_result_free(&res);
    if (st)
        return st;
    *result = json_pack("{s:s, s:s, s:o, s:s, s:f}", "report", rep, "csv", csv, "kernels",
                        kernels, "command", command, "seconds", kh_now() - t0);
    return KH_OK;
}
