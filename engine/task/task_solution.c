/* task_solution.c: FlashInfer-Bench Solutions and khlua's candidate
 * manifests (spec.khlua): sources, the entry point, launches and argument
 * bindings checked against the definition; a solution's sources for NVRTC;
 * manifest resolution (grids, blocks, workspace sizes for a workload). */
#include "task/task_int.h"

#include "compile/srccheck.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- solutions and candidate manifests --------------------------------------------- */
static void args_free(kh_task_arg *a, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(a[i].name);
        free(a[i].type);
        kh_expr_free(a[i].expr);
    }
    free(a);
}

static void manifest_free(kh_task_manifest *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->nlaunches; i++) {
        kh_task_launch *l = &m->launches[i];
        free(l->kernel);
        for (int k = 0; k < 3; k++) {
            kh_expr_free(l->grid[k]);
            kh_expr_free(l->block[k]);
        }
        kh_expr_free(l->shared_bytes);
        args_free(l->args, l->nargs);
    }
    free(m->launches);
    for (size_t i = 0; i < m->nworkspace; i++) {
        free(m->workspace[i].name);
        kh_expr_free(m->workspace[i].bytes);
    }
    free(m->workspace);
    args_free(m->args, m->nargs);
    free(m->function);
    for (size_t i = 0; i < m->nlink; i++)
        free(m->link[i]);
    free(m->link);
    free(m);
}

void task_sol_free(kh_task_solution *s)
{
    if (!s)
        return;
    free(s->name);
    free(s->definition);
    free(s->author);
    free(s->file);
    free(s->language);
    free(s->entry_file);
    free(s->entry_function);
    manifest_free(s->manifest);
    json_decref(s->json);
    free(s);
}

/* Parse one argument binding {"input": n} | {"output": n} | {"workspace": n} |
 * {"scalar": n} | {"axis": n, "type"?} | {"value": expr, "type"?}. */
static int parse_arg(vctx *v, const kh_task_def *d, const kh_task_manifest *m, json_t *j,
                     kh_task_arg *a)
{
    if (!json_is_object(j)) {
        VERR(v, NULL, "expected an object such as {\"input\": \"x\"}, got %s", task_jtype(j));
        return -1;
    }
    static const char *const kinds[] = {"input", "output", "workspace", "scalar", "axis", "value"};
    int kind = -1, nk = 0;
    for (int i = 0; i < 6; i++)
        if (json_object_get(j, kinds[i])) {
            kind = i;
            nk++;
        }
    static const char *const known[] = {"input", "output", "workspace", "scalar", "axis", "value",
                                        "type"};
    task_check_known_keys(v, j, known, KH_ARRAY_LEN(known), KH_TASK_ERROR,
                          "expected one of input, output, workspace, scalar, axis, value (+ type)");
    if (nk != 1) {
        VERR(v, NULL, "expected exactly one of input, output, workspace, scalar, axis, value; "
                      "got %d", nk);
        return -1;
    }
    const char *type = task_get_str(v, j, "type", 0, 1);
    if (type && kind < 4)
        VERR(v, "type", "only axis and value arguments take a type");
    if (type && strcmp(type, "int32") && strcmp(type, "int64") && strcmp(type, "uint32") &&
        strcmp(type, "uint64")) {
        VERR(v, "type", "expected int32, int64, uint32 or uint64, got \"%s\"", type);
        return -1;
    }
    if (kind == 5) {
        a->kind = KH_TASK_ARG_VALUE;
        if (!(a->expr = task_parse_expr_field(v, json_object_get(j, "value"), "value")))
            return -1;
        if (d && task_check_expr_names(v, d, a->expr, 0, "value"))
            return -1;
        a->type = kh_strdup(type ? type : "int32");
        return 0;
    }
    const char *name = task_get_str(v, j, kinds[kind], 1, 1);
    if (!name)
        return -1;
    if (kind == 4) {
        a->kind = KH_TASK_ARG_VALUE;
        if (d && kh_task_axis_index(d, name) < 0) {
            VERR(v, "axis", "expected an axis of %s, got \"%s\"", d->name, name);
            return -1;
        }
        kh_err err;
        if (kh_expr_parse(name, &a->expr, &err)) {
            VERR(v, "axis", "expected an axis name, got \"%s\"", name);
            return -1;
        }
        a->type = kh_strdup(type ? type : "int32");
        return 0;
    }
    a->name = kh_strdup(name);
    if (kind == 2) {
        a->kind = KH_TASK_ARG_WORKSPACE;
        for (size_t i = 0; i < m->nworkspace; i++)
            if (!strcmp(m->workspace[i].name, name))
                return 0;
        VERR(v, "workspace", "expected a buffer declared in spec.khlua.workspace, got \"%s\"", name);
        return -1;
    }
    if (!d) {
        a->kind = kind == 0 ? KH_TASK_ARG_INPUT : kind == 1 ? KH_TASK_ARG_OUTPUT : KH_TASK_ARG_SCALAR;
        return 0;
    }
    int is_out = 0;
    const kh_task_tensor *t = task_find_tensor(d, name, &is_out);
    if (kind == 0) {
        a->kind = KH_TASK_ARG_INPUT;
        if (!t || is_out || t->is_scalar) {
            VERR(v, "input", "expected a tensor input of %s, got \"%s\"%s", d->name, name,
                 t && t->is_scalar ? " (a scalar: bind it with \"scalar\")" : "");
            return -1;
        }
    } else if (kind == 1) {
        a->kind = KH_TASK_ARG_OUTPUT;
        if (!t || !is_out) {
            VERR(v, "output", "expected an output of %s, got \"%s\"", d->name, name);
            return -1;
        }
    } else {
        a->kind = KH_TASK_ARG_SCALAR;
        if (!t || is_out || !t->is_scalar) {
            VERR(v, "scalar", "expected a scalar (shape null) input of %s, got \"%s\"", d->name,
                 name);
            return -1;
        }
    }
    return 0;
}

static void parse_args(vctx *v, const kh_task_def *d, const kh_task_manifest *m, json_t *arr,
                       kh_task_arg **out, size_t *n, int *bound_outputs)
{
    if (!arr) {
        VERR(v, "args", "missing; expected an array of argument bindings");
        return;
    }
    if (!json_is_array(arr)) {
        VERR(v, "args", "expected an array of argument bindings, got %s", task_jtype(arr));
        return;
    }
    *out = calloc(json_array_size(arr) + 1, sizeof **out);
    if (!*out)
        return;
    size_t i;
    json_t *j;
    vpush(v, "args");
    json_array_foreach(arr, i, j) {
        vpush_i(v, (long)i);
        kh_task_arg *a = &(*out)[*n];
        if (parse_arg(v, d, m, j, a)) {
            free(a->name);
            free(a->type);
            kh_expr_free(a->expr);
            memset(a, 0, sizeof *a);
        } else {
            if (a->kind == KH_TASK_ARG_OUTPUT && d && bound_outputs)
                for (size_t k = 0; k < d->noutputs; k++)
                    if (!strcmp(d->outputs[k].name, a->name))
                        bound_outputs[k] = 1;
            (*n)++;
        }
        vpop(v);
    }
    vpop(v);
}

/* grid / block: one expression, or an array of 1 to 3. */
static void parse_dims(vctx *v, const kh_task_def *d, json_t *j, const char *key, kh_expr **dst)
{
    if (!j) {
        VERR(v, key, "missing; expected an expression or an array of 1 to 3 expressions");
        return;
    }
    if (!json_is_array(j)) {
        if ((dst[0] = task_parse_expr_field(v, j, key)) && d &&
            task_check_expr_names(v, d, dst[0], 0, key)) {
            kh_expr_free(dst[0]);
            dst[0] = NULL;
        }
        return;
    }
    if (json_array_size(j) < 1 || json_array_size(j) > 3) {
        VERR(v, key, "expected 1 to 3 expressions (x, y, z), got %zu", json_array_size(j));
        return;
    }
    vpush(v, key);
    for (size_t k = 0; k < json_array_size(j); k++) {
        vpush_i(v, (long)k);
        if ((dst[k] = task_parse_expr_field(v, json_array_get(j, k), NULL)) && d &&
            task_check_expr_names(v, d, dst[k], 0, NULL)) {
            kh_expr_free(dst[k]);
            dst[k] = NULL;
        }
        vpop(v);
    }
    vpop(v);
}

/* spec.khlua.workspace: name -> {bytes: expression, zero: bool}. */
static void parse_workspace(vctx *v, const kh_task_def *d, kh_task_manifest *m, json_t *ws)
{
    if (ws && !json_is_object(ws)) {
        VERR(v, "workspace", "expected an object of name: {bytes, zero}, got %s", task_jtype(ws));
    } else if (ws && (m->workspace = calloc(json_object_size(ws) + 1, sizeof *m->workspace))) {
        const char *name;
        json_t *w;
        vpush(v, "workspace");
        json_object_foreach(ws, name, w) {
            vpush(v, name);
            if (!json_is_object(w)) {
                VERR(v, NULL, "expected an object {\"bytes\": expression}, got %s", task_jtype(w));
            } else {
                static const char *const wk[] = {"bytes", "zero"};
                task_check_known_keys(v, w, wk, 2, KH_TASK_ERROR, "expected bytes or zero");
                json_t *z = json_object_get(w, "zero");
                if (z && !json_is_boolean(z))
                    VERR(v, "zero", "expected true or false, got %s", task_jtype(z));
                json_t *b = json_object_get(w, "bytes");
                kh_expr *e = NULL;
                if (!b)
                    VERR(v, "bytes", "missing; expected an integer expression over the axes");
                else if ((e = task_parse_expr_field(v, b, "bytes")) && d &&
                         task_check_expr_names(v, d, e, 0, "bytes")) {
                    kh_expr_free(e);
                    e = NULL;
                }
                if (e) {
                    kh_task_workspace *x = &m->workspace[m->nworkspace++];
                    x->name = kh_strdup(name);
                    x->bytes = e;
                    x->zero = json_is_true(z);
                }
            }
            vpop(v);
        }
        vpop(v);
    }
}

/* spec.khlua.link: the libraries a cuda_so solution links (names only). */
static void parse_link(vctx *v, kh_task_manifest *m, json_t *link)
{
    if (link && !m->so) {
        VERR(v, "link", "only a cuda_so solution links libraries");
    } else if (link && !json_is_array(link)) {
        VERR(v, "link", "expected an array of library names (\"cublas\"), got %s",
             task_jtype(link));
    } else if (link && (m->link = calloc(json_array_size(link) + 1, sizeof *m->link))) {
        size_t i;
        json_t *l;
        json_array_foreach(link, i, l) {
            const char *lib = json_string_value(l);
            /* a name, never a flag or a path: it becomes -l<name> on nvcc's command line */
            if (!lib || !task_is_ident(lib))
                VERR(v, "link", "entry %zu: expected a library name such as \"cublas\"", i);
            else
                m->link[m->nlink++] = kh_strdup(lib);
        }
    }
}

/* spec.khlua.launches of a cuda candidate: kernel, grid, block,
 * shared_bytes and args per launch; the entry point must be one of them.
 * bound[i] is set for each output an argument binds. */
static void parse_launches(vctx *v, const kh_task_solution *s, kh_task_manifest *m, json_t *ls,
                           int *bound)
{
    const kh_task_def *d = s->def;
    if (!ls) {
        VERR(v, "launches", "missing; expected an array of launches");
    } else if (!json_is_array(ls) || json_array_size(ls) == 0) {
        VERR(v, "launches", "expected a non-empty array of launches, got %s",
             json_is_array(ls) ? "an empty array" : task_jtype(ls));
    } else if ((m->launches = calloc(json_array_size(ls), sizeof *m->launches))) {
        size_t i;
        json_t *l;
        int entry_found = 0;
        vpush(v, "launches");
        json_array_foreach(ls, i, l) {
            vpush_i(v, (long)i);
            if (!json_is_object(l)) {
                VERR(v, NULL, "expected a launch object {kernel, grid, block, args}, got %s",
                     task_jtype(l));
                vpop(v);
                continue;
            }
            kh_task_launch *x = &m->launches[m->nlaunches++];
            static const char *const lk[] = {"kernel", "grid", "block", "shared_bytes", "args"};
            task_check_known_keys(v, l, lk, KH_ARRAY_LEN(lk), KH_TASK_ERROR,
                                  "expected kernel, grid, block, shared_bytes or args");
            const char *kern = task_get_str(v, l, "kernel", 1, 1);
            if (kern && !task_is_ident(kern))
                VERR(v, "kernel", "expected a kernel (function) name, got \"%s\"", kern);
            x->kernel = kh_strdup(kern);
            if (kern && s->entry_function && !strcmp(kern, s->entry_function))
                entry_found = 1;
            parse_dims(v, d, json_object_get(l, "grid"), "grid", x->grid);
            parse_dims(v, d, json_object_get(l, "block"), "block", x->block);
            json_t *sh = json_object_get(l, "shared_bytes");
            if (sh && (x->shared_bytes = task_parse_expr_field(v, sh, "shared_bytes")) && d &&
                task_check_expr_names(v, d, x->shared_bytes, 0, "shared_bytes")) {
                kh_expr_free(x->shared_bytes);
                x->shared_bytes = NULL;
            }
            parse_args(v, d, m, json_object_get(l, "args"), &x->args, &x->nargs, bound);
            vpop(v);
        }
        vpop(v);
        if (s->entry_function && m->nlaunches && !entry_found) {
            vpop(v);
            VERR(v, "entry_point",
                 "function '%s' is launched by no entry of spec.khlua.launches; expected it to "
                 "name a launched kernel", s->entry_function);
            vpush(v, "khlua");
        }
    }
}

/* spec.khlua, the launch manifest: backend, workspace, then launches (cuda)
 * or function and args (host, cuda_so), link (cuda_so). */
static kh_task_manifest *parse_manifest(vctx *v, kh_task_solution *s, json_t *k)
{
    const kh_task_def *d = s->def;
    if (!json_is_object(k)) {
        VERR(v, "khlua", "expected a launch manifest object, got %s", task_jtype(k));
        return NULL;
    }
    kh_task_manifest *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    vpush(v, "khlua");
    static const char *const known[] = {"backend", "launches", "workspace", "function", "args",
                                        "link"};
    task_check_known_keys(v, k, known, KH_ARRAY_LEN(known), KH_TASK_ERROR,
                          "expected backend, launches, workspace, function, args or link");
    const char *backend = task_get_str(v, k, "backend", 0, 1);
    if (!backend)
        backend = s->language && !strcmp(s->language, "cpp") ? "host" : "cuda";
    if (strcmp(backend, "cuda") && strcmp(backend, "host") && strcmp(backend, "cuda_so")) {
        VERR(v, "backend", "expected \"cuda\", \"host\" or \"cuda_so\", got \"%s\"", backend);
        backend = "cuda";
    }
    m->host = !strcmp(backend, "host");
    m->so = !strcmp(backend, "cuda_so");
    const char *want_lang = m->host ? "cpp" : "cuda";
    if (s->language && strcmp(s->language, want_lang)) {
        vpop(v);
        VERR(v, "language", "a %s-backend candidate expects language \"%s\", got \"%s\"", backend,
             want_lang, s->language);
        vpush(v, "khlua");
    }
    parse_workspace(v, d, m, json_object_get(k, "workspace"));
    int *bound = d ? calloc(d->noutputs + 1, sizeof *bound) : NULL;
    parse_link(v, m, json_object_get(k, "link"));
    if (m->host || m->so) {
        const char *fn = task_get_str(v, k, "function", 0, 1);
        if (!fn)
            fn = s->entry_function;
        if (fn && !task_is_ident(fn))
            VERR(v, "function", "expected a C function name, got \"%s\"", fn);
        m->function = kh_strdup(fn);
        if (json_object_get(k, "launches"))
            VERR(v, "launches", "a %s solution has no launches; expected function and args",
                 m->host ? "host-backend" : "cuda_so");
        parse_args(v, d, m, json_object_get(k, "args"), &m->args, &m->nargs, bound);
    } else {
        if (json_object_get(k, "args"))
            VERR(v, "args", "a cuda candidate binds arguments per launch; expected launches[].args");
        if (json_object_get(k, "function"))
            VERR(v, "function", "a cuda candidate names kernels per launch; expected launches[].kernel");
        parse_launches(v, s, m, json_object_get(k, "launches"), bound);
    }
    if (d && bound)
        for (size_t i = 0; i < d->noutputs; i++)
            if (!bound[i])
                VWARN(v, NULL, "output '%s' is bound to no argument; nothing can write it",
                      d->outputs[i].name);
    free(bound);
    vpop(v);
    return m;
}

/* sources: a non-empty array of {path, content}, relative paths without
 * '..', each path once. */
static void check_sources(vctx *v, json_t *src)
{
    if (!src) {
        VERR(v, "sources", "missing; expected an array of {path, content}");
    } else if (!json_is_array(src) || json_array_size(src) == 0) {
        VERR(v, "sources", "expected a non-empty array of {path, content}, got %s",
             json_is_array(src) ? "an empty array" : task_jtype(src));
    } else {
        size_t i;
        json_t *f;
        vpush(v, "sources");
        json_array_foreach(src, i, f) {
            vpush_i(v, (long)i);
            if (!json_is_object(f)) {
                VERR(v, NULL, "expected an object {path, content}, got %s", task_jtype(f));
                vpop(v);
                continue;
            }
            const char *p = task_get_str(v, f, "path", 1, 1);
            task_get_str(v, f, "content", 1, 1);
            if (p && (p[0] == '/' || !strcmp(p, "..") || !strncmp(p, "../", 3) ||
                      strstr(p, "/../") || (strlen(p) >= 3 && !strcmp(p + strlen(p) - 3, "/.."))))
                VERR(v, "path", "expected a relative path without '..', got \"%s\"", p);
            for (size_t k = 0; p && k < i; k++) {
                const char *q = json_string_value(json_object_get(json_array_get(src, k), "path"));
                if (q && !strcmp(p, q)) {
                    VERR(v, "path", "duplicate source path \"%s\" (also sources[%zu]); expected "
                                    "unique paths", p, k);
                    break;
                }
            }
            vpop(v);
        }
        vpop(v);
    }
}

/* spec.entry_point "<file>::<function>", the file one of the sources. */
static void parse_entry_point(vctx *v, kh_task_solution *s, const char *ep, json_t *src)
{
    const char *sep = strstr(ep, "::");
    if (!sep || strstr(sep + 2, "::") || sep == ep || !sep[2]) {
        VERR(v, "entry_point", "expected \"<file>::<function>\" with exactly one '::', got \"%s\"",
             ep);
    } else {
        s->entry_file = strndup(ep, (size_t)(sep - ep));
        s->entry_function = kh_strdup(sep + 2);
        int found = 0;
        char names[400] = "";
        size_t used = 0;
        for (size_t i = 0; json_is_array(src) && i < json_array_size(src); i++) {
            const char *p = json_string_value(json_object_get(json_array_get(src, i), "path"));
            if (!p)
                continue;
            if (s->entry_file && !strcmp(p, s->entry_file))
                found = 1;
            if (used < sizeof names)
                used += (size_t)snprintf(names + used, sizeof names - used, "%s%s",
                                         used ? ", " : "", p);
        }
        if (!found && json_is_array(src) && json_array_size(src))
            VERR(v, "entry_point", "file \"%s\" is not among sources (%s); expected "
                                   "\"<file>::<function>\" naming a source file",
                 s->entry_file, names);
    }
}

/* A CUDA candidate's other sources reach NVRTC as headers named by their
 * paths: only the names compile.c takes (the one it checks beyond these, a
 * toolkit header's name, needs the toolkit). */
static void check_header_names(vctx *v, const kh_task_solution *s, json_t *src)
{
    size_t i;
    json_t *f;
    vpush(v, "sources");
    json_array_foreach(src, i, f) {
        const char *p = json_string_value(json_object_get(f, "path"));
        const char *why = p && !(s->entry_file && !strcmp(p, s->entry_file))
                              ? kh_srccheck_header_name_problem(p)
                              : NULL;
        /* an absolute path or '..' is check_sources's, for every solution */
        if (why && (p[0] == '/' || strstr(why, "'..'")))
            why = NULL;
        if (why) {
            vpush_i(v, (long)i);
            VERR(v, "path", "\"%s\" cannot be a header of a CUDA candidate (NVRTC finds "
                            "it by this name): %s; expected a plain file name or a relative "
                            "path such as util.cuh or include/util.cuh", p, why);
            vpop(v);
        }
    }
    vpop(v);
}

kh_task_solution *task_parse_solution(vctx *v, json_t *root)
{
    if (!json_is_object(root)) {
        VERR(v, NULL, "expected a Solution object, got %s", task_jtype(root));
        return NULL;
    }
    kh_task_solution *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->json = json_incref(root);
    s->file = kh_strdup(v->file);
    s->line = v->base_line;
    s->dps = 1;
    static const char *const known[] = {"name", "definition", "author", "description", "spec",
                                        "sources"};
    task_check_known_keys(v, root, known, KH_ARRAY_LEN(known), KH_TASK_WARNING,
                          "FlashInfer-Bench ignores it (khlua's additions go under spec.khlua)");
    const char *x;
    if ((x = task_get_str(v, root, "name", 1, 1)))
        s->name = kh_strdup(x);
    if ((x = task_get_str(v, root, "definition", 1, 1)))
        s->definition = kh_strdup(x);
    if ((x = task_get_str(v, root, "author", 1, 1)))
        s->author = kh_strdup(x);
    task_get_opt_str(v, root, "description");
    if (s->definition)
        s->def = kh_task_find_def(v->s, s->definition);
    if (s->def)
        ((kh_task_def *)s->def)->used = 1; /* the set owns it; const only to users */

    /* sources first: the entry point must name one of them */
    json_t *src = json_object_get(root, "sources");
    check_sources(v, src);

    json_t *spec = json_object_get(root, "spec");
    if (!spec) {
        VERR(v, "spec", "missing; expected an object {language, target_hardware, entry_point}");
        return s;
    }
    if (!json_is_object(spec)) {
        VERR(v, "spec", "expected an object {language, target_hardware, entry_point}, got %s",
             task_jtype(spec));
        return s;
    }
    vpush(v, "spec");
    static const char *const sk[] = {"language", "target_hardware", "entry_point", "dependencies",
                                     "destination_passing_style", "binding", "khlua"};
    task_check_known_keys(v, spec, sk, KH_ARRAY_LEN(sk), KH_TASK_WARNING,
                          "FlashInfer-Bench ignores it");
    const char *lang = task_get_str(v, spec, "language", 1, 1);
    if (lang && strcmp(lang, "python") && strcmp(lang, "triton") && strcmp(lang, "cpp") &&
        strcmp(lang, "cuda") && strcmp(lang, "tilelang"))
        VERR(v, "language", "expected python, triton, cpp, cuda or tilelang, got \"%s\"", lang);
    else if (lang)
        s->language = kh_strdup(lang);
    if (!json_object_get(spec, "target_hardware"))
        VERR(v, "target_hardware", "missing; expected an array of at least one string");
    task_check_str_array(v, spec, "target_hardware", 1, 0);
    task_check_str_array(v, spec, "dependencies", 0, 1);
    json_t *dps = json_object_get(spec, "destination_passing_style");
    if (dps && !json_is_boolean(dps))
        VERR(v, "destination_passing_style", "expected true or false, got %s", task_jtype(dps));
    else if (dps)
        s->dps = json_is_true(dps);
    json_t *bind = json_object_get(spec, "binding");
    if (bind && !json_is_null(bind) &&
        (!json_is_string(bind) ||
         (strcmp(json_string_value(bind), "tvm-ffi") && strcmp(json_string_value(bind), "torch"))))
        VERR(v, "binding", "expected \"tvm-ffi\", \"torch\" or null, got %s%s%s", task_jtype(bind),
             json_is_string(bind) ? " " : "", json_is_string(bind) ? json_string_value(bind) : "");
    const char *ep = task_get_str(v, spec, "entry_point", 1, 1);
    if (ep)
        parse_entry_point(v, s, ep, src);
    json_t *k = json_object_get(spec, "khlua");
    if (k) {
        if (!s->dps)
            VERR(v, "destination_passing_style",
                 "a khlua candidate writes into preallocated outputs; expected true");
        s->manifest = parse_manifest(v, s, k);
    } else {
        /* a valid FlashInfer-Bench Solution that eval will refuse: said here,
         * in eval's words, so a check of a dataset does not promise more */
        const char *b = json_string_value(bind);
        int compiled = s->language && (!strcmp(s->language, "cuda") || !strcmp(s->language, "cpp"));
        VWARN(v, "khlua", "solution '%s' (%s%s%s) %s; khlua eval refuses it",
              s->name ? s->name : "?", s->language ? s->language : "?", compiled ? ", " : "",
              compiled ? (b ? b : "tvm-ffi") : "", kh_task_unrunnable(s));
    }
    vpop(v);
    if (s->manifest && !s->manifest->host && !s->manifest->so && json_is_array(src))
        check_header_names(v, s, src);
    return s;
}

const char *kh_task_unrunnable(const kh_task_solution *sol)
{
    if (sol->manifest)
        return NULL;
    return "has no khlua manifest (spec.khlua): khlua runs candidates with a launch manifest, "
           "not Python or host code that launches itself";
}

kh_status kh_task_solution_errors(const kh_task_set *s, const kh_task_solution *sol, kh_err *err)
{
    const kh_task_problem *first = NULL;
    size_t n = 0;
    for (size_t i = 0; i < s->nprobs; i++) {
        const kh_task_problem *p = &s->probs[i];
        if (p->severity == KH_TASK_ERROR && sol->file && p->file && !strcmp(p->file, sol->file) &&
            !n++)
            first = p;
    }
    if (!n)
        return KH_OK;
    char buf[1024];
    kh_task_problem_format(first, buf, sizeof buf);
    if (n == 1)
        return kh_err_set(err, KH_EINVAL, "solution %s is not usable: %s", sol->name ? sol->name : "?",
                          buf);
    return kh_err_set(err, KH_EINVAL, "solution %s is not usable: %s (and %zu more)",
                      sol->name ? sol->name : "?", buf, n - 1);
}

kh_status kh_task_cuda_sources(const kh_task_solution *sol, const char **src, size_t *len,
                               kh_source **headers, size_t *n, kh_err *err)
{
    json_t *srcs = json_object_get(sol->json, "sources");
    size_t ns = json_array_size(srcs), nh = 0, i;
    json_t *f;
    *src = NULL;
    *len = 0;
    *headers = NULL;
    *n = 0;
    kh_source *h = calloc(ns ? ns : 1, sizeof *h);
    if (!h)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    json_array_foreach(srcs, i, f) {
        const char *p = json_string_value(json_object_get(f, "path"));
        json_t *c = json_object_get(f, "content");
        if (!p || !json_is_string(c)) {
            free(h);
            return kh_err_set(err, KH_EINVAL, "sources[%zu] has no path or no content", i);
        }
        /* the length as stored: a NUL inside is the checks' to refuse, not to cut */
        if (sol->entry_file && !strcmp(p, sol->entry_file)) {
            *src = json_string_value(c);
            *len = json_string_length(c);
        } else {
            h[nh++] = (kh_source){.name = p, .text = json_string_value(c),
                                  .len = json_string_length(c)};
        }
    }
    if (!*src) {
        free(h);
        return kh_err_set(err, KH_EINVAL, "entry file '%s' is not among the sources",
                          sol->entry_file ? sol->entry_file : "?");
    }
    *headers = h;
    *n = nh;
    return KH_OK;
}

/* ---- manifest resolution ------------------------------------------------------ */
static kh_status eval_dim(const kh_task_def *d, const int64_t *axes, const kh_expr *e, int64_t dflt,
                          int64_t *out, const char *what, kh_err *err)
{
    if (!e) {
        *out = dflt;
        return KH_OK;
    }
    kh_status st = kh_task_eval(d, axes, e, NULL, NULL, out, err);
    if (st)
        return kh_err_prefix(err, "%s '%s'", what, kh_expr_text(e));
    return KH_OK;
}

kh_status kh_task_manifest_resolve(const kh_task_solution *sol, const int64_t *axes,
                                   kh_task_launch_dims *dims, int64_t *ws_bytes, kh_err *err)
{
    const kh_task_manifest *m = sol->manifest;
    const kh_task_def *d = sol->def;
    if (!m)
        return kh_err_set(err, KH_EINVAL, "%s is not a khlua candidate (no spec.khlua)",
                          sol->name ? sol->name : "solution");
    if (!d)
        return kh_err_set(err, KH_ENOTFOUND, "definition of %s not loaded",
                          sol->name ? sol->name : "solution");
    char what[96];
    kh_status st;
    for (size_t i = 0; i < m->nworkspace; i++) {
        snprintf(what, sizeof what, "workspace.%s.bytes", m->workspace[i].name);
        if ((st = eval_dim(d, axes, m->workspace[i].bytes, 0, &ws_bytes[i], what, err)))
            return st;
        if (ws_bytes[i] < 0)
            return kh_err_set(err, KH_EINVAL, "%s '%s' is %lld; expected >= 0", what,
                              kh_expr_text(m->workspace[i].bytes), (long long)ws_bytes[i]);
    }
    static const char xyz[] = "xyz";
    for (size_t i = 0; i < m->nlaunches; i++) {
        const kh_task_launch *l = &m->launches[i];
        kh_task_launch_dims *o = &dims[i];
        int64_t threads = 1;
        for (int k = 0; k < 3; k++) {
            snprintf(what, sizeof what, "launches[%zu].grid.%c", i, xyz[k]);
            if ((st = eval_dim(d, axes, l->grid[k], 1, &o->grid[k], what, err)))
                return st;
            if (o->grid[k] < 1 || o->grid[k] > (k ? 65535 : 2147483647))
                return kh_err_set(err, KH_EINVAL, "%s = %lld; expected 1 to %d", what,
                                  (long long)o->grid[k], k ? 65535 : 2147483647);
            snprintf(what, sizeof what, "launches[%zu].block.%c", i, xyz[k]);
            if ((st = eval_dim(d, axes, l->block[k], 1, &o->block[k], what, err)))
                return st;
            if (o->block[k] < 1 || o->block[k] > (k == 2 ? 64 : 1024))
                return kh_err_set(err, KH_EINVAL, "%s = %lld; expected 1 to %d", what,
                                  (long long)o->block[k], k == 2 ? 64 : 1024);
            threads *= o->block[k];
        }
        if (threads > 1024)
            return kh_err_set(err, KH_EINVAL, "launches[%zu].block has %lld threads; expected at "
                                              "most 1024", i, (long long)threads);
        snprintf(what, sizeof what, "launches[%zu].shared_bytes", i);
        if ((st = eval_dim(d, axes, l->shared_bytes, 0, &o->shared_bytes, what, err)))
            return st;
        if (o->shared_bytes < 0)
            return kh_err_set(err, KH_EINVAL, "%s = %lld; expected >= 0", what,
                              (long long)o->shared_bytes);
        for (size_t a = 0; a < l->nargs; a++) {
            int64_t val;
            if (l->args[a].kind != KH_TASK_ARG_VALUE)
                continue;
            snprintf(what, sizeof what, "launches[%zu].args[%zu].value", i, a);
            if ((st = eval_dim(d, axes, l->args[a].expr, 0, &val, what, err)))
                return st;
        }
    }
    for (size_t a = 0; a < m->nargs; a++) {
        int64_t val;
        if (m->args[a].kind != KH_TASK_ARG_VALUE)
            continue;
        snprintf(what, sizeof what, "args[%zu].value", a);
        if ((st = eval_dim(d, axes, m->args[a].expr, 0, &val, what, err)))
            return st;
    }
    return KH_OK;
}
