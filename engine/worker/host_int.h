/* host_int.h: what role_host.c (the run) and host_req.c (the `evaluate`
 * request) share, and nobody outside engine/worker/ sees: the request as
 * parsed, its tensors and the entry point's arguments.  role_host.c calls
 * host_req.c, never the other way. */
#ifndef KH_HOST_INT_H
#define KH_HOST_INT_H

#include "worker/hostbench.h"
#include "worker/jail.h"
#include "task/task.h"
#include "task/tensor.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define MAX_TENSORS KH_JAIL_MAX_TENSORS
#define MAX_ARGS KH_JAIL_MAX_ARGS

/* ---- tensors ------------------------------------------------------------- */
enum { T_INPUT, T_OUTPUT, T_WORKSPACE };
enum { G_NONE, G_RANDOM, G_SCALAR, G_BYTES, G_DSA_KCACHE };

typedef struct tspec {
    char name[64];
    int role;
    kh_dtype dtype;
    int ndim;
    int64_t shape[KH_TENSOR_MAX_DIMS];
    uint64_t numel;
    size_t nbytes;
    int gen;
    uint32_t stream;
    double value;
    size_t bytes_off, bytes_len;
    int zero;
} tspec;

/* ---- the request ---------------------------------------------------------- */
enum { A_PTR, A_I32, A_I64, A_U32, A_U64, A_F32, A_F64, A_SCALAR };

typedef struct harg {
    int kind;
    int tensor; /* A_PTR, A_SCALAR */
    int64_t i;
    double f;
} harg;

typedef struct req {
    const unsigned char *payload;
    size_t payload_len;
    const unsigned char *so;
    size_t so_len;
    const char *symbol;
    size_t nt;
    tspec t[MAX_TENSORS];
    size_t na;
    harg a[MAX_ARGS];
    size_t ntrials;
    uint64_t seeds[KH_TASK_MAX_SAMPLING_TRIALS]; /* trials: 64, or a sampling task's calls */
    int poison, inputs_unchanged, guards, deterministic, reload;
    int trusted; /* the task's own reference: timing may rotate input sets */
    int timing;
    kh_bench_opts bo;
    int rotate;
    double verify_fraction;
    int max_verified;
    uint64_t timing_seed, sample_seed;
    double deadline_s;
} req;

/* The `evaluate` request: params p and its payload[0..n) into r (which
 * points into payload).  KH_EINVAL or KH_EUNSUPPORTED naming the field. */
kh_status kh_host_parse_req(const json_t *p, const unsigned char *payload, size_t n, req *r,
                            kh_err *err);

#endif
