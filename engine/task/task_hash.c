/* task_hash.c: the fingerprint of a task package on disk (task.h): what an
 * evaluation loaded, and whether a file changed while it ran; and the task
 * as a value (kh_task_open: fingerprinted, then loaded, once). */
#include "task/task.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define FP_MAX_CONTENT ((off_t)4 << 20) /* larger files: size and mtime */
#define FP_MAX_DEPTH 3

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const kh_task_fp_entry *)a)->path, ((const kh_task_fp_entry *)b)->path);
}

static uint64_t file_hash(const char *path, const struct stat *sb)
{
    XXH64_state_t *h = XXH64_createState();
    if (!h)
        return 0;
    XXH64_reset(h, 0x7A5C);
    XXH64_update(h, &sb->st_size, sizeof sb->st_size);
    if (sb->st_size > FP_MAX_CONTENT) {
        XXH64_update(h, &sb->st_mtim, sizeof sb->st_mtim);
    } else {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        unsigned char buf[65536];
        ssize_t n;
        while (fd >= 0 && (n = read(fd, buf, sizeof buf)) > 0)
            XXH64_update(h, buf, (size_t)n);
        if (fd >= 0)
            close(fd);
        else
            XXH64_update(h, "unreadable", 10);
    }
    uint64_t v = XXH64_digest(h);
    XXH64_freeState(h);
    return v;
}

static int add(kh_task_fp *fp, const char *rel, uint64_t h)
{
    if (fp->n == fp->cap) {
        size_t nc = fp->cap ? 2 * fp->cap : 32;
        kh_task_fp_entry *e = realloc(fp->e, nc * sizeof *e);
        if (!e)
            return -1;
        fp->e = e;
        fp->cap = nc;
    }
    snprintf(fp->e[fp->n].path, sizeof fp->e[fp->n].path, "%s", rel);
    fp->e[fp->n++].hash = h;
    return 0;
}

static int walk(kh_task_fp *fp, const char *root, const char *rel, int depth)
{
    char path[4096];
    snprintf(path, sizeof path, "%s%s%s", root, rel[0] ? "/" : "", rel);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    struct dirent *de;
    int rc = 0;
    while (!rc && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char r2[4096], p2[8192];
        snprintf(r2, sizeof r2, "%s%s%s", rel, rel[0] ? "/" : "", de->d_name);
        snprintf(p2, sizeof p2, "%s/%s", root, r2);
        struct stat sb;
        if (lstat(p2, &sb))
            continue;
        if (S_ISREG(sb.st_mode))
            rc = add(fp, r2, file_hash(p2, &sb));
        else if (S_ISDIR(sb.st_mode) && depth < FP_MAX_DEPTH)
            rc = walk(fp, root, r2, depth + 1);
    }
    closedir(d);
    return rc;
}

kh_status kh_task_fingerprint(const char *path, kh_task_fp *fp, kh_err *err)
{
    memset(fp, 0, sizeof *fp);
    struct stat sb;
    if (stat(path, &sb))
        return kh_err_set(err, KH_ENOTFOUND, "%s: cannot read the task package", path);
    int rc;
    if (S_ISREG(sb.st_mode)) {
        const char *base = strrchr(path, '/');
        rc = add(fp, base ? base + 1 : path, file_hash(path, &sb));
    } else {
        rc = walk(fp, path, "", 1);
    }
    if (rc) {
        kh_task_fp_free(fp);
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    if (fp->n > 1) /* an empty folder has no entries (and qsort no NULL) */
        qsort(fp->e, fp->n, sizeof *fp->e, cmp_entry);
    XXH64_state_t *h = XXH64_createState();
    if (!h) {
        kh_task_fp_free(fp);
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    XXH64_reset(h, 0);
    for (size_t i = 0; i < fp->n; i++) {
        XXH64_update(h, fp->e[i].path, strlen(fp->e[i].path) + 1);
        XXH64_update(h, &fp->e[i].hash, sizeof fp->e[i].hash);
    }
    fp->hash = XXH64_digest(h);
    XXH64_freeState(h);
    return KH_OK;
}

const char *kh_task_fp_diff(const kh_task_fp *a, const kh_task_fp *b)
{
    size_t i = 0, j = 0;
    while (i < a->n && j < b->n) {
        int c = strcmp(a->e[i].path, b->e[j].path);
        if (c < 0)
            return a->e[i].path; /* removed */
        if (c > 0)
            return b->e[j].path; /* added */
        if (a->e[i].hash != b->e[j].hash)
            return a->e[i].path;
        i++;
        j++;
    }
    return i < a->n ? a->e[i].path : j < b->n ? b->e[j].path : NULL;
}

void kh_task_fp_free(kh_task_fp *fp)
{
    free(fp->e);
    memset(fp, 0, sizeof *fp);
}

kh_status kh_task_open(const char *path, const kh_task_opts *opts, kh_task **out, kh_err *err)
{
    *out = NULL;
    kh_task *t = calloc(1, sizeof *t);
    if (!t || !(t->path = kh_strdup(path))) {
        free(t);
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    /* the fingerprint first: a file changed between the two is then seen as
     * changed by the end of the first evaluation, never taken for loaded */
    kh_status st = kh_task_fingerprint(path, &t->fp, err);
    if (!st)
        st = kh_task_load(path, opts, &t->set, err);
    if (st) {
        kh_task_close(t);
        return st;
    }
    *out = t;
    return KH_OK;
}

void kh_task_close(kh_task *t)
{
    if (!t)
        return;
    kh_task_set_free(t->set);
    kh_task_fp_free(&t->fp);
    free(t->path);
    free(t);
}
