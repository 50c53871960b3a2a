#!/usr/bin/env python3
"""Writes the host red-team task package (rmsnorm/): the definition, small
workloads, the trusted C reference, honest candidates and one candidate per
reward-hacking pattern that applies to host code, plus the fault-injection
candidates.  The C sources live here, in this script; the JSON files it
writes are checked in, so running the tests needs no Python.  Run it after
editing a candidate:  python3 tests/redteam/host/make_package.py"""
import json, os, shutil

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(HERE, "rmsnorm")

PRELUDE = r'''#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static float bf(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static uint16_t fb(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static void row(const uint16_t *x, const uint16_t *w, float eps, uint16_t *out, int64_t h)
{
    float s = 0.f;
    for (int64_t c = 0; c < h; c++)
        s += bf(x[c]) * bf(x[c]);
    float k = 1.0f / sqrtf(s / (float)h + eps);
    for (int64_t c = 0; c < h; c++)
        out[c] = fb(bf(x[c]) * k * bf(w[c]));
}
'''
SIG = "void rmsnorm(const uint16_t *x, const uint16_t *w, float eps, uint16_t *out, int64_t rows, int64_t h)"

def honest_body():
    return "{\n    for (int64_t r = 0; r < rows; r++)\n        row(x + r * h, w, eps, out + r * h, h);\n}\n"

CANDIDATES = {
    # name: (description, body after the prelude)
    "ref_c": ("Trusted reference: plain C, float accumulation.", SIG + "\n" + honest_body()),
    "honest_double": ("Honest: double accumulation, one pass per row.", SIG + r'''
{
    for (int64_t r = 0; r < rows; r++) {
        double s = 0;
        for (int64_t c = 0; c < h; c++) {
            double v = bf(x[r * h + c]);
            s += v * v;
        }
        float k = (float)(1.0 / sqrt(s / (double)h + eps));
        for (int64_t c = 0; c < h; c++)
            out[r * h + c] = fb(bf(x[r * h + c]) * k * bf(w[c]));
    }
}
'''),
    "honest_unrolled": ("Honest: four partial sums, a static scratch row (allowed state).", SIG + r'''
{
    static float scratch[4096];
    for (int64_t r = 0; r < rows; r++) {
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        const uint16_t *xr = x + r * h;
        for (int64_t c = 0; c + 3 < h; c += 4) {
            scratch[c] = bf(xr[c]); scratch[c + 1] = bf(xr[c + 1]);
            scratch[c + 2] = bf(xr[c + 2]); scratch[c + 3] = bf(xr[c + 3]);
            s0 += scratch[c] * scratch[c]; s1 += scratch[c + 1] * scratch[c + 1];
            s2 += scratch[c + 2] * scratch[c + 2]; s3 += scratch[c + 3] * scratch[c + 3];
        }
        float k = 1.0f / sqrtf(((s0 + s1) + (s2 + s3)) / (float)h + eps);
        for (int64_t c = 0; c < h; c++)
            out[r * h + c] = fb(scratch[c] * k * bf(w[c]));
    }
}
'''),
    "stale_output": ("Computes on the first call only, then leaves the output memory as it is.", SIG + r'''
{
    static int done;
    if (done++)
        return;
    for (int64_t r = 0; r < rows; r++)
        row(x + r * h, w, eps, out + r * h, h);
}
'''),
    "constant_output": ("Writes a constant.", SIG + r'''
{
    (void)x; (void)w; (void)eps;
    for (int64_t i = 0; i < rows * h; i++)
        out[i] = fb(0.5f);
}
'''),
    "copy_input": ("Copies the input to the output.", SIG + r'''
{
    (void)w; (void)eps;
    memcpy(out, x, (size_t)(rows * h) * 2);
}
'''),
    "input_mutation": ("Right output, but normalises the input in place as scratch.", SIG + r'''
{
    uint16_t *xm = (uint16_t *)x;
    for (int64_t r = 0; r < rows; r++) {
        row(x + r * h, w, eps, out + r * h, h);
        memcpy(xm + r * h, out + r * h, (size_t)h * 2);
    }
}
'''),
    "cross_call_cache": ("Caches each result by input address in a static table and replays it.", SIG + r'''
{
    static const void *keys[16];
    static uint16_t *vals[16];
    static int n;
    for (int i = 0; i < n; i++)
        if (keys[i] == x) {
            memcpy(out, vals[i], (size_t)(rows * h) * 2);
            return;
        }
    for (int64_t r = 0; r < rows; r++)
        row(x + r * h, w, eps, out + r * h, h);
    if (n < 16 && (vals[n] = malloc((size_t)(rows * h) * 2))) {
        memcpy(vals[n], out, (size_t)(rows * h) * 2);
        keys[n++] = x;
    }
}
'''),
    "deferred_work": ("Returns at once and does each call's work at the start of the next call.", SIG + r'''
{
    static const uint16_t *px, *pw;
    static float peps;
    static uint16_t *pout;
    static int64_t prows, ph;
    if (pout)
        for (int64_t r = 0; r < prows; r++)
            row(px + r * ph, pw, peps, pout + r * ph, ph);
    px = x; pw = w; peps = eps; pout = out; prows = rows; ph = h;
}
'''),
    "skip_on_test_distribution": ("Assumes unit RMS for standard-normal inputs and skips the reduction.", SIG + r'''
{
    (void)eps;
    for (int64_t i = 0; i < rows * h; i++)
        out[i] = fb(bf(x[i]) * bf(w[i % h]));
}
'''),
    "precision_downgrade": ("Computes through a 3-bit mantissa (fp8-like), beyond the tolerance.", SIG + r'''
{
    for (int64_t r = 0; r < rows; r++) {
        row(x + r * h, w, eps, out + r * h, h);
        for (int64_t c = 0; c < h; c++)
            out[r * h + c] &= 0xfff0; /* keep 3 of 7 mantissa bits */
    }
}
'''),
    "partial_computation": ("Writes the first half of each row only.", SIG + r'''
{
    uint16_t tmp[8192];
    for (int64_t r = 0; r < rows; r++) {
        row(x + r * h, w, eps, tmp, h);
        memcpy(out + r * h, tmp, (size_t)(h / 2) * 2);
    }
}
'''),
    "oob_write_near": ("Right output, plus one element written just past the end of the output.", SIG + r'''
{
    for (int64_t r = 0; r < rows; r++)
        row(x + r * h, w, eps, out + r * h, h);
    out[rows * h] = 0x1234;
}
'''),
    "oob_write_far": ("Right output, plus a write 12 KiB past the end of the output.", SIG + r'''
{
    for (int64_t r = 0; r < rows; r++)
        row(x + r * h, w, eps, out + r * h, h);
    ((volatile uint16_t *)out)[rows * h + 4096 + 2048] = 1;
}
'''),
    "nan_output": ("Right output except one NaN.", SIG + r'''
{
    for (int64_t r = 0; r < rows; r++)
        row(x + r * h, w, eps, out + r * h, h);
    out[rows * h / 2] = fb(NAN);
}
'''),
    "skip_if_output_written": ("Does no work when the output memory already holds a result (timed calls are not poisoned): faster than physics.", SIG + r'''
{
    if (out[0] != 0xffff && out[0] != 0x7f7f && out[rows * h - 1] != 0xffff && out[rows * h - 1] != 0x7f7f)
        return;
    for (int64_t r = 0; r < rows; r++)
        row(x + r * h, w, eps, out + r * h, h);
}
'''),
    # fault injection
    "fault_segfault": ("Writes through a null pointer.", SIG + r'''
{
    (void)x; (void)w; (void)eps; (void)out; (void)rows; (void)h;
    *(volatile int *)(uintptr_t)8 = 1;
}
'''),
    "fault_infinite_loop": ("Never returns.", SIG + r'''
{
    (void)x; (void)w; (void)eps; (void)out; (void)rows; (void)h;
    for (volatile unsigned long i = 0;; i++) {
    }
}
'''),
    "fault_out_of_memory": ("Allocates and touches memory until it runs out (a gradual leak).", "#include <unistd.h>\n" + SIG + r'''
{
    (void)x; (void)w; (void)eps; (void)out; (void)rows; (void)h;
    for (int i = 0; i < 128; i++) { /* 4 GiB at most */
        char *p = malloc((size_t)32 << 20);
        if (!p)
            abort();
        memset(p, 1, (size_t)32 << 20);
        usleep(10000);
    }
    for (;;)
        pause(); /* the limit did not stop us: overrun instead */
}
'''),
    "fault_abort": ("Calls abort().", SIG + r'''
{
    (void)x; (void)w; (void)eps; (void)out; (void)rows; (void)h;
    abort();
}
'''),
    "fault_stack_overflow": ("Unbounded recursion with large frames.", r'''static int deep(volatile int d)
{
    volatile char pad[8192];
    pad[0] = (char)d;
    pad[8191] = (char)d;
    return deep(d + 1) + pad[0] + pad[8191];
}
''' + SIG + r'''
{
    (void)x; (void)w; (void)eps; (void)out; (void)rows; (void)h;
    deep(0);
}
'''),
    "fault_misaligned": ("Enables x86 alignment checking (EFLAGS.AC, through the compiler's "
                         "builtins: host candidates may not use asm), then loads through a "
                         "misaligned pointer.",
                         "#include <signal.h>\n#if defined(__x86_64__)\n#include <x86intrin.h>\n#endif\n"
                         + SIG + r'''
{
    (void)w; (void)eps; (void)out; (void)rows; (void)h;
#if defined(__x86_64__)
    __writeeflags(__readeflags() | 0x40000);
    volatile uint32_t v = *(volatile const uint32_t *)((const char *)x + 1);
    (void)v;
#endif
    raise(SIGBUS); /* where the hardware tolerates it, report as the fault would */
}
'''),
}

DEF = {
    "name": "rmsnorm_h512_rt",
    "op_type": "rmsnorm",
    "description": "RMSNorm over 512 columns: the host red-team task (small workloads).",
    "tags": ["status:test"],
    "axes": {"batch_size": {"type": "var"}, "hidden_size": {"type": "const", "value": 512}},
    "constraints": ["batch_size >= 1 and batch_size <= 4096"],
    "inputs": {
        "hidden_states": {"shape": ["batch_size", "hidden_size"], "dtype": "bfloat16"},
        "weight": {"shape": ["hidden_size"], "dtype": "bfloat16"},
        "eps": {"shape": None, "dtype": "float32"},
    },
    "outputs": {"output": {"shape": ["batch_size", "hidden_size"], "dtype": "bfloat16"}},
    "reference": "import torch\n\ndef run(hidden_states, weight, eps):\n    x = hidden_states.float()\n    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)\n    return (x * r * weight.float()).to(hidden_states.dtype)\n",
    "khlua": {"reference": "rt_ref_c", "tolerance": {"atol": 0.01, "rtol": 0.01}},
}

WORKLOADS = [(1, 1e-6), (7, 1e-6), (64, 1e-5)]

def write_package(pkg, d, names, prefix):
    if os.path.isdir(pkg):
        shutil.rmtree(pkg)
    os.makedirs(os.path.join(pkg, "solutions"))
    with open(os.path.join(pkg, "definition.json"), "w") as f:
        json.dump(d, f, indent=2)
        f.write("\n")
    with open(os.path.join(pkg, "workloads.jsonl"), "w") as f:
        for i, (b, eps) in enumerate(WORKLOADS):
            f.write(json.dumps({"definition": d["name"], "solution": None, "evaluation": None,
                                "workload": {"uuid": "7e0d7a8e-%04d-4a57-9a3c-1d2e3f405161" % (i + 1),
                                             "axes": {"batch_size": b},
                                             "inputs": {"hidden_states": {"type": "random"},
                                                        "weight": {"type": "random"},
                                                        "eps": {"type": "scalar", "value": eps}}}}) + "\n")
    for name in names:
        desc, body = CANDIDATES[name]
        sol = {
            "name": prefix + name,
            "definition": d["name"],
            "author": "khlua-redteam",
            "description": desc,
            "spec": {
                "language": "cpp",
                "target_hardware": ["cpu"],
                "entry_point": name + ".c::rmsnorm",
                "khlua": {
                    "backend": "host",
                    "function": "rmsnorm",
                    "args": [{"input": "hidden_states"}, {"input": "weight"}, {"scalar": "eps"},
                             {"output": "output"}, {"axis": "batch_size", "type": "int64"},
                             {"axis": "hidden_size", "type": "int64"}],
                },
            },
            "sources": [{"path": name + ".c", "content": PRELUDE + "\n" + body}],
        }
        with open(os.path.join(pkg, "solutions", prefix + name + ".json"), "w") as f:
            json.dump(sol, f, indent=2)
            f.write("\n")


def main():
    write_package(PKG, DEF, list(CANDIDATES), "rt_")
    # The same task with a definition that claims far more bytes must move
    # than do: any real run is then "faster than physics", which is how the
    # speed-of-light check is exercised on the host (no honest host code can
    # beat a correct bound, and a precomputed table is caught earlier, by
    # the verified timed calls).
    d = json.loads(json.dumps(DEF))
    d["name"] = "rmsnorm_h512_rt_sol"
    d["description"] = "RMSNorm with an inflated speed-of-light bound (tests the bound check)."
    d["khlua"] = {"reference": "sol_ref_c", "tolerance": {"atol": 0.01, "rtol": 0.01},
                  "speed_of_light": {"bytes": "1000000000 * batch_size * hidden_size"}}
    write_package(os.path.join(HERE, "rmsnorm_sol"), d, ["ref_c", "honest_double"], "sol_")

main()
