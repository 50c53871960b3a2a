/* launch.h: a concrete launch list, the form in which a gpu worker receives
 * work.  The coordinator resolves a candidate's manifest (expressions over the
 * axes) into this; the worker only allocates, fills and launches.
 *
 *   { "buffers":  [ {"name": "x", "bytes": 4096, "init": "random" | "zero" |
 *                    "none", "seed": 7} ],
 *     "launches": [ {"kernel": "copy", "grid": [g,1,1], "block": [256,1,1],
 *                    "smem": 0, "args": [ {"buf": "x"}, {"i32": 5}, {"i64": 5},
 *                    {"u32": 5}, {"u64": 5}, {"f32": 1.5}, {"f64": 1.5} ] } ] }
 *
 * "random" fills a buffer with uniformly random 32-bit words from the seed
 * (finite float32 values in [-1, 1) when read as float).
 *
 * An argument {"scalar": name} passes the value held by the one-element
 * buffer `name` by value (a random scalar input: its value is drawn per
 * trial, so the coordinator cannot resolve it); the caller supplies the
 * value's bits after each fill with kh_launch_set_scalar. */
#ifndef KH_LAUNCH_H
#define KH_LAUNCH_H

#include "gpu/gpu.h"

#define KH_LAUNCH_MAX_ARGS 64

typedef struct kh_launch_buf {
    char name[64];
    kh_gpu_buf buf;
} kh_launch_buf;

typedef union kh_arg_val {
    int32_t i32;
    int64_t i64;
    uint32_t u32;
    uint64_t u64;
    float f32;
    double f64;
    CUdeviceptr ptr;
} kh_arg_val;

typedef struct kh_launch_one {
    CUfunction fn;
    char kernel[128];
    unsigned grid[3], block[3], smem;
    int nargs;
    kh_arg_val vals[KH_LAUNCH_MAX_ARGS];
    /* {"scalar": name} arguments: 1 + the index of the named buffer in the
     * list's bufs, 0 for any other argument.  Their value comes from
     * kh_launch_set_scalar (zero until then). */
    unsigned short scalar_of[KH_LAUNCH_MAX_ARGS];
    void *params[KH_LAUNCH_MAX_ARGS];
} kh_launch_one;

typedef struct kh_launch_list {
    kh_gpu *g;
    kh_launch_buf *bufs;
    size_t nbufs;
    int borrowed;        /* bufs belong to someone else: free neither them nor their memory */
    kh_launch_one *launches;
    size_t nlaunches;
} kh_launch_list;

/* Parse spec, allocate and fill its buffers, look up its kernels in module
 * and check each launch against the kernel's limits.  Errors name the launch
 * and the field. */
kh_status kh_launch_prepare(kh_gpu *g, CUmodule module, const json_t *spec, size_t guard,
                            kh_launch_list *l, kh_err *err);
/* Bind launches (a JSON array, as in a spec) against buffers that already
 * exist: bufs[0..nbufs) are borrowed (the caller frees them after the list).
 * Arguments may name a buffer as {"buf": name} or {"tensor": name}. */
kh_status kh_launch_bind(kh_gpu *g, CUmodule module, const json_t *launches,
                         kh_launch_buf *bufs, size_t nbufs, kh_launch_list *l, kh_err *err);

/* Parse launches[k].args into o against l->bufs (no CUDA call: the part of
 * binding that tests can run without a GPU).  Errors name the argument. */
kh_status kh_launch_parse_args(const kh_launch_list *l, size_t k, const json_t *args,
                               kh_launch_one *o, kh_err *err);
/* Give every {"scalar": name} argument of every launch in l the value whose
 * little-endian bits are `code` (zero-extended: a 1-, 2-, 4- or 8-byte
 * parameter reads its own width).  Returns how many arguments took it. */
int kh_launch_set_scalar(kh_launch_list *l, const char *name, uint64_t code);

/* Enqueue every launch on the GPU's stream (a kh_bench_target call). */
kh_status kh_launch_enqueue(kh_launch_list *l, kh_err *err);
/* Check every buffer's guard bands; names the buffer on failure. */
kh_status kh_launch_check_guards(kh_launch_list *l, kh_err *err);
void kh_launch_free(kh_launch_list *l);

#endif
