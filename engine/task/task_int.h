/* task_int.h: what the task_*.c units that load and check task files share,
 * and nobody outside engine/task/ sees: the set (struct kh_task_set), the
 * validation context (a document and the path to the field at hand, so a
 * problem names its file:line and field), and each unit's entry points for
 * the others.  The units, bottom up: task_problem.c (problems, locating a
 * field, typed getters, files), task_def.c (definitions), task_solution.c
 * (solutions, manifests), task_workload.c (workloads and traces),
 * task_python.c (a check's Python ast pass), task.c (loading files,
 * packages and datasets; the set's accessors).  Each calls only those below
 * it. */
#ifndef KH_TASK_INT_H
#define KH_TASK_INT_H

#include "task/task.h"

#include <jansson.h>
#include <stdarg.h>
#include <string.h>

struct kh_task_set {
    kh_task_opts opts;
    char *root; /* folder that safetensors paths are relative to, or NULL */
    int quiet;  /* loading context (definitions above a checked file): no problems */
    kh_task_def **defs;
    size_t ndefs, capdefs;
    kh_task_workload **wls;
    size_t nwls, capwls;
    kh_task_solution **sols;
    size_t nsols, capsols;
    kh_task_problem *probs;
    size_t nprobs, capprobs;
    char **deferred;
    size_t ndeferred, capdeferred;
    char python[32]; /* the version of Python that parsed the references, or "" */
    kh_task_summary sum;
    /* definitions looked up here after this set's own (a Solution parsed in
     * memory against a loaded task: kh_task_solution_from_text); not owned */
    const kh_task_set *borrow;
};

/* ---- task_problem.c: problems, locating a field, typed getters, files ---- */
void task_add_problemv(kh_task_set *s, kh_task_severity sev, const char *file, int line,
                       const char *field, const char *fmt, va_list ap)
    __attribute__((format(printf, 6, 0)));
void task_add_problem(kh_task_set *s, kh_task_severity sev, const char *file, int line,
                      const char *field, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* Validation context: the document being checked and the path to the field
 * at hand (keys[i] for members, idx[i] for array elements). */
typedef struct vctx {
    kh_task_set *s;
    const char *file;
    const char *text;
    size_t len;
    int base_line;
    int depth;
    const char *keys[32];
    long idx[32];
} vctx;

static inline void vpush(vctx *v, const char *key)
{
    if (v->depth < 32) {
        v->keys[v->depth] = key;
        v->idx[v->depth] = -1;
    }
    v->depth++;
}
static inline void vpush_i(vctx *v, long i)
{
    if (v->depth < 32) {
        v->keys[v->depth] = NULL;
        v->idx[v->depth] = i;
    }
    v->depth++;
}
static inline void vpop(vctx *v) { v->depth--; }

/* The field's dotted name (keys, [i] for elements) and its line in the text. */
void task_field_name(const vctx *v, const char *leaf, char *buf, size_t n);
int task_field_line(const vctx *v, const char *leaf);
/* A problem at v's path (+ leaf), with its file:line. */
void task_vproblem(vctx *v, kh_task_severity sev, const char *leaf, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define VERR(v, leaf, ...) task_vproblem((v), KH_TASK_ERROR, (leaf), __VA_ARGS__)
#define VWARN(v, leaf, ...) task_vproblem((v), KH_TASK_WARNING, (leaf), __VA_ARGS__)

/* "an object", "a string", ... for messages. */
const char *task_jtype(const json_t *j);
/* A string member: NULL (and a problem, when required or mistyped) if absent
 * or not a (non-empty, when asked) string. */
const char *task_get_str(vctx *v, json_t *obj, const char *key, int required, int nonempty);
/* An optional string member (null: unset). */
const char *task_get_opt_str(vctx *v, json_t *obj, const char *key);
/* A float as FlashInfer-Bench's pydantic reads it; 0 and *x, or -1. */
int task_fib_float(const json_t *j, double *x);
void task_check_known_keys(vctx *v, json_t *obj, const char *const *known, size_t n,
                           kh_task_severity sev, const char *why);
void task_check_str_array(vctx *v, json_t *obj, const char *key, int min, int nonempty);
int task_is_ident(const char *s);
/* A whole file (malloc'ed, NUL-terminated, *len bytes); NULL with err. */
char *task_read_file(const char *path, size_t *len, kh_err *err);
/* a/b (malloc'ed; a leading "./" of b dropped); NULL when out of memory. */
char *task_path_join(const char *a, const char *b);
int task_is_dir(const char *p);
int task_is_file(const char *p);

/* ---- task_def.c: definitions, evaluation against one ----------------------- */
#define DTYPE_LIST                                                                                 \
    "float32, float16, bfloat16, float8_e4m3fn, float8_e5m2, float4_e2m1, int64, int32, int16, "  \
    "int8, bool"
/* The safetensors name of a FlashInfer-Bench dtype ("?" for none). */
const char *task_dtype_st_name(const char *dtype);
static inline int is_int_dtype(const char *dtype) { return dtype && !strncmp(dtype, "int", 3); }

void task_def_free(kh_task_def *d);
/* The tensor called name (inputs, then outputs; *is_output says which). */
const kh_task_tensor *task_find_tensor(const kh_task_def *d, const char *name, int *is_output);
const kh_task_tensor *task_find_input(const kh_task_def *d, const char *name);
/* Check that every name of e means something in d; report under leaf.
 * Returns 0 when all resolve. */
int task_check_expr_names(vctx *v, const kh_task_def *d, const kh_expr *e, int allow_data,
                          const char *leaf);
/* The expression of a field (a string), or NULL with a problem. */
kh_expr *task_parse_expr_field(vctx *v, json_t *j, const char *leaf);
/* A line starting `def run(` in the reference source. */
int task_has_run(const char *src);
kh_task_def *task_parse_definition(vctx *v, json_t *root);
/* An expression evaluated against a definition: a workload's axes, and data
 * (tensor elements) through data_lookup when it reads any. */
typedef struct eval_ctx {
    const kh_task_def *d;
    const int64_t *axes;
    kh_expr_lookup_fn data_lookup;
    void *data_ctx;
} eval_ctx;

/* The kh_expr lookup over an eval_ctx: axes, shape elements, data. */
int task_def_lookup(void *ctx, const kh_expr_var *x, int64_t *val);

/* ---- task_solution.c: solutions and candidate manifests -------------------- */
void task_sol_free(kh_task_solution *s);
kh_task_solution *task_parse_solution(vctx *v, json_t *root);

/* ---- task_workload.c: workloads and traces ---------------------------------- */
typedef struct file_state {
    size_t missing;     /* absent blobs in this file (non-strict) */
    int first_line;
    char first_field[256];
    char first_path[512];
} file_state;

/* What a JSONL file holds.  FlashInfer-Bench's TraceSet.from_path asserts
 * that every line of workloads/ is a workload trace (solution and
 * evaluation null) and that no line of traces/ is; a file outside both (a
 * `khlua store export`) is told line by line. */
typedef enum jl_kind { JL_WORKLOADS, JL_TRACES, JL_EITHER } jl_kind;

void task_wl_free(kh_task_workload *w);
kh_task_workload *task_parse_workload_line(vctx *v, json_t *rec, jl_kind kind, file_state *fs);

/* ---- task_python.c: references and constraints through Python's ast ------- */
/* For a check: every definition's reference and constraints of s parsed by
 * one Python child (path: what was checked, for the messages). */
void task_check_python(kh_task_set *s, const char *path);

#endif
