/* fib_export.c: a khlua CUDA solution as a FlashInfer-Bench Solution
 * (fib_export.h).  Owns which source goes where and the C++ of the
 * generated entry file (binding.cu), written from the launch manifest.
 * Expression arithmetic is expr.c's (kh_expr_to_cpp), the kernels and the
 * embedded cubin fib_export_image.c's, the C++ that does not depend on the
 * manifest fib_export_support.c's, writing the export to a folder
 * fib_export_write.c's, loading and checking the solution task.c's, the
 * command line cmd_export.c's. */
#include "task/fib_export.h"
#include "task/fib_export_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ENTRY_SYMBOL "run"

/* ---- a growable string ---------------------------------------------------- */
typedef struct sb {
    char *p;
    size_t n, cap;
    int oom;
} sb;

static void sb_add(sb *b, const char *s, size_t l)
{
    if (b->oom)
        return;
    if (b->n + l + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + l + 1)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, l);
    b->n += l;
    b->p[b->n] = 0;
}

/* a string literal */
#define sb_lit(b, s) sb_add((b), (s), sizeof(s) - 1)

static void sb_printf(sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sb *b, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int l = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (l < 0) {
        b->oom = 1;
        return;
    }
    if ((size_t)l < sizeof small) {
        sb_add(b, small, (size_t)l);
        return;
    }
    char *big = malloc((size_t)l + 1);
    if (!big) {
        b->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)l + 1, fmt, ap);
    va_end(ap);
    sb_add(b, big, (size_t)l);
    free(big);
}

/* s as the body of a C++ string literal (quotes and backslashes escaped,
 * control bytes as octal) or of a // comment (line breaks as spaces). */
static void sb_text(sb *b, const char *s, int literal)
{
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (literal && (*c == '"' || *c == '\\'))
            sb_printf(b, "\\%c", *c);
        else if (*c < 0x20 || *c == 0x7f)
            literal ? sb_printf(b, "\\%03o", *c) : sb_lit(b, " ");
        else if (literal && *c == '?' && c[1] == '?')
            sb_lit(b, "?\\"); /* no trigraph, whatever the dialect */
        else
            sb_add(b, (const char *)c, 1);
    }
}

/* ---- names and dtypes ------------------------------------------------------- */
static int is_ident(const char *s)
{
    if (!s || !(*s == '_' || (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z')))
        return 0;
    size_t n = 0;
    for (; s[n]; n++)
        if (!(s[n] == '_' || (s[n] >= 'A' && s[n] <= 'Z') || (s[n] >= 'a' && s[n] <= 'z') ||
              (s[n] >= '0' && s[n] <= '9')))
            return 0;
    return n < 80;
}

/* The C++ name of a definition's axis, tensor or workspace: prefix_name when
 * name is an identifier, else prefix plus its index. */
static void cpp_name(char *buf, size_t n, const char *prefix, const char *name, size_t index)
{
    if (is_ident(name))
        snprintf(buf, n, "%s_%s", prefix, name);
    else
        snprintf(buf, n, "%s%zu", prefix, index);
}

/* How a FlashInfer-Bench dtype arrives through DLPack, and how a scalar
 * (shape null) of it is passed: FlashInfer-Bench hands scalars over as
 * Python numbers (bench/utils.py, gen_inputs: a workload's value, or
 * .item() of a random draw), which TVM-FFI converts to the parameter's
 * type; the kernel receives the value in the dtype's own width. */
typedef struct dtype_info {
    const char *name;
    int code, alt_code, bits; /* DLDataType code(s) and bits; code -1: not checked */
    const char *param;        /* the entry parameter type of a scalar */
    const char *pre, *post;   /* around a scalar param: its kernel argument; NULL: cannot */
} dtype_info;

/* DLPack codes: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6,
 * kDLFloat8_e4m3fn 10, kDLFloat8_e5m2 12.  A float4_e2m1 tensor is torch's
 * float4_e2m1fn_x2 (two values per byte): its DLPack form is not checked. */
static const dtype_info dtypes[] = {
    {"float32", 2, 2, 32, "double", "static_cast<float>(", ")"},
    {"float16", 2, 2, 16, "double", "__float2half_rn(static_cast<float>(", "))"},
    {"bfloat16", 4, 4, 16, "double", "__float2bfloat16_rn(static_cast<float>(", "))"},
    {"float8_e4m3fn", 10, 10, 8, "double", NULL, NULL},
    {"float8_e5m2", 12, 12, 8, "double", NULL, NULL},
    {"float4_e2m1", -1, -1, 4, "double", NULL, NULL},
    {"int64", 0, 0, 64, "int64_t", "static_cast<int64_t>(", ")"},
    {"int32", 0, 0, 32, "int64_t", "static_cast<int32_t>(", ")"},
    {"int16", 0, 0, 16, "int64_t", "static_cast<int16_t>(", ")"},
    {"int8", 0, 0, 8, "int64_t", "static_cast<int8_t>(", ")"},
    {"bool", 6, 1, 8, "bool", "static_cast<bool>(", ")"},
};

static const dtype_info *dtype_of(const char *name)
{
    for (size_t i = 0; i < KH_ARRAY_LEN(dtypes); i++)
        if (name && !strcmp(dtypes[i].name, name))
            return &dtypes[i];
    return NULL;
}

static const char *value_type(const char *t)
{
    if (!t || !strcmp(t, "int32"))
        return "int32_t";
    if (!strcmp(t, "int64"))
        return "int64_t";
    if (!strcmp(t, "uint32"))
        return "uint32_t";
    if (!strcmp(t, "uint64"))
        return "uint64_t";
    return NULL;
}

/* ---- the generator ------------------------------------------------------------ */
typedef struct gen {
    const kh_task_solution *sol;
    const kh_task_def *d;
    const kh_task_manifest *m;
    const char *name;         /* the exported solution's name */
    const char *kernel_file;  /* the solution's entry source, renamed */
    const char *wrapper_file; /* the generated translation unit that compiles it */
    const char *entry_file;   /* the generated entry */
    const kh_fib_export_opts *opts;
    sb out;
    char (*axis)[96];         /* d->naxes C++ names; "" when no tensor carries a var axis */
    char (*in)[96], (*outp)[96], (*ws)[96]; /* inputs, outputs, workspace buffers */
    int half, bf16;           /* scalar conversions that need cuda_fp16.h / cuda_bf16.h */
    kh_err *err;
} gen;

static const kh_task_tensor *find_tensor(const kh_task_def *d, const char *name, int *is_out,
                                         size_t *idx)
{
    for (size_t i = 0; i < d->ninputs; i++)
        if (!strcmp(d->inputs[i].name, name)) {
            *is_out = 0;
            *idx = i;
            return &d->inputs[i];
        }
    for (size_t i = 0; i < d->noutputs; i++)
        if (!strcmp(d->outputs[i].name, name)) {
            *is_out = 1;
            *idx = i;
            return &d->outputs[i];
        }
    return NULL;
}

/* kh_expr_spell_fn: axes by their variable; t.shape[i] by the axis of that
 * dimension (what the task layer resolves it to, and check_dim has checked);
 * tensor data cannot be read. */
static int spell(void *ctx, const kh_expr_var *v, char *buf, size_t n)
{
    gen *g = ctx;
    int a = -1;
    if (v->kind == KH_EXPR_DATA) {
        snprintf(buf, n, "'%s' reads tensor data; the exported entry computes its launches from "
                 "shapes only", v->text);
        return 1;
    }
    if (v->kind == KH_EXPR_AXIS) {
        a = kh_task_axis_index(g->d, v->name);
        if (a < 0) {
            snprintf(buf, n, "'%s' is not an axis of %s", v->name, g->d->name);
            return 1;
        }
    } else {
        int is_out;
        size_t ti;
        const kh_task_tensor *t = find_tensor(g->d, v->name, &is_out, &ti);
        if (!t || t->is_scalar) {
            snprintf(buf, n, "'%s': %s has no tensor '%s'", v->text, g->d->name, v->name);
            return 1;
        }
        int64_t k = v->index < 0 ? (int64_t)t->rank + v->index : v->index;
        if (k < 0 || k >= (int64_t)t->rank) {
            snprintf(buf, n, "'%s': '%s' has %zu dimensions", v->text, v->name, t->rank);
            return 1;
        }
        a = (int)t->dims[k];
    }
    if (!g->axis[a][0]) {
        snprintf(buf, n, "axis '%s' is in no tensor's shape, so the entry cannot know its value",
                 g->d->axes[a].name);
        return 1;
    }
    snprintf(buf, n, "%s", g->axis[a]);
    return 0;
}

/* `value("what", "text", [&]() -> int64_t { return <C++>; })`: one manifest
 * expression, its failure named with where it is used. */
static kh_status emit_value(gen *g, const kh_expr *e, const char *what)
{
    char *cpp = NULL;
    kh_status st = kh_expr_to_cpp(e, spell, g, &cpp, g->err);
    if (st)
        return kh_err_prefix(g->err, "%s '%s'", what, kh_expr_text(e));
    sb_lit(&g->out, "value(\"");
    sb_text(&g->out, what, 1);
    sb_lit(&g->out, "\", \"");
    sb_text(&g->out, kh_expr_text(e), 1);
    sb_printf(&g->out, "\", [&]() -> int64_t { return %s; })", cpp);
    free(cpp);
    return KH_OK;
}

static void emit_header(gen *g)
{
    const kh_task_def *d = g->d;
    sb *o = &g->out;
    sb_lit(o, "// ");
    sb_text(o, g->entry_file, 0);
    sb_lit(o, ": the FlashInfer-Bench entry point of khlua solution ");
    sb_text(o, g->sol->name, 0);
    sb_lit(o, "\n// (definition ");
    sb_text(o, d->name, 0);
    sb_printf(o, "), generated by `khlua export solution` from its launch\n"
                 "// manifest (spec.khlua).  Do not edit: export again.\n//\n"
                 "// FlashInfer-Bench's TVM-FFI builder compiles this file with nvcc and calls, in\n"
                 "// destination-passing style (the outputs allocated by the caller),\n//   %s(",
              ENTRY_SYMBOL);
    for (size_t i = 0; i < d->ninputs + d->noutputs; i++) {
        const kh_task_tensor *t = i < d->ninputs ? &d->inputs[i] : &d->outputs[i - d->ninputs];
        sb_printf(o, "%s", i ? ", " : "");
        sb_text(o, t->name, 0);
    }
    sb_lit(o, ")\n// It checks every tensor, takes the var axes from their shapes, and makes the\n"
              "// manifest's launches on the stream TVM-FFI gives:\n");
    for (size_t k = 0; k < g->m->nlaunches; k++) {
        const kh_task_launch *l = &g->m->launches[k];
        sb_printf(o, "//   %zu. ", k + 1);
        sb_text(o, l->kernel, 0);
        for (int part = 0; part < 2; part++) {
            sb_printf(o, " %s (", part ? "block" : "grid");
            for (int j = 0; j < 3; j++) {
                kh_expr *e = part ? l->block[j] : l->grid[j];
                sb_printf(o, "%s", j ? ", " : "");
                e ? sb_text(o, kh_expr_text(e), 0) : sb_lit(o, "1");
            }
            sb_lit(o, ")");
        }
        if (l->shared_bytes) {
            sb_lit(o, " shared ");
            sb_text(o, kh_expr_text(l->shared_bytes), 0);
        }
        sb_lit(o, "\n");
    }
}

/* The entry's signature (inputs, then outputs) and its device, taken from
 * the first tensor argument. */
static kh_status emit_signature(gen *g)
{
    const kh_task_def *d = g->d;
    sb *o = &g->out;
    sb_printf(o, "\nvoid %s(", ENTRY_SYMBOL);
    const char *first = NULL;
    for (size_t i = 0; i < d->ninputs; i++) {
        const kh_task_tensor *t = &d->inputs[i];
        const dtype_info *di = dtype_of(t->dtype);
        if (t->is_scalar && !di)
            return kh_err_set(g->err, KH_EUNSUPPORTED, "input '%s': expected a FlashInfer-Bench "
                              "dtype, got '%s'", t->name, t->dtype ? t->dtype : "none");
        sb_printf(o, "%s%s %s", i ? ", " : "", t->is_scalar ? di->param : "TensorView", g->in[i]);
        if (!t->is_scalar && !first)
            first = g->in[i];
    }
    for (size_t i = 0; i < d->noutputs; i++) {
        sb_printf(o, "%sTensorView %s", d->ninputs + i ? ", " : "", g->outp[i]);
        if (!first)
            first = g->outp[i];
    }
    sb_lit(o, ")\n{\n");
    if (!first)
        return kh_err_set(g->err, KH_EUNSUPPORTED, "%s has no tensor argument to take the device "
                          "from", d->name);
    sb_printf(o, "    const int device = %s.device().device_id;\n"
                 "    if (device < 0 || device >= kMaxDevices)\n"
                 "        TVM_FFI_THROW(ValueError) << kSolution << \": device \" << device\n"
                 "                                  << \", expected 0 to \" << kMaxDevices - 1;\n",
              first);
    return KH_OK;
}

/* Each tensor's rank, dtype and layout checked. */
static void emit_tensor_checks(gen *g)
{
    const kh_task_def *d = g->d;
    sb *o = &g->out;
    for (size_t i = 0; i < d->ninputs + d->noutputs; i++) {
        int is_out = i >= d->ninputs;
        const kh_task_tensor *t = is_out ? &d->outputs[i - d->ninputs] : &d->inputs[i];
        if (t->is_scalar)
            continue;
        const dtype_info *di = dtype_of(t->dtype);
        sb_printf(o, "    check_tensor(%s, \"%s '", is_out ? g->outp[i - d->ninputs] : g->in[i],
                  is_out ? "output" : "input");
        sb_text(o, t->name, 1);
        sb_printf(o, "'\", %zu, \"", t->rank);
        sb_text(o, t->dtype ? t->dtype : "?", 1);
        sb_printf(o, "\", %d, %d, %d);\n", di ? di->code : -1, di ? di->alt_code : -1,
                  di ? di->bits : 0);
    }
}

/* The axes: const ones from the definition, var ones from the first tensor
 * (inputs first, as FlashInfer-Bench binds them) that carries them; then
 * every tensor's dimensions checked against them.  An axis no tensor
 * carries gets no name in g->axis. */
static void emit_axes(gen *g)
{
    const kh_task_def *d = g->d;
    sb *o = &g->out;
    sb_lit(o, "    // axes: const from the definition, var from the first tensor carrying them\n");
    for (size_t a = 0; a < d->naxes; a++) {
        const kh_task_axis *ax = &d->axes[a];
        if (ax->is_const) {
            sb_printf(o, "    [[maybe_unused]] const int64_t %s = INT64_C(%lld);\n", g->axis[a],
                      (long long)ax->value);
            continue;
        }
        const char *from = NULL;
        size_t dim = 0;
        for (size_t i = 0; i < d->ninputs + d->noutputs && !from; i++) {
            int is_out = i >= d->ninputs;
            const kh_task_tensor *t = is_out ? &d->outputs[i - d->ninputs] : &d->inputs[i];
            if (t->is_scalar || (t->dtype && !strcmp(t->dtype, "float4_e2m1")))
                continue; /* a packed float4 tensor's last dimension is halved */
            for (size_t k = 0; k < t->rank && !from; k++)
                if (t->dims[k] == a) {
                    from = is_out ? g->outp[i - d->ninputs] : g->in[i];
                    dim = k;
                }
        }
        if (!from) {
            g->axis[a][0] = 0; /* spell() refuses it, should a manifest use it */
            continue;
        }
        sb_printf(o, "    [[maybe_unused]] const int64_t %s = %s.size(%zu);\n", g->axis[a], from,
                  dim);
    }
    for (size_t i = 0; i < d->ninputs + d->noutputs; i++) {
        int is_out = i >= d->ninputs;
        const kh_task_tensor *t = is_out ? &d->outputs[i - d->ninputs] : &d->inputs[i];
        if (t->is_scalar || (t->dtype && !strcmp(t->dtype, "float4_e2m1")))
            continue;
        for (size_t k = 0; k < t->rank; k++) {
            if (!g->axis[t->dims[k]][0])
                continue;
            sb_printf(o, "    check_dim(%s, \"%s '", is_out ? g->outp[i - d->ninputs] : g->in[i],
                      is_out ? "output" : "input");
            sb_text(o, t->name, 1);
            sb_printf(o, "'\", %zu, %s, \"", k, g->axis[t->dims[k]]);
            sb_text(o, d->axes[t->dims[k]].name, 1);
            sb_lit(o, "\");\n");
        }
    }
}

/* The workspace buffers' sizes and their offsets in one block. */
static kh_status emit_workspace_sizes(gen *g)
{
    const kh_task_manifest *m = g->m;
    sb *o = &g->out;
    kh_status st;
    if (!m->nworkspace)
        return KH_OK;
    sb_lit(o, "\n    // workspace sizes; 256-byte aligned offsets in one block\n"
              "    int64_t workspace_total = 0;\n");
    for (size_t w = 0; w < m->nworkspace; w++) {
        char what[200];
        snprintf(what, sizeof what, "workspace '%s' bytes", m->workspace[w].name);
        sb_printf(o, "    const int64_t %s_bytes = ", g->ws[w]);
        if ((st = emit_value(g, m->workspace[w].bytes, what)))
            return st;
        sb_printf(o, ";\n    if (%s_bytes < 0)\n"
                     "        TVM_FFI_THROW(ValueError) << kSolution << \": ",
                  g->ws[w]);
        sb_text(o, what, 1);
        sb_printf(o, " = \" << %s_bytes << \", expected at least 0\";\n"
                     "    const int64_t %s_offset = workspace_total;\n"
                     "    workspace_total = value(\"the workspace's total bytes\", \"\", "
                     "[&]() -> int64_t {\n"
                     "        return khx::add(workspace_total, khx::mul(khx::ceil_div("
                     "khx::max(%s_bytes, INT64_C(1)),\n"
                     "                        INT64_C(256), 0), INT64_C(256), 0), 0); });\n",
                  g->ws[w], g->ws[w], g->ws[w]);
    }
    return KH_OK;
}

/* Argument i of launch k into its 8-byte slot (a workspace pointer comes
 * later, with the allocation). */
static kh_status emit_arg(gen *g, size_t k, size_t i)
{
    const kh_task_def *d = g->d;
    const kh_task_launch *l = &g->m->launches[k];
    sb *o = &g->out;
    kh_status st;
    const kh_task_arg *a = &l->args[i];
    int is_out = 0; /* find_tensor sets them only when it finds the name */
    size_t ti = 0;
    const kh_task_tensor *t = a->name ? find_tensor(d, a->name, &is_out, &ti) : NULL;
    if (a->kind == KH_TASK_ARG_WORKSPACE)
        return KH_OK; /* its pointer comes with the allocation, below */
    sb_printf(o, "    put(slot%zu[%zu], ", k + 1, i);
    switch (a->kind) {
    case KH_TASK_ARG_WORKSPACE:
        break;
    case KH_TASK_ARG_INPUT:
    case KH_TASK_ARG_OUTPUT:
        if (!t || t->is_scalar)
            return kh_err_set(g->err, KH_EINVAL, "launch %zu (%s) argument %zu: %s has "
                              "no tensor '%s'", k + 1, l->kernel, i + 1, d->name, a->name);
        sb_printf(o, "%s.data_ptr()", is_out ? g->outp[ti] : g->in[ti]);
        break;
    case KH_TASK_ARG_SCALAR: {
        const dtype_info *di = t ? dtype_of(t->dtype) : NULL;
        if (!t || is_out || !t->is_scalar)
            return kh_err_set(g->err, KH_EINVAL, "launch %zu (%s) argument %zu: %s has "
                              "no scalar input '%s'", k + 1, l->kernel, i + 1, d->name,
                              a->name);
        if (!di || !di->pre)
            return kh_err_set(g->err, KH_EUNSUPPORTED, "launch %zu (%s) argument %zu: "
                              "scalar '%s' of dtype %s: expected a dtype the entry can "
                              "pass by value (float32, float16, bfloat16, int8 to int64, "
                              "bool)", k + 1, l->kernel, i + 1, a->name, t->dtype);
        g->half |= !strcmp(di->name, "float16");
        g->bf16 |= !strcmp(di->name, "bfloat16");
        sb_printf(o, "%s%s%s", di->pre, g->in[ti], di->post);
        break;
    }
    case KH_TASK_ARG_VALUE: {
        const char *ty = value_type(a->type);
        if (!ty)
            return kh_err_set(g->err, KH_EINVAL, "launch %zu (%s) argument %zu: type "
                              "'%s', expected int32, int64, uint32 or uint64", k + 1,
                              l->kernel, i + 1, a->type);
        char what[200];
        snprintf(what, sizeof what, "launch %zu (%s) argument %zu", k + 1, l->kernel,
                 i + 1);
        sb_printf(o, "static_cast<%s>(", ty);
        if ((st = emit_value(g, a->expr, what)))
            return st;
        sb_lit(o, ")");
        break;
    }
    }
    sb_lit(o, ");\n");
    return KH_OK;
}

/* Launch k's grid, block and shared memory computed and checked, and its
 * arguments in their slots. */
static kh_status emit_launch_values(gen *g, size_t k)
{
    const kh_task_launch *l = &g->m->launches[k];
    sb *o = &g->out;
    kh_status st;
    sb_printf(o, "\n    // launch %zu: ", k + 1);
    sb_text(o, l->kernel, 0);
    sb_lit(o, "\n");
    for (int part = 0; part < 2; part++) {
        sb_printf(o, "    const int64_t %s%zu[3] = {", part ? "block" : "grid", k + 1);
        for (int j = 0; j < 3; j++) {
            kh_expr *e = part ? l->block[j] : l->grid[j];
            sb_printf(o, "%s\n        ", j ? "," : "");
            if (!e) {
                sb_lit(o, "INT64_C(1)");
                continue;
            }
            char what[200];
            snprintf(what, sizeof what, "launch %zu (%s) %s.%c", k + 1, l->kernel,
                     part ? "block" : "grid", "xyz"[j]);
            if ((st = emit_value(g, e, what)))
                return st;
        }
        sb_lit(o, "};\n");
    }
    sb_printf(o, "    const int64_t shared%zu = ", k + 1);
    if (l->shared_bytes) {
        char what[200];
        snprintf(what, sizeof what, "launch %zu (%s) shared_bytes", k + 1, l->kernel);
        if ((st = emit_value(g, l->shared_bytes, what)))
            return st;
    } else {
        sb_lit(o, "0");
    }
    sb_printf(o, ";\n    check_launch(%zu, \"", k + 1);
    sb_text(o, l->kernel, 1);
    sb_printf(o, "\", grid%zu, block%zu, shared%zu);\n", k + 1, k + 1, k + 1);
    if (l->nargs)
        sb_printf(o, "    uint64_t slot%zu[%zu] = {};\n", k + 1, l->nargs);
    for (size_t i = 0; i < l->nargs; i++)
        if ((st = emit_arg(g, k, i)))
            return st;
    return KH_OK;
}

/* Once everything is checked: the tensors' device, the device guard and
 * stream, the workspace, and the launches. */
static kh_status emit_launches(gen *g)
{
    const kh_task_def *d = g->d;
    const kh_task_manifest *m = g->m;
    sb *o = &g->out;
    sb_lit(o, "\n");
    for (size_t i = 0; i < d->ninputs + d->noutputs; i++) {
        int is_out = i >= d->ninputs;
        const kh_task_tensor *t = is_out ? &d->outputs[i - d->ninputs] : &d->inputs[i];
        if (t->is_scalar)
            continue;
        sb_printf(o, "    check_device(%s, \"%s '", is_out ? g->outp[i - d->ninputs] : g->in[i],
                  is_out ? "output" : "input");
        sb_text(o, t->name, 1);
        sb_lit(o, "'\", device);\n");
    }
    sb_lit(o, "    DeviceGuard guard(device);\n"
              "    cudaStream_t stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(kDLCUDA, "
              "device));\n");
    if (m->nworkspace) {
        sb_lit(o, "    char *workspace_base = workspace(device, workspace_total);\n");
        for (size_t w = 0; w < m->nworkspace; w++) {
            sb_printf(o, "    [[maybe_unused]] void *%s = workspace_base + %s_offset;\n", g->ws[w],
                      g->ws[w]);
            if (m->workspace[w].zero) {
                sb_printf(o, "    check_cuda(cudaMemsetAsync(%s, 0, static_cast<size_t>(%s_bytes), "
                             "stream),\n               \"zeroing workspace '", g->ws[w], g->ws[w]);
                sb_text(o, m->workspace[w].name, 1);
                sb_lit(o, "'\");\n");
            }
        }
    }
    for (size_t k = 0; k < m->nlaunches; k++) {
        const kh_task_launch *l = &m->launches[k];
        for (size_t i = 0; i < l->nargs; i++) {
            if (l->args[i].kind != KH_TASK_ARG_WORKSPACE)
                continue;
            size_t w = 0;
            while (w < m->nworkspace && strcmp(m->workspace[w].name, l->args[i].name))
                w++;
            if (w == m->nworkspace)
                return kh_err_set(g->err, KH_EINVAL, "launch %zu (%s) argument %zu: no "
                                  "workspace '%s'", k + 1, l->kernel, i + 1, l->args[i].name);
            sb_printf(o, "    put(slot%zu[%zu], %s);\n", k + 1, i, g->ws[w]);
        }
        if (l->nargs) {
            sb_printf(o, "    void *params%zu[%zu] = {", k + 1, l->nargs);
            for (size_t i = 0; i < l->nargs; i++)
                sb_printf(o, "%s&slot%zu[%zu]", i ? ", " : "", k + 1, i);
            sb_lit(o, "};\n");
        } else {
            sb_printf(o, "    void **params%zu = nullptr;\n", k + 1);
        }
        sb_printf(o, "    static std::atomic<int64_t> shared_set%zu[kMaxDevices];\n"
                     "    launch(kernel_func(device, %zu), %zu, \"", k + 1,
                  kh_fib_kernel_index(m, k), k + 1);
        sb_text(o, l->kernel, 1);
        sb_printf(o, "\", grid%zu, block%zu, shared%zu, params%zu,\n"
                     "           stream, &shared_set%zu[device]);\n", k + 1, k + 1, k + 1, k + 1,
                  k + 1);
    }
    return KH_OK;
}

/* The entry, run(): everything computed and checked before the first CUDA
 * call (a bad size or dimension stops the call with nothing launched),
 * then the device, the workspace and the launches. */
static kh_status emit_entry(gen *g)
{
    kh_status st;
    if ((st = emit_signature(g)))
        return st;
    emit_tensor_checks(g);
    emit_axes(g);
    if ((st = emit_workspace_sizes(g)))
        return st;
    for (size_t k = 0; k < g->m->nlaunches; k++)
        if ((st = emit_launch_values(g, k)))
            return st;
    if ((st = emit_launches(g)))
        return st;
    sb_lit(&g->out, "}\n}  // namespace\n}  // namespace khlua_export\n\n");
    sb_printf(&g->out, "TVM_FFI_DLL_EXPORT_TYPED_FUNC(%s, khlua_export::%s);\n", ENTRY_SYMBOL,
              ENTRY_SYMBOL);
    return KH_OK;
}

static kh_status generate(gen *g, char **out)
{
    const kh_task_def *d = g->d;
    const kh_task_manifest *m = g->m;
    kh_status st = KH_OK;
    g->axis = calloc(d->naxes + 1, sizeof *g->axis);
    g->in = calloc(d->ninputs + 1, sizeof *g->in);
    g->outp = calloc(d->noutputs + 1, sizeof *g->outp);
    g->ws = calloc(m->nworkspace + 1, sizeof *g->ws);
    if (!g->axis || !g->in || !g->outp || !g->ws) {
        st = kh_err_set(g->err, KH_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t a = 0; a < d->naxes; a++)
        cpp_name(g->axis[a], sizeof g->axis[a], "ax", d->axes[a].name, a);
    for (size_t i = 0; i < d->ninputs; i++)
        cpp_name(g->in[i], sizeof g->in[i], d->inputs[i].is_scalar ? "sc" : "in",
                 d->inputs[i].name, i);
    for (size_t i = 0; i < d->noutputs; i++)
        cpp_name(g->outp[i], sizeof g->outp[i], "out", d->outputs[i].name, i);
    for (size_t w = 0; w < m->nworkspace; w++)
        cpp_name(g->ws[w], sizeof g->ws[w], "ws", m->workspace[w].name, w);
    for (size_t k = 0; k < m->nlaunches; k++)
        if (!is_ident(m->launches[k].kernel)) {
            st = kh_err_set(g->err, KH_EINVAL, "launch %zu: kernel '%s', expected the name of "
                            "an extern \"C\" __global__ function", k + 1,
                            m->launches[k].kernel);
            goto out;
        }
    /* the entry first (it finds which conversions the scalars need), then
     * the file around it */
    memset(&g->out, 0, sizeof g->out);
    st = emit_entry(g);
    sb entry = g->out;
    memset(&g->out, 0, sizeof g->out);
    if (st) {
        free(entry.p);
        goto out;
    }
    sb *o = &g->out;
    emit_header(g);
    sb_lit(o, "\n#include <atomic>\n#include <cstdint>\n#include <cstdio>\n#include <cstdlib>\n#include <cstring>\n"
              "#include <mutex>\n\n#include <cuda_runtime.h>\n");
    if (g->half)
        sb_lit(o, "#include <cuda_fp16.h>\n");
    if (g->bf16)
        sb_lit(o, "#include <cuda_bf16.h>\n");
    sb_lit(o, "#include <tvm/ffi/container/tensor.h>\n#include <tvm/ffi/error.h>\n"
              "#include <tvm/ffi/extra/c_env_api.h>\n#include <tvm/ffi/function.h>\n\n");
    /* the kernels are compiled in a translation unit of their own (the
     * wrapper), alone as khlua compiles them; their addresses come from it */
    sb_lit(o, "// the kernels' host stubs, from ");
    sb_text(o, g->wrapper_file, 0);
    sb_lit(o, "\n");
    for (size_t k = 0; k < m->nlaunches; k++) {
        size_t j = 0;
        while (j < k && strcmp(m->launches[j].kernel, m->launches[k].kernel))
            j++;
        if (j == k)
            sb_printf(o, "extern \"C\" __attribute__((visibility(\"hidden\"))) const void *"
                         "khlua_export_kernel_%s(void);\n", m->launches[k].kernel);
    }
    if (g->opts && g->opts->image)
        sb_lit(o, "extern \"C\" __attribute__((visibility(\"hidden\"))) const unsigned char *"
                  "khlua_export_image(unsigned long long *n);\n");
    sb_lit(o, "\n");
    sb_add(o, kh_expr_cpp_helpers(), strlen(kh_expr_cpp_helpers()));
    /* internal linkage: several exported solutions load into one process */
    sb_lit(o, "\nnamespace khlua_export {\nnamespace {\nconst char kSolution[] = \"");
    sb_text(o, g->name, 1);
    sb_lit(o, "\";\n");
    sb_add(o, kh_fib_support(), strlen(kh_fib_support()));
    if (m->nworkspace)
        sb_add(o, kh_fib_support_workspace(), strlen(kh_fib_support_workspace()));
    char *table = kh_fib_kernel_table(m, g->opts);
    if (!table) {
        free(entry.p);
        st = kh_err_set(g->err, KH_ENOMEM, "out of memory");
        goto out;
    }
    sb_add(o, table, strlen(table));
    free(table);
    sb_add(o, entry.p ? entry.p : "", entry.n);
    free(entry.p);
    if (o->oom) {
        st = kh_err_set(g->err, KH_ENOMEM, "out of memory");
        goto out;
    }
    *out = o->p;
    o->p = NULL;
out:
    free(g->out.p);
    free(g->axis);
    free(g->in);
    free(g->outp);
    free(g->ws);
    return st;
}

/* ---- sources and the Solution ------------------------------------------------ */
/* The source suffixes FlashInfer-Bench's TVM-FFI builder compiles, each on
 * its own (tvm_ffi_builder.py, _filter_sources). */
static int compiled_by_fib(const char *path)
{
    static const char *const sfx[] = {".cu", ".cpp", ".cc", ".cxx", ".c"};
    const char *dot = strrchr(path, '.');
    const char *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash))
        return 0;
    for (size_t i = 0; i < KH_ARRAY_LEN(sfx); i++)
        if (!strcmp(dot, sfx[i]))
            return 1;
    return 0;
}

static int has_source(const json_t *sources, const char *path)
{
    size_t i;
    json_t *s;
    json_array_foreach(sources, i, s) {
        if (!strcmp(json_string_value(json_object_get(s, "path")) ? json_string_value(json_object_get(s, "path")) : "", path))
            return 1;
    }
    return 0;
}

/* primary, else fallback: the first name no source keeps (the entry source
 * is renamed, so its old name is free) and no other file of the export
 * takes; NULL when both are taken. */
static const char *pick_name(const json_t *sources, const char *entry, const char *kernel_file,
                             const char *other, const char *primary, const char *fallback)
{
    const char *names[2] = {primary, fallback};
    for (int k = 0; k < 2; k++) {
        const char *n = names[k];
        int taken = !strcmp(n, kernel_file) || (other && !strcmp(n, other));
        if (!taken && strcmp(n, entry) && has_source(sources, n))
            taken = 1;
        if (!taken)
            return n;
    }
    return NULL;
}

/* The wrapper: the solution's entry source compiled on its own, as NVRTC
 * compiles it for khlua, plus one accessor per kernel giving binding.cu the
 * address of its host stub (what cudaLaunchKernel takes). */
static kh_status generate_wrapper(gen *g, char **out)
{
    sb o = {0};
    sb_lit(&o, "// ");
    sb_text(&o, g->wrapper_file, 0);
    sb_lit(&o, ": the kernels of khlua solution ");
    sb_text(&o, g->name, 0);
    sb_lit(&o, ", compiled as khlua compiles\n// them: ");
    sb_text(&o, g->kernel_file, 0);
    sb_lit(&o, " (the solution's source, unchanged) on its own.  Generated by\n"
               "// `khlua export solution`: ");
    sb_text(&o, g->entry_file, 0);
    sb_lit(&o, " launches them through the addresses below.\n#include \"");
    sb_text(&o, g->kernel_file, 1);
    sb_lit(&o, "\"\n\n");
    for (size_t k = 0; k < g->m->nlaunches; k++) {
        const char *kn = g->m->launches[k].kernel;
        size_t j = 0;
        while (j < k && strcmp(g->m->launches[j].kernel, kn))
            j++;
        if (j == k)
            sb_printf(&o, "extern \"C\" __attribute__((visibility(\"hidden\"))) const void *"
                          "khlua_export_kernel_%s(void)\n{\n"
                          "    return reinterpret_cast<const void *>(&::%s);\n}\n", kn, kn);
    }
    if (g->opts && g->opts->image) {
        char *arr = kh_fib_image_array(g->opts);
        if (!arr)
            o.oom = 1;
        else
            sb_add(&o, arr, strlen(arr));
        free(arr);
    }
    if (o.oom) {
        free(o.p);
        return kh_err_set(g->err, KH_ENOMEM, "out of memory");
    }
    *out = o.p;
    return KH_OK;
}

kh_status kh_fib_export_solution(const kh_task_solution *sol, const kh_fib_export_opts *o,
                                 kh_fib_export *out, kh_err *err)
{
    memset(out, 0, sizeof *out);
    const char *sname = sol->name ? sol->name : "?";
    const kh_task_manifest *m = sol->manifest;
    if (!m)
        return kh_err_set(err, KH_EINVAL, "solution %s has no launch manifest (spec.khlua): "
                          "FlashInfer-Bench runs it as it is", sname);
    if (m->host)
        return kh_err_set(err, KH_EUNSUPPORTED,
                          "solution %s runs on khlua's host backend (C on host pointers); "
                          "FlashInfer-Bench has no CPU form to export it to: its benchmark puts "
                          "every input on the GPU (bench/utils.py, gen_inputs) and times CUDA "
                          "activity, so only CUDA-backend solutions are exported", sname);
    if (m->so)
        return kh_err_set(err, KH_EUNSUPPORTED,
                          "solution %s is a trusted shared object (backend cuda_so): its host "
                          "code and link libraries are not exported; only launch manifests "
                          "(backend cuda) are", sname);
    if (!sol->def)
        return kh_err_set(err, KH_ENOTFOUND, "solution %s: definition '%s' is not loaded (give "
                          "the task package or dataset that holds it with --task)", sname,
                          sol->definition ? sol->definition : "?");
    if (!sol->dps)
        return kh_err_set(err, KH_EUNSUPPORTED, "solution %s: destination_passing_style is "
                          "false; khlua's CUDA kernels write outputs the caller allocates", sname);
    if (!m->nlaunches)
        return kh_err_set(err, KH_EINVAL, "solution %s: its manifest has no launches", sname);
    const json_t *sources = json_object_get(sol->json, "sources");
    if (!sol->entry_file || !has_source(sources, sol->entry_file))
        return kh_err_set(err, KH_EINVAL, "solution %s: entry_point file '%s' is not among its "
                          "sources", sname, sol->entry_file ? sol->entry_file : "?");
    const char *name = o && o->name ? o->name : sname;
    if (!name[0] || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
        return kh_err_set(err, KH_EINVAL, "solution name '%s': expected a name usable as a file "
                          "name (no '/')", name);

    /* where the entry source goes: a name the builder does not compile */
    char kernel_file[600];
    snprintf(kernel_file, sizeof kernel_file, "%s", sol->entry_file);
    if (compiled_by_fib(kernel_file)) {
        char *dot = strrchr(kernel_file, '.');
        const char *tails[] = {".cuh", ".khlua.cuh"};
        size_t t = 0;
        char stem[600];
        snprintf(stem, sizeof stem, "%.*s", (int)(dot - kernel_file), kernel_file);
        for (; t < KH_ARRAY_LEN(tails); t++) {
            snprintf(kernel_file, sizeof kernel_file, "%s%s", stem, tails[t]);
            if (!has_source(sources, kernel_file))
                break;
        }
        if (t == KH_ARRAY_LEN(tails))
            return kh_err_set(err, KH_EINVAL, "solution %s: no free name for its entry source "
                              "'%s' (%s.cuh and %s.khlua.cuh are both taken)", sname,
                              sol->entry_file, stem, stem);
    }
    const char *wrapper_file = pick_name(sources, sol->entry_file, kernel_file, NULL, "kernels.cu",
                                         "khlua_kernels.cu");
    const char *entry_file = pick_name(sources, sol->entry_file, kernel_file, wrapper_file,
                                       "binding.cu", "khlua_binding.cu");
    if (!wrapper_file || !entry_file)
        return kh_err_set(err, KH_EINVAL, "solution %s: its sources take the names of the "
                          "generated files (kernels.cu or khlua_kernels.cu, binding.cu or "
                          "khlua_binding.cu)", sname);
    size_t i;
    json_t *src;
    json_array_foreach(sources, i, src) {
        const char *p = json_string_value(json_object_get(src, "path"));
        if (p && strcmp(p, sol->entry_file) && compiled_by_fib(p))
            return kh_err_set(err, KH_EUNSUPPORTED,
                              "solution %s: source '%s' would be compiled on its own by "
                              "FlashInfer-Bench's builder (it compiles every .cu, .cpp, .cc, "
                              ".cxx and .c file), expected only the entry file '%s' to have such "
                              "a name; rename it (e.g. to .cuh) where it is included",
                              sname, p, sol->entry_file);
    }

    if (kh_fib_kernels_check(m, o, sname, err))
        return err->code;
    gen g = {.sol = sol, .d = sol->def, .m = m, .name = name, .kernel_file = kernel_file,
             .wrapper_file = wrapper_file, .entry_file = entry_file, .opts = o, .err = err};
    char *binding = NULL, *wrapper = NULL;
    kh_status st = generate(&g, &binding);
    if (!st)
        st = generate_wrapper(&g, &wrapper);
    if (st) {
        free(binding);
        return kh_err_prefix(err, "solution %s", sname);
    }

    /* the Solution: FlashInfer-Bench's fields; the manifest kept for reading
     * as spec.khlua_manifest, not spec.khlua: under spec.khlua khlua's task
     * check would take the export for a khlua candidate whose entry runs no
     * launch, and refuse the dataset holding it */
    const json_t *spec = json_object_get(sol->json, "spec");
    json_t *hw = json_object_get(spec, "target_hardware");
    json_t *srcs = json_array();
    json_array_foreach(sources, i, src) {
        const char *p = json_string_value(json_object_get(src, "path"));
        json_t *c = json_object_get(src, "content");
        if (!p)
            p = "";
        json_array_append_new(srcs, json_pack("{s:s, s:o}", "path",
                                              !strcmp(p, sol->entry_file) ? kernel_file : p,
                                              "content", c ? json_incref(c) : json_string("")));
    }
    json_array_append_new(srcs, json_pack("{s:s, s:s}", "path", wrapper_file, "content", wrapper));
    json_array_append_new(srcs, json_pack("{s:s, s:s}", "path", entry_file, "content", binding));
    char entry_point[300], desc[1600];
    snprintf(entry_point, sizeof entry_point, "%s::%s", entry_file, ENTRY_SYMBOL);
    const char *d0 = json_string_value(json_object_get(sol->json, "description"));
    char how[300] = "";
    if (o && o->image)
        snprintf(how, sizeof how, "; on %s GPUs, those of the cubin khlua compiled from it and "
                 "timed, embedded in %s", o->image_arch, wrapper_file);
    snprintf(desc, sizeof desc, "%s%s[khlua export: %s::%s launches the kernels of %s (compiled "
             "by %s%s) as the launch manifest spec.khlua_manifest says]", d0 ? d0 : "",
             d0 && d0[0] ? " " : "", entry_file, ENTRY_SYMBOL, kernel_file, wrapper_file, how);
    out->solution = json_pack(
        "{s:s, s:s, s:s, s:s, s:{s:s, s:o, s:s, s:[], s:b, s:s, s:O}, s:o}", "name", name,
        "definition", sol->definition, "author", sol->author ? sol->author : "khlua",
        "description", desc, "spec", "language", "cuda", "target_hardware",
        json_is_array(hw) && json_array_size(hw) ? json_incref(hw) : json_pack("[s]", "cuda"),
        "entry_point",
        entry_point, "dependencies", "destination_passing_style", 1, "binding", "tvm-ffi",
        "khlua_manifest", json_object_get(spec, "khlua"), "sources", srcs);
    if (out->solution && o && o->image)
        json_object_set_new(json_object_get(out->solution, "spec"), "khlua_image",
                            json_pack("{s:s, s:s, s:I}", "arch", o->image_arch, "compiled_by",
                                      o->image_about ? o->image_about : "NVRTC", "bytes",
                                      (json_int_t)o->image_len));
    free(binding);
    free(wrapper);
    out->entry_file = kh_strdup(entry_file);
    out->kernel_file = kh_strdup(kernel_file);
    out->wrapper_file = kh_strdup(wrapper_file);
    if (!out->solution || !out->entry_file || !out->kernel_file || !out->wrapper_file) {
        kh_fib_export_free(out);
        return kh_err_set(err, KH_ENOMEM, "solution %s: out of memory, or a source that is not "
                          "text", sname);
    }
    return KH_OK;
}

void kh_fib_export_free(kh_fib_export *x)
{
    if (!x)
        return;
    json_decref(x->solution);
    free(x->entry_file);
    free(x->kernel_file);
    free(x->wrapper_file);
    memset(x, 0, sizeof *x);
}
