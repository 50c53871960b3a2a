/* task.c: loading and checking tasks in FlashInfer-Bench's formats plus
 * khlua's "khlua" additions (task.h): definition, solution, workload and
 * trace files, task packages and datasets, read as FlashInfer-Bench writes
 * them (bare NaN / Infinity tokens included); the cross-checks between a
 * set's definitions, solutions and workloads; the set's accessors.  What one
 * document means is the task_*.c units' (task_int.h); this file is their top:
 * nothing below calls it. */
#include "task/task_int.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* Grow the array whose pointer lives at arrp (any T *) to hold one more
 * element.  memcpy moves the pointer in and out, so no T ** is read through
 * a void ** (all object pointers share one representation on our targets). */
static int grow(void *arrp, size_t *cap, size_t elem)
{
    void *old, *nw;
    size_t c = *cap ? *cap * 2 : 16;
    memcpy(&old, arrp, sizeof old);
    if (!(nw = realloc(old, c * elem)))
        return -1;
    memcpy(arrp, &nw, sizeof nw);
    *cap = c;
    return 0;
}
/* Append item to arr (n used of cap); 0, or -1 when out of memory. */
#define PUSH(arr, n, cap, item)                                                                    \
    (((n) < (cap) || !grow(&(arr), &(cap), sizeof *(arr))) ? ((arr)[(n)++] = (item), 0) : -1)

/* ---- files ------------------------------------------------------------------ */
/* The bare tokens NaN, Infinity and -Infinity outside strings: Python's
 * json module writes them for non-finite floats (json.dump of a
 * FlashInfer-Bench model_dump()), pydantic reads them, jansson refuses them.
 * Each is the length of its token (0 when there is none at text). */
static size_t nonfinite_token(const char *text, size_t len)
{
    static const char *const toks[] = {"NaN", "Infinity", "-Infinity"};
    for (size_t k = 0; k < KH_ARRAY_LEN(toks); k++) {
        size_t n = strlen(toks[k]);
        if (n <= len && !memcmp(text, toks[k], n) &&
            (n == len || !strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_",
                                 text[n]) || !text[n]))
            return n;
    }
    return 0;
}

/* json_loadb, after writing every bare non-finite token as the string
 * FlashInfer-Bench's pydantic writes for it ("NaN", "Infinity",
 * "-Infinity"), which the float fields read (task_fib_float).  No newline is
 * added, so lines stay; a syntax error's column is given in the text as
 * written (two quotes less per token before it on its line). */
static json_t *parse_json(const char *text, size_t len, json_error_t *je)
{
    size_t ntok = 0, tl;
    int in_str = 0;
    for (size_t i = 0; i < len; i++) {
        if (in_str) {
            if (text[i] == '\\')
                i++;
            else if (text[i] == '"')
                in_str = 0;
        } else if (text[i] == '"') {
            in_str = 1;
        } else if ((text[i] == 'N' || text[i] == 'I' || text[i] == '-') &&
                   (tl = nonfinite_token(text + i, len - i))) {
            ntok++;
            i += tl - 1;
        }
    }
    if (!ntok)
        return json_loadb(text, len, JSON_REJECT_DUPLICATES, je);
    char *buf = malloc(len + 2 * ntok);
    size_t *at = malloc(ntok * sizeof *at); /* where each token starts in buf */
    if (!buf || !at) {
        free(buf);
        free(at);
        return json_loadb(text, len, JSON_REJECT_DUPLICATES, je); /* names the token */
    }
    size_t n = 0, k = 0;
    in_str = 0;
    for (size_t i = 0; i < len; i++) {
        tl = 0;
        if (in_str) {
            if (text[i] == '\\' && i + 1 < len) {
                buf[n++] = text[i++];
            } else if (text[i] == '"') {
                in_str = 0;
            }
        } else if (text[i] == '"') {
            in_str = 1;
        } else if ((text[i] == 'N' || text[i] == 'I' || text[i] == '-') &&
                   (tl = nonfinite_token(text + i, len - i))) {
            at[k++] = n;
            buf[n++] = '"';
            memcpy(buf + n, text + i, tl);
            n += tl;
            buf[n++] = '"';
            i += tl - 1;
            continue;
        }
        buf[n++] = text[i];
    }
    json_t *j = json_loadb(buf, n, JSON_REJECT_DUPLICATES, je);
    if (!j && je->position >= 0) {
        size_t line_start = (size_t)je->position < n ? (size_t)je->position : n;
        while (line_start > 0 && buf[line_start - 1] != '\n')
            line_start--;
        for (size_t t = 0; t < k; t++)
            if (at[t] >= line_start && at[t] < (size_t)je->position)
                je->column -= 2;
    }
    free(buf);
    free(at);
    return j;
}

static json_t *load_json_text(kh_task_set *s, const char *file, const char *text, size_t len,
                              int line0)
{
    json_error_t je;
    json_t *j = parse_json(text, len, &je);
    if (!j)
        task_add_problem(s, KH_TASK_ERROR, file, line0 + (je.line > 0 ? je.line - 1 : 0), "json",
                         "invalid JSON at column %d: %s", je.column, je.text);
    return j;
}

static int load_def_file(kh_task_set *s, const char *file)
{
    size_t len;
    kh_err err;
    char *text = task_read_file(file, &len, &err);
    if (!text) {
        task_add_problem(s, KH_TASK_ERROR, file, 0, "file", "%s", err.msg);
        return -1;
    }
    s->sum.files++;
    size_t errors0 = s->sum.errors;
    json_t *j = load_json_text(s, file, text, len, 1);
    if (j) {
        vctx v = {.s = s, .file = file, .text = text, .len = len, .base_line = 1};
        kh_task_def *d = task_parse_definition(&v, j);
        if (d)
            d->errors = s->sum.errors - errors0;
        if (d && d->name) {
            const kh_task_def *other = kh_task_find_def(s, d->name);
            if (other) {
                VERR(&v, "name", "duplicate definition name \"%s\" (also %s:%d); expected unique "
                                 "names", d->name, other->file, other->line);
                task_def_free(d);
            } else if (PUSH(s->defs, s->ndefs, s->capdefs, d)) {
                task_def_free(d);
            } else if (s->quiet) {
                d->context = 1;
                s->sum.context_definitions++;
            } else {
                s->sum.definitions++;
            }
        } else {
            task_def_free(d);
        }
        json_decref(j);
    }
    free(text);
    return 0;
}

static void load_solution_text(kh_task_set *s, const char *file, const char *text, size_t len,
                               json_t *j)
{
    vctx v = {.s = s, .file = file, .text = text, .len = len, .base_line = 1};
    kh_task_solution *sol = task_parse_solution(&v, j);
    if (!sol)
        return;
    if (sol->definition && !sol->def && (s->ndefs || s->borrow))
        VERR(&v, "definition", "expected the name of a known definition, got \"%s\"",
             sol->definition);
    else if (sol->definition && !sol->def)
        VWARN(&v, "definition", "definition \"%s\" not loaded (no dataset or package around "
                                "this file); names in the solution are not checked",
              sol->definition);
    const kh_task_solution *other = sol->name ? kh_task_find_solution(s, sol->name) : NULL;
    if (other) {
        VERR(&v, "name", "duplicate solution name \"%s\" (also %s:%d); expected unique names",
             sol->name, other->file, other->line);
        task_sol_free(sol);
        return;
    }
    if (PUSH(s->sols, s->nsols, s->capsols, sol)) {
        task_sol_free(sol);
        return;
    }
    s->sum.solutions++;
    if (sol->manifest)
        s->sum.candidates++;
}

static void load_solution_file(kh_task_set *s, const char *file)
{
    size_t len;
    kh_err err;
    char *text = task_read_file(file, &len, &err);
    if (!text) {
        task_add_problem(s, KH_TASK_ERROR, file, 0, "file", "%s", err.msg);
        return;
    }
    s->sum.files++;
    json_t *j = load_json_text(s, file, text, len, 1);
    if (j)
        load_solution_text(s, file, text, len, j);
    json_decref(j);
    free(text);
}

static void load_jsonl_file(kh_task_set *s, const char *file, jl_kind kind)
{
    size_t len;
    kh_err err;
    char *text = task_read_file(file, &len, &err);
    if (!text) {
        task_add_problem(s, KH_TASK_ERROR, file, 0, "file", "%s", err.msg);
        return;
    }
    s->sum.files++;
    if (kind != JL_TRACES)
        s->sum.workload_files++;
    file_state fs = {0};
    int line = 0;
    for (char *p = text; p < text + len;) {
        char *nl = memchr(p, '\n', (size_t)(text + len - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(text + len - p);
        line++;
        size_t k = 0;
        while (k < n && (p[k] == ' ' || p[k] == '\t' || p[k] == '\r'))
            k++;
        if (k < n) {
            json_t *j = load_json_text(s, file, p, n, line);
            if (j) {
                vctx v = {.s = s, .file = file, .text = p, .len = n, .base_line = line};
                kh_task_workload *w = task_parse_workload_line(&v, j, kind, &fs);
                if (w)
                    w->seq = s->nwls;
                if (w && PUSH(s->wls, s->nwls, s->capwls, w))
                    task_wl_free(w);
                else if (w && w->is_trace)
                    s->sum.traces++;
                else if (w)
                    s->sum.workloads++;
                json_decref(j);
            }
        }
        p += n + 1;
    }
    if (fs.missing)
        task_add_problem(s, KH_TASK_WARNING, file, fs.first_line, fs.first_field,
                         "%zu safetensors input%s without a blob (first: %s); shapes and dtypes "
                         "unchecked (--strict makes this an error)",
                         fs.missing, fs.missing == 1 ? "" : "s", fs.first_path);
    free(text);
}

/* Files under dir (recursively) ending in ext, sorted. */
static int collect(const char *dir, const char *ext, char ***out, size_t *n, size_t *cap, int depth)
{
    if (depth > 16) /* a symlink cycle, or absurd nesting */
        return -1;
    DIR *dp = opendir(dir);
    if (!dp)
        return errno == ENOENT ? 0 : -1;
    struct dirent *de;
    size_t el = strlen(ext);
    while ((de = readdir(dp))) {
        if (de->d_name[0] == '.')
            continue;
        char *p = task_path_join(dir, de->d_name);
        if (!p)
            break;
        if (task_is_dir(p)) {
            collect(p, ext, out, n, cap, depth + 1);
            free(p);
        } else {
            size_t l = strlen(de->d_name);
            if (l > el && !strcmp(de->d_name + l - el, ext) && !PUSH(*out, *n, *cap, p))
                continue;
            free(p);
        }
    }
    closedir(dp);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

typedef enum { F_DEF, F_SOL, F_WL, F_TRACE } fkind;

static void load_tree(kh_task_set *s, const char *dir, const char *ext, fkind kind)
{
    char **files = NULL;
    size_t n = 0, cap = 0;
    collect(dir, ext, &files, &n, &cap, 0);
    if (n)
        qsort(files, n, sizeof *files, cmp_str);
    for (size_t i = 0; i < n; i++) {
        if (kind == F_DEF)
            load_def_file(s, files[i]);
        else if (kind == F_SOL)
            load_solution_file(s, files[i]);
        else
            load_jsonl_file(s, files[i], kind == F_TRACE ? JL_TRACES : JL_WORKLOADS);
        free(files[i]);
    }
    free(files);
}

static int is_dataset(const char *dir)
{
    static const char *const subs[] = {"definitions", "workloads", "solutions", "traces"};
    for (size_t i = 0; i < KH_ARRAY_LEN(subs); i++) {
        char *p = task_path_join(dir, subs[i]);
        int d = p && task_is_dir(p);
        free(p);
        if (d)
            return 1;
    }
    return 0;
}

static int is_package(const char *dir)
{
    char *p = task_path_join(dir, "definition.json");
    int f = p && task_is_file(p);
    free(p);
    return f;
}

static void load_dataset(kh_task_set *s, const char *root)
{
    char *p;
    if ((p = task_path_join(root, "definitions")))
        load_tree(s, p, ".json", F_DEF);
    free(p);
    if ((p = task_path_join(root, "solutions")))
        load_tree(s, p, ".json", F_SOL);
    free(p);
    if ((p = task_path_join(root, "workloads")))
        load_tree(s, p, ".jsonl", F_WL);
    free(p);
    if ((p = task_path_join(root, "traces")))
        load_tree(s, p, ".jsonl", F_TRACE);
    free(p);
}

static void load_package(kh_task_set *s, const char *root)
{
    char *p;
    if ((p = task_path_join(root, "definition.json")))
        load_def_file(s, p);
    free(p);
    if ((p = task_path_join(root, "solutions")))
        load_tree(s, p, ".json", F_SOL);
    free(p);
    /* workloads: *.jsonl at the top, and under workloads/ */
    DIR *dp = opendir(root);
    if (dp) {
        char **files = NULL;
        size_t n = 0, cap = 0;
        struct dirent *de;
        while ((de = readdir(dp))) {
            size_t l = strlen(de->d_name);
            if (l > 6 && !strcmp(de->d_name + l - 6, ".jsonl") && de->d_name[0] != '.') {
                char *f = task_path_join(root, de->d_name);
                if (f && PUSH(files, n, cap, f))
                    free(f);
            }
        }
        closedir(dp);
        if (n)
            qsort(files, n, sizeof *files, cmp_str);
        for (size_t i = 0; i < n; i++) {
            load_jsonl_file(s, files[i], JL_WORKLOADS);
            free(files[i]);
        }
        free(files);
    }
    if ((p = task_path_join(root, "workloads")))
        load_tree(s, p, ".jsonl", F_WL);
    free(p);
}

/* The dataset or package folder above a single file, or NULL. */
static char *find_root(const char *file, int *pkg)
{
    char *dir = kh_strdup(file);
    if (!dir)
        return NULL;
    for (;;) {
        char *slash = strrchr(dir, '/');
        if (!slash) {
            /* relative path with no folder part: try "." once */
            free(dir);
            dir = kh_strdup(".");
            if (dir && (is_dataset(dir) || is_package(dir))) {
                *pkg = is_package(dir);
                return dir;
            }
            free(dir);
            return NULL;
        }
        if (slash == dir) {
            free(dir);
            return NULL;
        }
        *slash = '\0';
        if (is_package(dir)) {
            *pkg = 1;
            return dir;
        }
        if (is_dataset(dir)) {
            *pkg = 0;
            return dir;
        }
    }
}

/* A lone JSONL file: a package's are workloads; in a dataset, or a path
 * naming one, traces/ and workloads/ say; anything else is told by content. */
static jl_kind jsonl_kind(const char *path, const char *root, int pkg)
{
    if (root && pkg)
        return JL_WORKLOADS;
    if (strstr(path, "/traces/") || !strncmp(path, "traces/", 7))
        return JL_TRACES;
    if (strstr(path, "/workloads/") || !strncmp(path, "workloads/", 10))
        return JL_WORKLOADS;
    return JL_EITHER;
}

static int cmp_wl(const void *pa, const void *pb)
{
    const kh_task_workload *a = *(const kh_task_workload *const *)pa;
    const kh_task_workload *b = *(const kh_task_workload *const *)pb;
    int c = strcmp(a->definition, b->definition);
    if (!c)
        c = strcmp(a->uuid, b->uuid);
    if (!c)
        c = a->seq < b->seq ? -1 : a->seq > b->seq;
    return c;
}

/* Cross-file checks once everything is loaded. */
static void cross_check(kh_task_set *s)
{
    /* duplicate workload uuids within a definition (workload files only):
     * sort by (definition, uuid, file order) and compare neighbours */
    kh_task_workload **sorted = s->nwls ? malloc(s->nwls * sizeof *sorted) : NULL;
    size_t nw = 0;
    for (size_t i = 0; sorted && i < s->nwls; i++)
        if (!s->wls[i]->is_trace && s->wls[i]->uuid && s->wls[i]->definition)
            sorted[nw++] = s->wls[i];
    if (nw)
        qsort(sorted, nw, sizeof *sorted, cmp_wl);
    for (size_t i = 1; i < nw; i++) {
        kh_task_workload *a = sorted[i - 1], *b = sorted[i];
        if (!strcmp(a->uuid, b->uuid) && !strcmp(a->definition, b->definition)) {
            /* report each repeat against the first occurrence */
            size_t first = i - 1;
            while (first > 0 && !strcmp(sorted[first - 1]->uuid, b->uuid) &&
                   !strcmp(sorted[first - 1]->definition, b->definition))
                first--;
            task_add_problem(s, KH_TASK_ERROR, b->file, b->line, "workload.uuid",
                             "duplicate uuid \"%s\" for %s (also %s:%d); expected unique uuids",
                             b->uuid, b->definition, sorted[first]->file, sorted[first]->line);
        }
    }
    free(sorted);
    /* khlua.reference / baseline name a solution of the definition */
    int have_solutions = s->sum.kind && (!strcmp(s->sum.kind, "dataset") ||
                                         !strcmp(s->sum.kind, "package"));
    for (size_t i = 0; i < s->ndefs && have_solutions; i++) {
        kh_task_def *d = s->defs[i];
        const char *names[] = {d->reference, d->baseline};
        const char *keys[] = {"reference", "baseline"};
        for (int k = 0; k < 2; k++) {
            if (!names[k])
                continue;
            const kh_task_solution *sol = kh_task_find_solution(s, names[k]);
            if (!sol || !sol->definition || strcmp(sol->definition, d->name)) {
                size_t len;
                kh_err err;
                char *text = task_read_file(d->file, &len, &err);
                vctx v = {.s = s, .file = d->file, .text = text, .len = text ? len : 0,
                          .base_line = 1};
                vpush(&v, "khlua");
                VERR(&v, keys[k], "expected the name of a solution for %s, got \"%s\"%s", d->name,
                     names[k], sol ? " (a solution of another definition)" : "");
                free(text);
            }
        }
    }
    /* every candidate resolves on every workload of its definition */
    for (size_t i = 0; i < s->nsols; i++) {
        kh_task_solution *sol = s->sols[i];
        kh_task_manifest *m = sol->manifest;
        if (!m || !sol->def)
            continue;
        kh_task_launch_dims *dims = calloc(m->nlaunches + 1, sizeof *dims);
        int64_t *ws = calloc(m->nworkspace + 1, sizeof *ws);
        for (size_t k = 0; dims && ws && k < s->nwls; k++) {
            kh_task_workload *w = s->wls[k];
            if (w->def != sol->def || !w->axes_ok || w->is_trace)
                continue;
            kh_err err;
            if (kh_task_manifest_resolve(sol, w->axes, dims, ws, &err)) {
                task_add_problem(s, KH_TASK_ERROR, sol->file, sol->line, "spec.khlua",
                                 "for workload %s (%s:%d): %s", w->uuid ? w->uuid : "?", w->file,
                                 w->line, err.msg);
                break; /* one workload is enough to show the problem */
            }
        }
        free(dims);
        free(ws);
    }
    /* constraints of the checked definitions (or, checking one file, of the
     * definitions it uses); those that read tensor data listed once */
    for (size_t i = 0; i < s->ndefs; i++) {
        kh_task_def *d = s->defs[i];
        if (d->context && !d->used)
            continue;
        s->sum.constraints += d->nconstraints;
        for (size_t k = 0; k < d->nconstraints; k++) {
            kh_task_constraint *c = &d->constraints[k];
            if (!c->expr || !kh_expr_needs_data(c->expr))
                continue;
            s->sum.deferred++;
            size_t j;
            for (j = 0; j < s->ndeferred && strcmp(s->deferred[j], c->text); j++)
                ;
            if (j == s->ndeferred) {
                char *t = kh_strdup(c->text);
                if (t && PUSH(s->deferred, s->ndeferred, s->capdeferred, t))
                    free(t);
            }
        }
    }
}

static _Atomic size_t n_loads;

size_t kh_task_load_count(void) { return n_loads; }

kh_status kh_task_load(const char *path, const kh_task_opts *opts, kh_task_set **out, kh_err *err)
{
    *out = NULL;
    n_loads++;
    struct stat st;
    if (stat(path, &st))
        return kh_err_set(err, errno == ENOENT ? KH_ENOTFOUND : KH_EIO, "%s: %s", path,
                          strerror(errno));
    kh_task_set *s = calloc(1, sizeof *s);
    if (!s)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    if (opts)
        s->opts = *opts;
    if (S_ISDIR(st.st_mode)) {
        s->root = kh_strdup(path);
        if (is_package(path)) {
            s->sum.kind = "package";
            load_package(s, path);
        } else if (is_dataset(path)) {
            s->sum.kind = "dataset";
            load_dataset(s, path);
        } else {
            kh_task_set_free(s);
            return kh_err_set(err, KH_ENOTFOUND,
                              "%s: neither a dataset (definitions/, workloads/, solutions/, "
                              "traces/) nor a task package (definition.json)", path);
        }
    } else {
        size_t l = strlen(path);
        int jsonl = l > 6 && !strcmp(path + l - 6, ".jsonl");
        int pkg = 0;
        s->root = find_root(path, &pkg);
        if (jsonl) {
            s->sum.kind = "workloads";
            if (s->root) {
                s->quiet = 1;
                if (pkg) {
                    char *p = task_path_join(s->root, "definition.json");
                    if (p)
                        load_def_file(s, p);
                    free(p);
                } else {
                    char *p = task_path_join(s->root, "definitions");
                    if (p)
                        load_tree(s, p, ".json", F_DEF);
                    free(p);
                }
                s->quiet = 0;
                s->sum.files = 0;
            }
            load_jsonl_file(s, path, jsonl_kind(path, s->root, pkg));
        } else {
            size_t len;
            char *text = task_read_file(path, &len, err);
            if (!text) {
                kh_task_set_free(s);
                return err ? err->code : KH_EIO;
            }
            json_error_t je;
            json_t *j = parse_json(text, len, &je);
            int is_sol = json_is_object(j) && json_object_get(j, "spec");
            json_decref(j);
            free(text);
            if (is_sol) {
                s->sum.kind = "solution";
                if (!s->root && opts && opts->defs_from) {
                    /* a Solution from anywhere, checked against the definitions
                     * of the package or dataset it is for */
                    s->quiet = 1;
                    char *p = task_path_join(opts->defs_from, "definition.json");
                    char *q = task_path_join(opts->defs_from, "definitions");
                    if (p && is_package(opts->defs_from))
                        load_def_file(s, p);
                    else if (q && is_dataset(opts->defs_from))
                        load_tree(s, q, ".json", F_DEF);
                    free(p);
                    free(q);
                    s->quiet = 0;
                    s->sum.files = 0;
                } else if (s->root) {
                    s->quiet = 1;
                    char *p = task_path_join(s->root, pkg ? "definition.json" : "definitions");
                    if (p && pkg)
                        load_def_file(s, p);
                    else if (p)
                        load_tree(s, p, ".json", F_DEF);
                    free(p);
                    s->quiet = 0;
                    s->sum.files = 0;
                }
                load_solution_file(s, path);
            } else {
                s->sum.kind = "definition";
                load_def_file(s, path);
            }
        }
    }
    cross_check(s);
    if (s->opts.python)
        task_check_python(s, path);
    *out = s;
    return KH_OK;
}

kh_status kh_task_solution_from_text(const kh_task_set *defs, const char *label, const char *text,
                                     size_t len, kh_task_set **out, kh_err *err)
{
    *out = NULL;
    if (!defs || !label || !text)
        return kh_err_set(err, KH_EINVAL, "a solution text needs its task and a label");
    kh_task_set *s = calloc(1, sizeof *s);
    if (!s)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    s->borrow = defs;
    s->sum.kind = "solution";
    s->sum.files = 1;
    json_t *j = load_json_text(s, label, text, len, 1);
    if (j && !(json_is_object(j) && json_object_get(j, "spec")))
        task_add_problem(s, KH_TASK_ERROR, label, 1, "spec",
                         "not a Solution: expected an object with name, definition, spec and sources");
    else if (j)
        load_solution_text(s, label, text, len, j);
    json_decref(j);
    *out = s;
    return KH_OK;
}

void kh_task_set_free(kh_task_set *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->ndefs; i++)
        task_def_free(s->defs[i]);
    for (size_t i = 0; i < s->nwls; i++)
        task_wl_free(s->wls[i]);
    for (size_t i = 0; i < s->nsols; i++)
        task_sol_free(s->sols[i]);
    for (size_t i = 0; i < s->nprobs; i++) {
        free(s->probs[i].file);
        free(s->probs[i].field);
        free(s->probs[i].msg);
    }
    for (size_t i = 0; i < s->ndeferred; i++)
        free(s->deferred[i]);
    free(s->defs);
    free(s->wls);
    free(s->sols);
    free(s->probs);
    free(s->deferred);
    free(s->root);
    free(s);
}

const kh_task_summary *kh_task_set_summary(const kh_task_set *s) { return &s->sum; }
size_t kh_task_nproblems(const kh_task_set *s) { return s->nprobs; }
const kh_task_problem *kh_task_problem_at(const kh_task_set *s, size_t i)
{
    return i < s->nprobs ? &s->probs[i] : NULL;
}
size_t kh_task_ndeferred(const kh_task_set *s) { return s->ndeferred; }
const char *kh_task_deferred_at(const kh_task_set *s, size_t i)
{
    return i < s->ndeferred ? s->deferred[i] : NULL;
}
size_t kh_task_ndefs(const kh_task_set *s) { return s->ndefs; }
const kh_task_def *kh_task_def_at(const kh_task_set *s, size_t i)
{
    return i < s->ndefs ? s->defs[i] : NULL;
}
kh_status kh_task_check_errors(const kh_task_set *s, const char *path, kh_err *err)
{
    const kh_task_problem *first = NULL;
    size_t n = 0;
    for (size_t i = 0; i < s->nprobs; i++)
        if (s->probs[i].severity == KH_TASK_ERROR && s->probs[i].field &&
            !strcmp(s->probs[i].field, "json") && !n++)
            first = &s->probs[i];
    if (!n)
        return KH_OK;
    char buf[1024];
    if (n == 1)
        return kh_err_set(err, KH_EPARSE, "%s", kh_task_problem_format(first, buf, sizeof buf));
    return kh_err_set(err, KH_EPARSE, "%s (and %zu more unreadable: khlua task check %s lists "
                      "them)", kh_task_problem_format(first, buf, sizeof buf), n - 1, path);
}

size_t kh_task_bind_definitions(kh_task_set *sols, const kh_task_set *defs)
{
    size_t left = 0;
    for (size_t i = 0; i < sols->nsols; i++) {
        kh_task_solution *x = sols->sols[i];
        if (!x->def && x->definition)
            x->def = kh_task_find_def(defs, x->definition);
        left += !x->def;
    }
    return left;
}

size_t kh_task_nworkloads(const kh_task_set *s) { return s->nwls; }
const kh_task_workload *kh_task_workload_at(const kh_task_set *s, size_t i)
{
    return i < s->nwls ? s->wls[i] : NULL;
}
size_t kh_task_nsolutions(const kh_task_set *s) { return s->nsols; }
const kh_task_solution *kh_task_solution_at(const kh_task_set *s, size_t i)
{
    return i < s->nsols ? s->sols[i] : NULL;
}
const kh_task_solution *kh_task_find_solution(const kh_task_set *s, const char *name)
{
    for (size_t i = 0; name && i < s->nsols; i++)
        if (s->sols[i]->name && !strcmp(s->sols[i]->name, name))
            return s->sols[i];
    return NULL;
}
