/* fib_export_write.c: an exported solution written to a folder
 * (fib_export.h, kh_fib_export_write): its sources at their paths and the
 * Solution JSON.  Making the export is fib_export.c's. */
#include "task/fib_export.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- writing -------------------------------------------------------------------- */
static kh_status mkdirs(const char *path, int include_last, kh_err *err)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return kh_err_set(err, KH_EINVAL, "%s: path too long", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(buf, 0777) && errno != EEXIST)
            return kh_err_set(err, KH_EIO, "creating %s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (include_last && mkdir(buf, 0777) && errno != EEXIST)
        return kh_err_set(err, KH_EIO, "creating %s: %s", buf, strerror(errno));
    return KH_OK;
}

static kh_status write_file(const char *path, const char *data, size_t n, kh_err *err)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return kh_err_set(err, KH_EIO, "%s: %s", path, strerror(errno));
    int ok = fwrite(data, 1, n, f) == n;
    ok &= fclose(f) == 0;
    return ok ? KH_OK : kh_err_set(err, KH_EIO, "writing %s: %s", path, strerror(errno));
}

kh_status kh_fib_export_write(const kh_fib_export *x, const char *dir, char *path, size_t n,
                              kh_err *err)
{
    kh_status st = mkdirs(dir, 1, err);
    if (st)
        return st;
    char p[4096];
    size_t i;
    json_t *src;
    json_array_foreach(json_object_get(x->solution, "sources"), i, src) {
        const char *sp = json_string_value(json_object_get(src, "path"));
        json_t *c = json_object_get(src, "content");
        if (!sp || sp[0] == '/' || strstr(sp, ".."))
            return kh_err_set(err, KH_EINVAL, "source path '%s': expected a relative path "
                              "without '..'", sp ? sp : "?");
        snprintf(p, sizeof p, "%s/%s", dir, sp);
        if ((st = mkdirs(p, 0, err)) ||
            (st = write_file(p, json_string_value(c) ? json_string_value(c) : "",
                             json_string_length(c), err)))
            return st;
    }
    char *text = json_dumps(x->solution, JSON_INDENT(2));
    if (!text)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    snprintf(p, sizeof p, "%s/%s.json", dir,
             json_string_value(json_object_get(x->solution, "name")));
    st = write_file(p, text, strlen(text), err);
    free(text);
    if (!st && path)
        snprintf(path, n, "%s", p);
    return st;
}
