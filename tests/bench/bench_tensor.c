/* bench_tensor.c: host throughput of the input generator and of the output
 * comparison, each against an anchor measured side by side in the same run:
 *   generator  vs  a splitmix64 fill of the same buffer (the cost of "some
 *                  random bits", no distribution); the generator uses every
 *                  CPU (rng.h), the anchor one, so the ratio is wall time;
 *   compare    vs  a bare loop taking max |x - y| over the same bf16 pair.
 * Prints ns/element and the ratio to the anchor.  Not a test. */
#include "eval/check.h"
#include "task/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static double best_of(int reps, double (*fn)(void *), void *arg)
{
    double best = 1e30;
    for (int i = 0; i < reps; i++) {
        double t = fn(arg);
        if (t < best)
            best = t;
    }
    return best;
}

static kh_tensor *X, *Y;
static volatile double sink;

static double run_gen(void *arg)
{
    double t0 = kh_now();
    kh_rng_fill(NULL, X, 42, 0, NULL);
    return kh_now() - t0;
}

static double run_splitmix(void *arg)
{
    double t0 = kh_now();
    uint64_t s = 42;
    uint32_t *p = X->data;
    for (uint64_t i = 0; i < X->numel; i++) {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        p[i] = (uint32_t)(z ^ (z >> 31));
    }
    sink = p[X->numel / 2];
    return kh_now() - t0;
}

static double run_compare(void *arg)
{
    kh_check_result r;
    kh_check_opts o;
    kh_check_opts_default(&o);
    o.threads = arg ? *(int *)arg : 0;
    double t0 = kh_now();
    kh_check_compare(X, Y, &o, &r, NULL);
    sink = r.max_abs_error;
    return kh_now() - t0;
}

static double run_bare_compare(void *arg)
{
    double t0 = kh_now();
    const uint16_t *a = X->data, *b = Y->data;
    float m = 0;
    for (uint64_t i = 0; i < X->numel; i++) {
        uint32_t ua = (uint32_t)a[i] << 16, ub = (uint32_t)b[i] << 16;
        float fa, fb;
        memcpy(&fa, &ua, 4);
        memcpy(&fb, &ub, 4);
        float d = fabsf(fa - fb);
        if (d > m)
            m = d;
    }
    sink = m;
    return kh_now() - t0;
}

int main(int argc, char **argv)
{
    int64_t n = argc > 1 ? atoll(argv[1]) : (1 << 22);
    kh_err err;
    if (kh_tensor_new(&X, KH_DTYPE_F32, 1, &n, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    double g = best_of(3, run_gen, NULL), a = best_of(3, run_splitmix, NULL);
    printf("generator float32: %.2f ns/element; splitmix64 anchor %.2f ns/element; ratio %.1f\n",
           g * 1e9 / (double)n, a * 1e9 / (double)n, g / a);
    kh_tensor_free(X);
    if (kh_tensor_new(&X, KH_DTYPE_BF16, 1, &n, &err) ||
        kh_tensor_new(&Y, KH_DTYPE_BF16, 1, &n, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    kh_rng_fill(NULL, X, 1, 0, NULL);
    kh_rng_fill(NULL, Y, 1, 1, NULL);
    int one = 1;
    double c = best_of(3, run_compare, NULL), b = best_of(3, run_bare_compare, NULL);
    double c1 = best_of(3, run_compare, &one);
    printf("compare bfloat16: %.2f ns/element; bare max|x-y| anchor %.2f ns/element; ratio %.1f\n",
           c * 1e9 / (double)n, b * 1e9 / (double)n, c / b);
    printf("compare bfloat16, one thread: %.2f ns/element; ratio %.1f to the anchor, every CPU "
           "(%ld) %.2fx faster\n",
           c1 * 1e9 / (double)n, c1 / b, sysconf(_SC_NPROCESSORS_ONLN), c1 / c);
    kh_tensor_free(X);
    kh_tensor_free(Y);
    return 0;
}
