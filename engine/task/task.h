/* task.h: tasks on disk, in FlashInfer-Bench's formats (reference/
 * fib-harness.md) plus khlua's additions under "khlua" keys: Definition JSON,
 * Workload / Trace JSONL, Solution JSON, candidates (a Solution whose spec
 * carries a launch manifest, docs/candidate-format.md), task packages and
 * whole datasets.
 *
 * Loading never stops at the first bad field: every problem found goes into
 * the set's problem list as (file, line, field, message), and whatever parsed
 * is kept, so `khlua task check` can report everything at once.  A load call
 * fails (returns non-OK) only when the path cannot be read at all. */
#ifndef KH_TASK_H
#define KH_TASK_H

#include "task/expr.h"
#include "core/kh.h"

#include <jansson.h>
#include <stdint.h>

typedef struct kh_task_set kh_task_set;

typedef struct kh_task_axis {
    char *name;
    int is_const;
    int64_t value; /* const axes; 0 for var axes */
} kh_task_axis;

typedef struct kh_task_tensor {
    char *name;
    char *dtype;    /* one of FlashInfer-Bench's DType names, as written */
    int dtype_bits; /* 4 for float4_e2m1, 8 for bool */
    int is_scalar;  /* shape: null (a Python scalar) */
    size_t rank;
    size_t *dims;   /* rank axis indices into the definition's axes */
    int valid;      /* 0: its dtype or shape was wrong (kept so names resolve) */
} kh_task_tensor;

typedef struct kh_task_constraint {
    char *text;
    kh_expr *expr; /* NULL when the text did not parse or names unknown things */
} kh_task_constraint;

typedef struct kh_task_def {
    char *name, *op_type, *file;
    int line;
    size_t naxes, ninputs, noutputs, nconstraints;
    kh_task_axis *axes;
    kh_task_tensor *inputs, *outputs;
    kh_task_constraint *constraints;
    /* khlua additions, with FlashInfer-Bench's defaults when absent */
    char *reference;      /* trusted reference solution name, or NULL */
    char *baseline;       /* baseline solution name, or NULL */
    char *evaluator;      /* default, lowbit, dsa_sparse_attention, dsa_topk_indexer, sampling */
    double atol, rtol, required_matched_ratio;
    /* the sampling evaluator's flags (FIB's cfg.extra names, under "tolerance"):
     * validation calls (100) and the total-variation bound (0.2) */
    int sampling_validation_trials;
    double sampling_tvd_threshold;
    kh_expr *sol_bytes;   /* NULL: the sum of all input and output sizes */
    kh_expr *sol_flops;   /* NULL: unknown */
    json_t *json;         /* the whole definition object */
    size_t errors;        /* errors found in this definition's file */
    int context;          /* loaded unchecked, as context for a checked file */
    int used;             /* named by a loaded workload or solution */
} kh_task_def;

/* The most validation calls a sampling definition may ask for (one worker
 * request holds them all). */
#define KH_TASK_MAX_SAMPLING_TRIALS 1024

typedef struct kh_task_workload {
    const kh_task_def *def; /* NULL when the definition is unknown */
    char *definition, *uuid, *file;
    int line;
    int is_trace;   /* from traces/ (carries a solution and an evaluation) */
    int axes_ok;    /* every axis has a value */
    int64_t *axes;  /* def->naxes values: const from the definition, var from here */
    json_t *json;   /* the "workload" object */
    json_t *record; /* the whole JSONL line */
    size_t seq;     /* load order */
} kh_task_workload;

typedef enum kh_task_arg_kind {
    KH_TASK_ARG_INPUT,     /* pointer to an input tensor */
    KH_TASK_ARG_OUTPUT,    /* pointer to an output tensor */
    KH_TASK_ARG_WORKSPACE, /* pointer to a workspace buffer */
    KH_TASK_ARG_SCALAR,    /* by value: a scalar (shape null) input, in its dtype */
    KH_TASK_ARG_VALUE,     /* by value: an integer expression over the axes */
} kh_task_arg_kind;

typedef struct kh_task_arg {
    kh_task_arg_kind kind;
    char *name;    /* tensor / workspace / scalar name; NULL for VALUE */
    kh_expr *expr; /* VALUE */
    char *type;    /* VALUE: int32, int64, uint32, uint64 */
} kh_task_arg;

typedef struct kh_task_launch {
    char *kernel;
    kh_expr *grid[3], *block[3], *shared_bytes;
    size_t nargs;
    kh_task_arg *args;
} kh_task_launch;

typedef struct kh_task_workspace {
    char *name;
    kh_expr *bytes;
    int zero; /* zero-filled before every call */
} kh_task_workspace;

typedef struct kh_task_manifest {
    int host;        /* backend "host": one C entry function */
    int so;          /* backend "cuda_so": a trusted nvcc-built shared object whose C entry
                        the gpu worker calls with device pointers, then the stream (a
                        package's own solutions only, never a candidate: eval.h) */
    char *function;  /* host, cuda_so: the entry function */
    size_t nlaunches, nworkspace, nargs, nlink;
    kh_task_launch *launches;     /* cuda */
    kh_task_workspace *workspace;
    kh_task_arg *args;            /* host, cuda_so */
    char **link;                  /* cuda_so: libraries to link (-l<name>), e.g. "cublas" */
} kh_task_manifest;

typedef struct kh_task_solution {
    const kh_task_def *def; /* NULL when unknown */
    char *name, *definition, *author, *file, *language;
    char *entry_file, *entry_function;
    int dps;
    int line;
    kh_task_manifest *manifest; /* NULL: a plain FlashInfer-Bench solution */
    json_t *json;
} kh_task_solution;

typedef enum kh_task_severity { KH_TASK_ERROR = 0, KH_TASK_WARNING = 1 } kh_task_severity;

typedef struct kh_task_problem {
    kh_task_severity severity;
    char *file;  /* as given (relative to the checked path's parent when inside it) */
    int line;    /* 1-based; 0 when the problem concerns the file as a whole */
    char *field; /* dotted path: inputs.q.dtype, workload.axes.batch_size */
    char *msg;   /* "expected ..., got ..." */
} kh_task_problem;

typedef struct kh_task_summary {
    const char *kind;            /* "dataset", "package", "definition", "solution", "workloads" */
    size_t context_definitions;  /* loaded, unchecked, from the dataset around a checked file */
    size_t files, definitions, workload_files, workloads, traces, solutions, candidates;
    size_t constraints;          /* constraints of the checked (or used) definitions */
    size_t constraint_checks;    /* (workload, constraint) pairs evaluated */
    size_t deferred;             /* constraints that need tensor data */
    size_t data_checks;          /* (workload, data constraint) pairs evaluated from blobs */
    size_t blobs_missing, blobs_checked;
    size_t python_checked;       /* definitions whose reference and constraints Python parsed */
    const char *python;          /* that Python's version, or NULL */
    size_t errors, warnings;
} kh_task_summary;

typedef struct kh_task_opts {
    int strict; /* an absent safetensors blob is an error, not a warning */
    /* a Solution file outside any package or dataset: the package or dataset
     * whose definitions its manifest is checked against (NULL: none) */
    const char *defs_from;
    /* parse every checked definition's reference and constraints with
     * Python's ast, as FlashInfer-Bench's validators do (one Python process
     * per load; without one, a warning): what `khlua task check` and
     * kh.task.check ask for, not what every load of a task pays for */
    int python;
} kh_task_opts;

/* Load PATH: one .json (definition or solution, told apart by content), one
 * .jsonl (workloads or traces; definitions are looked up in the dataset or
 * package above it), a task package (a folder with definition.json), or a
 * dataset (a folder with definitions/, workloads/, solutions/, traces/).
 * Free with kh_task_set_free.  Non-OK only when PATH cannot be read. */
kh_status kh_task_load(const char *path, const kh_task_opts *opts, kh_task_set **out, kh_err *err);
void kh_task_set_free(kh_task_set *s);
/* How many kh_task_load calls this process has made: what shows that a run
 * reads its task once (kh.task.loads()). */
size_t kh_task_load_count(void);

/* Every pointer below lives as long as the set. */
const kh_task_summary *kh_task_set_summary(const kh_task_set *s);
size_t kh_task_nproblems(const kh_task_set *s);
const kh_task_problem *kh_task_problem_at(const kh_task_set *s, size_t i);
size_t kh_task_ndeferred(const kh_task_set *s);
const char *kh_task_deferred_at(const kh_task_set *s, size_t i); /* distinct constraint texts */


size_t kh_task_ndefs(const kh_task_set *s);
const kh_task_def *kh_task_def_at(const kh_task_set *s, size_t i);
const kh_task_def *kh_task_find_def(const kh_task_set *s, const char *name);
/* Solutions of `sols` loaded on their own (a Solution file outside any
 * package) take their definitions from `defs` (a task package loaded
 * beside): each one whose definition was not found gets defs' of that name.
 * Returns how many are still without one. */
size_t kh_task_bind_definitions(kh_task_set *sols, const kh_task_set *defs);
/* A Solution JSON held in memory (TEXT, LEN bytes; LABEL names it in
 * messages, as a file name would) parsed against the definitions of DEFS, a
 * loaded package or dataset, without reading any file or parsing DEFS again.
 * *out: a set holding that solution (none when the text is not one: its
 * problems say why, file:line under LABEL) whose definition lookups fall
 * through to DEFS, which must outlive it.  Non-OK only when out of memory. */
kh_status kh_task_solution_from_text(const kh_task_set *defs, const char *label, const char *text,
                                     size_t len, kh_task_set **out, kh_err *err);
/* A CUDA candidate's sources as NVRTC compiles them (compile.h): the entry
 * file's text (*src, *len) is the translation unit, and every other source
 * is a header named by its path (*headers, *n: an array the caller frees;
 * names and texts live as long as sol).  KH_EINVAL when the entry file is
 * not among the sources or a source lacks a path or content; KH_ENOMEM. */
struct kh_source;
kh_status kh_task_cuda_sources(const kh_task_solution *sol, const char **src, size_t *len,
                               struct kh_source **headers, size_t *n, kh_err *err);
/* Non-OK when SOL's file holds an error (a launch manifest that names what
 * its definition lacks, a bad field): an argument list with a binding left
 * out must never run.  The first error is named with its file and line. */
kh_status kh_task_solution_errors(const kh_task_set *s, const kh_task_solution *sol, kh_err *err);
/* Why khlua eval cannot run sol, or NULL when it can: a FlashInfer-Bench
 * Solution without a launch manifest (Python, Triton, TileLang, or C++/CUDA
 * bound with TVM-FFI or torch: code that launches its own kernels).  Static
 * text, the words of eval's refusal and of task check's warning. */
const char *kh_task_unrunnable(const kh_task_solution *sol);
size_t kh_task_nworkloads(const kh_task_set *s);
const kh_task_workload *kh_task_workload_at(const kh_task_set *s, size_t i);
size_t kh_task_nsolutions(const kh_task_set *s);
const kh_task_solution *kh_task_solution_at(const kh_task_set *s, size_t i);
const kh_task_solution *kh_task_find_solution(const kh_task_set *s, const char *name);

/* Index of the axis named name, or -1. */
int kh_task_axis_index(const kh_task_def *d, const char *name);
/* Bits per element of a FlashInfer-Bench dtype name (4 for float4_e2m1, 8
 * for bool); 0 for an unknown name. */
int kh_task_dtype_bits(const char *dtype);

/* Evaluate e for definition d with axis values axes (d->naxes entries):
 * names are axes, t.shape[i] is the axis value of dimension i of tensor t.
 * Data references (t[i].item()) fail with KH_EUNSUPPORTED unless
 * data_lookup (may be NULL) knows them. */
kh_status kh_task_eval(const kh_task_def *d, const int64_t *axes, const kh_expr *e,
                       kh_expr_lookup_fn data_lookup, void *data_ctx, int64_t *out, kh_err *err);

/* The bytes of all inputs and outputs for one set of axis values (a scalar
 * input counts its dtype's size), whatever the definition's speed-of-light
 * expression says. */
kh_status kh_task_io_bytes(const kh_task_def *d, const int64_t *axes, int64_t *bytes, kh_err *err);

/* Speed-of-light bounds for one set of axis values: minimum bytes moved (the
 * definition's expression, else the sum of all input and output sizes) and
 * FLOPs (-1 when the definition gives none). */
kh_status kh_task_speed_of_light(const kh_task_def *d, const int64_t *axes, int64_t *bytes,
                                 int64_t *flops, kh_err *err);

/* A manifest resolved for one set of axis values. */
typedef struct kh_task_launch_dims {
    int64_t grid[3], block[3], shared_bytes;
} kh_task_launch_dims;
/* Fill dims (m->nlaunches entries) and ws_bytes (m->nworkspace entries);
 * checks grid >= 1, 1 <= block, block threads <= 1024, sizes >= 0. */
kh_status kh_task_manifest_resolve(const kh_task_solution *sol, const int64_t *axes,
                                   kh_task_launch_dims *dims, int64_t *ws_bytes, kh_err *err);

/* "file:line: field: message" into buf (truncated); returns buf. */
const char *kh_task_problem_format(const kh_task_problem *p, char *buf, size_t n);
/* KH_EPARSE naming the set's first unreadable file or line (a JSON syntax
 * error: "file:line: json: message, and N more: khlua task check PATH lists
 * them"), or KH_OK when every file parsed.  What parsed but breaks a rule (a
 * workload outside a constraint) is left to the caller: eval still runs a
 * workload it was asked for. */
kh_status kh_task_check_errors(const kh_task_set *s, const char *path, kh_err *err);


/* The fingerprint of a task package on disk: every regular file under it
 * (three levels deep), by relative path and content (files over 4 MiB by
 * size and modification time), sorted; hash over all of them.  An
 * evaluation loads the package once and records the hash with its verdicts;
 * a file that changed by the end is named (the loaded version is what was
 * used). */
typedef struct kh_task_fp_entry {
    char path[512];
    uint64_t hash;
} kh_task_fp_entry;

typedef struct kh_task_fp {
    uint64_t hash;
    kh_task_fp_entry *e;
    size_t n, cap;
} kh_task_fp;

kh_status kh_task_fingerprint(const char *path, kh_task_fp *fp, kh_err *err);
/* The first file that differs (changed, added or removed), or NULL. */
const char *kh_task_fp_diff(const kh_task_fp *a, const kh_task_fp *b);
void kh_task_fp_free(kh_task_fp *fp);

/* A task as a value: PATH (a package, a dataset, or one file of either)
 * fingerprinted, then loaded, once.  What kh.task.load gives Lua and
 * kh_eval_run_task takes: a run evaluates every candidate against the
 * version loaded at its start, and names a file that changed on disk since
 * (kh_task_fp_diff against fp) instead of reading it again. */
typedef struct kh_task {
    char *path;
    kh_task_set *set;
    kh_task_fp fp; /* taken before the load */
} kh_task;

/* Non-OK when PATH cannot be read (kh_task_load's errors); problems in its
 * files are in t->set.  Free with kh_task_close. */
kh_status kh_task_open(const char *path, const kh_task_opts *opts, kh_task **out, kh_err *err);
void kh_task_close(kh_task *t);

#endif
