/* test_srccheck.c: each static-check rule rejects its violation and names
 * the line it is on (the line is drawn at random among filler code), and
 * the same text in comments, strings and raw strings is left alone. */
#include "kh_test.h"

#include "compile/srccheck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static unsigned g_seed;

/* Filler lines that pass every rule, including decoys of forbidden text. */
static const char *const filler[] = {
    "// cudaMalloc(&p, 4); main(); k<<<1,1>>>(); #include <stdio.h>\n",
    "/* __host__ void h(); int main() { } */\n",
    "__device__ const char *msg_a = \"cudaFree(p) <<< main( \";\n",
    "__device__ const char *msg_b = R\"x(#include <stdio.h> cudaMemcpy( )x\";\n",
    "__device__ __forceinline__ float sq(float v) { return v * v; }\n",
    "__host__ __device__ inline int twice(int v) { return 2 * v; }\n",
    "__device__ char quote_c = '\"';\n",
    "\n",
    "#define KH_SCALE 3\n",
};

typedef struct src {
    char *text;
    int bad_line; /* 1-based line of the inserted line */
} src;

/* nfill random filler lines around `bad` at a random position, after a
 * fixed head, followed by tail. */
static src make(const char *head, const char *bad, const char *tail)
{
    int nfill = 3 + rand() % 12;
    int pos = rand() % (nfill + 1);
    size_t cap = 65536;
    char *t = malloc(cap);
    t[0] = '\0';
    strcat(t, head);
    int line = 1;
    for (const char *p = head; *p; p++)
        line += *p == '\n';
    src s = {t, 0};
    for (int i = 0; i <= nfill; i++) {
        if (i == pos) {
            s.bad_line = line;
            strcat(t, bad);
            line += 1;
        }
        if (i < nfill) {
            strcat(t, filler[rand() % KH_ARRAY_LEN(filler)]);
            line++;
        }
    }
    strcat(t, tail);
    return s;
}

static void expect_line(const char *head, const char *bad, const char *tail,
                        const kh_srccheck_opts *o, const char *words)
{
    src s = make(head, bad, tail);
    kh_err err;
    char *report = NULL;
    kh_status st = kh_srccheck_run(s.text, strlen(s.text), o, &report, &err);
    char want[64];
    snprintf(want, sizeof want, "candidate.cu:%d: ", s.bad_line);
    if (st != KH_ECOMPILE || !strstr(err.msg, want) || !strstr(err.msg, words))
        fail_msg("seed %u: %s for\n%s\nwanted '%s...%s', got: %s", g_seed, kh_status_name(st),
                 s.text, want, words, err.msg);
    assert_non_null(report);
    free(report);
    free(s.text);
}

static void expect_ok(const char *text, const kh_srccheck_opts *o)
{
    kh_err err;
    kh_status st = kh_srccheck_run(text, strlen(text), o, NULL, &err);
    if (st != KH_OK)
        fail_msg("seed %u: rejected:\n%s\n%s", g_seed, text, err.msg);
}

static const char *KERNEL = "extern \"C\" __global__ void kern(float *a) { a[0] = sq(a[0]); }\n";

static void test_filler_passes(void **state)
{
    (void)state;
    for (int i = 0; i < 20; i++) {
        src s = make("", "", KERNEL);
        const char *ks[] = {"kern"};
        kh_srccheck_opts o = {.kernels = ks, .n_kernels = 1};
        expect_ok(s.text, &o);
        free(s.text);
    }
}

static void test_host_api(void **state)
{
    (void)state;
    expect_line("", "__device__ void f(void **p) { cudaMalloc(p, 64); }\n", KERNEL, NULL,
                "host API call 'cudaMalloc'");
    expect_line("", "__device__ void g() { cuLaunchKernel(0,1,1,1,1,1,1,0,0,0,0); }\n", KERNEL,
                NULL, "cuLaunchKernel");
    /* device-side intrinsics with host-looking names are fine */
    expect_ok("__global__ void k() { cudaGridDependencySynchronize(); "
              "cudaTriggerProgrammaticLaunchCompletion(); }\n", NULL);
}

static void test_host_functions(void **state)
{
    (void)state;
    expect_line("", "int main(int argc, char **argv) { return 0; }\n", KERNEL, NULL, "main");
    expect_line("", "__host__ void setup(float *p) { }\n", KERNEL, NULL, "__host__");
    expect_line("", "static __host__ int host_only(int x) { return x; }\n", KERNEL, NULL,
                "__host__");
}

static void test_includes(void **state)
{
    (void)state;
    expect_line("", "#include <stdio.h>\n", KERNEL, NULL, "not on the allowlist");
    expect_line("", "#include \"../secret.h\"\n", KERNEL, NULL, "not on the allowlist");
    expect_line("", "#include <cuda/std/../../../etc/passwd>\n", KERNEL, NULL, "allowlist");
    expect_line("", "#include KH_SCALE\n", KERNEL, NULL, "must name a header");
    expect_line("", "#include_next <cuda_bf16.h>\n", KERNEL, NULL, "not allowed");
    expect_ok("#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <cuda_fp8.h>\n"
              "#include <cooperative_groups.h>\n#include <cooperative_groups/reduce.h>\n"
              "#include <cuda/std/cstdint>\n#include <cub/block/block_reduce.cuh>\n"
              "  #  include   \"cuda_bf16.h\"\n",
              NULL);
    const char *extra[] = {"mma.h"};
    kh_srccheck_opts o = {.extra_includes = extra, .n_extra_includes = 1};
    expect_ok("#include <mma.h>\n", &o);
}

static void test_device_launch(void **state)
{
    (void)state;
    const char *child = "extern \"C\" __global__ void child(float *a) { a[0] = 1; }\n";
    expect_line(child, "__global__ void parent(float *a) { child<<<1, 32>>>(a); }\n", "", NULL,
                "device-side kernel launch");
    expect_line(child, "__device__ void p2() { cudaLaunchDevice(0, 0, dim3(1), dim3(1), 0, 0); }\n",
                "", NULL, "cudaLaunchDevice");
    kh_srccheck_opts o = {.allow_device_launch = 1};
    expect_ok("extern \"C\" __global__ void child(float *a) { a[0] = 1; }\n"
              "__global__ void parent(float *a) { child<<<1, 32>>>(a); }\n", &o);
}

static void test_manifest_kernels(void **state)
{
    (void)state;
    const char *ks[] = {"kern"};
    kh_srccheck_opts o = {.kernels = ks, .n_kernels = 1};
    expect_line("", "__global__ void kern(float *a) { }\n", "", &o, "not declared extern \"C\"");
    expect_line("", "template <int N> __global__ void kern(float *a) { }\n", "", &o,
                "is a template");
    /* missing: the message names the kernel (there is no line to name) */
    kh_err err;
    const char *text = "extern \"C\" __global__ void other(float *a) { }\n";
    assert_int_equal(kh_srccheck_run(text, strlen(text), &o, NULL, &err), KH_ECOMPILE);
    assert_non_null(strstr(err.msg, "kernel 'kern'"));
    /* the forms of extern "C" that give C names */
    expect_ok("extern \"C\" {\n__global__ void __launch_bounds__(256, 2) kern(float *a) { }\n}\n", &o);
    expect_ok("extern \"C\" __global__ void __launch_bounds__(128) kern(float *a) { }\n", &o);
    expect_ok("namespace n { extern \"C\" { __global__ void kern(float *a) {} } }\n", &o);
    /* after an extern "C" block closes, C linkage ends */
    expect_line("extern \"C\" { __device__ int x; }\n", "__global__ void kern(float *a) { }\n",
                "", &o, "not declared extern \"C\"");
}

static void test_size_limit(void **state)
{
    (void)state;
    size_t max = 1000 + (size_t)(rand() % 5000);
    kh_srccheck_opts o = {.max_bytes = max};
    char *t = malloc(max + 2);
    memset(t, ' ', max + 1);
    t[max + 1] = '\0';
    kh_err err;
    assert_int_equal(kh_srccheck_run(t, max, &o, NULL, &err), KH_OK);
    assert_int_equal(kh_srccheck_run(t, max + 1, &o, NULL, &err), KH_ECOMPILE);
    char want[64];
    snprintf(want, sizeof want, "over the limit of %zu bytes", max);
    assert_non_null(strstr(err.msg, want));
    free(t);
    /* the default limit */
    size_t big = KH_SRCCHECK_MAX_BYTES + 1;
    t = malloc(big);
    memset(t, '\n', big);
    assert_int_equal(kh_srccheck_run(t, big, NULL, NULL, &err), KH_ECOMPILE);
    free(t);
}

static void test_encoding(void **state)
{
    (void)state;
    expect_line("", "// caf\xc3 broken\n", KERNEL, NULL, "not valid UTF-8");
    expect_line("", "// overlong \xc0\xaf\n", KERNEL, NULL, "not valid UTF-8");
    expect_line("", "// surrogate \xed\xa0\x80\n", KERNEL, NULL, "not valid UTF-8");
    expect_ok("// caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\n", NULL);
    src s = make("", "// x\n", KERNEL);
    size_t n = strlen(s.text);
    /* a NUL byte on the inserted line */
    char *p = s.text;
    for (int line = 1; line < s.bad_line; p++)
        line += *p == '\n';
    p[1] = '\0';
    kh_err err;
    assert_int_equal(kh_srccheck_run(s.text, n, NULL, NULL, &err), KH_ECOMPILE);
    char want[64];
    snprintf(want, sizeof want, "candidate.cu:%d: NUL byte", s.bad_line);
    assert_non_null(strstr(err.msg, want));
    free(s.text);
}

static void test_report_lists_all(void **state)
{
    (void)state;
    const char *text = "#include <stdio.h>\n"
                       "int main() { return 0; }\n"
                       "__device__ void f(void **p) { cudaMalloc(p, 4); }\n";
    kh_srccheck_opts o = {.name = "cand_7.cu"};
    char *report = NULL;
    kh_err err;
    assert_int_equal(kh_srccheck_run(text, strlen(text), &o, &report, &err), KH_ECOMPILE);
    assert_non_null(strstr(report, "cand_7.cu:1: "));
    assert_non_null(strstr(report, "cand_7.cu:2: "));
    assert_non_null(strstr(report, "cand_7.cu:3: "));
    assert_non_null(strstr(err.msg, "cand_7.cu:1: "));
    free(report);
}

static void test_pch_prefix(void **state)
{
    (void)state;
    const char *a = "// header\n#include <cuda_bf16.h>\n\n#include \"cuda_fp16.h\"\n#define N 4\n"
                    "extern \"C\" __global__ void k() {}\n#include <cuda_fp8.h>\n";
    char *p = kh_srccheck_pch_prefix(a, strlen(a), NULL, 0);
    assert_non_null(p);
    assert_string_equal(p, "// header\n#include <cuda_bf16.h>\n\n#include \"cuda_fp16.h\"\n#define N 4\n");
    free(p);
    /* a macro defined before a header would expand inside it: stop there */
    const char *a2 = "#include <cuda_fp16.h>\n#define inline boom\n#include <cub/cub.cuh>\n";
    p = kh_srccheck_pch_prefix(a2, strlen(a2), NULL, 0);
    assert_string_equal(p, "#include <cuda_fp16.h>\n#define inline boom\n");
    free(p);
    /* #if evaluates macros: the prefix stops before it */
    const char *b = "#include <cuda_fp16.h>\n#define A 1\n#if A\n#include <cuda_bf16.h>\n#endif\n";
    p = kh_srccheck_pch_prefix(b, strlen(b), NULL, 0);
    assert_string_equal(p, "#include <cuda_fp16.h>\n#define A 1\n");
    free(p);
    const char *c = "#define N 4\n__global__ void k() {}\n";
    assert_null(kh_srccheck_pch_prefix(c, strlen(c), NULL, 0));
    const char *d = "#include KH_HEADER\n__global__ void k() {}\n";
    assert_null(kh_srccheck_pch_prefix(d, strlen(d), NULL, 0));
    /* a #define continued over lines stays whole */
    const char *e = "#include <cuda_bf16.h>\n#define TWICE(x) \\\n  ((x) + (x))\nint y;\n";
    p = kh_srccheck_pch_prefix(e, strlen(e), NULL, 0);
    assert_string_equal(p, "#include <cuda_bf16.h>\n#define TWICE(x) \\\n  ((x) + (x))\n");
    free(p);
}

/* Random soups of the characters the lexer cares about: never a crash (ASan
 * watches), always OK or ECOMPILE. */
static void test_fuzz(void **state)
{
    (void)state;
    static const char *const bits[] = {
        "/*", "*/", "//", "\"", "'", "R\"x(", ")x\"", "\\\n", "\n", "#", "include", "<", ">",
        "{", "}", "(", ")", "<<<", ">>>", "extern", "\"C\"", "__global__", "__host__",
        "__device__", "main", "cudaMalloc", "template", "__launch_bounds__", "k", ";", " ",
        "\xc3", "\xa9", "u8\"", "0x1p-3", "define", "if", "\r\n",
    };
    const char *ks[] = {"k"};
    kh_srccheck_opts o = {.kernels = ks, .n_kernels = 1};
    char buf[4096];
    for (int round = 0; round < 3000; round++) {
        size_t n = 0;
        int parts = rand() % 200;
        for (int i = 0; i < parts; i++) {
            const char *b = bits[rand() % KH_ARRAY_LEN(bits)];
            size_t l = strlen(b);
            if (n + l >= sizeof buf)
                break;
            memcpy(buf + n, b, l);
            n += l;
        }
        char *report = NULL;
        kh_err err;
        kh_status st = kh_srccheck_run(buf, n, &o, &report, &err);
        assert_true(st == KH_OK || st == KH_ECOMPILE);
        free(report);
        free(kh_srccheck_pch_prefix(buf, n, NULL, 0));
        /* the same soup as a header of its own, and as the entry including "k" */
        kh_source h[1] = {{"k", buf, n}};
        kh_srccheck_opts oh = {.kernels = ks, .n_kernels = 1, .headers = h, .n_headers = 1};
        report = NULL;
        st = kh_srccheck_run("#include \"k\"\n", 13, &oh, &report, &err);
        assert_true(st == KH_OK || st == KH_ECOMPILE);
        free(report);
        free(kh_srccheck_pch_prefix(buf, n, h, 1));
        assert_true(kh_srccheck_pch_may_hold(buf, n, h, 1) <= 1);
    }
}

/* A candidate of several files: each header is checked by every rule under
 * its own name and lines, the quoted #include of one is allowed, any other
 * still is not, and the size limit counts all of them. */
static void expect_header_problem(const char *entry, const kh_source *h, size_t nh,
                                  const kh_srccheck_opts *base, const char *words)
{
    kh_srccheck_opts o = base ? *base : (kh_srccheck_opts){0};
    o.headers = h;
    o.n_headers = nh;
    kh_err err;
    char *report = NULL;
    kh_status st = kh_srccheck_run(entry, strlen(entry), &o, &report, &err);
    if (st != KH_ECOMPILE || !report || !strstr(report, words))
        fail_msg("seed %u: %s, wanted '%s' in: %s", g_seed, kh_status_name(st), words,
                 report ? report : err.msg);
    free(report);
}

static void test_headers(void **state)
{
    (void)state;
    const char *entry = "#include <cuda_bf16.h>\n#include \"util.cuh\"\n"
                        "extern \"C\" __global__ void kern(float *a) { a[0] = twice_f(a[0]); }\n";
    const char *util = "#pragma once\n#include \"more/sq.cuh\"\n"
                       "__device__ float twice_f(float v) { return 2.0f * sq(v); }\n";
    const char *sq = "#pragma once\n__device__ __forceinline__ float sq(float v) { return v * v; }\n";
    kh_source h[2] = {{"util.cuh", util, strlen(util)}, {"more/sq.cuh", sq, strlen(sq)}};
    const char *ks[] = {"kern"};
    kh_srccheck_opts o = {.kernels = ks, .n_kernels = 1, .headers = h, .n_headers = 2};
    expect_ok(entry, &o);

    /* a forbidden construct in a header: named by the header's file and line */
    src bad = make("#pragma once\n", "__device__ void f(void **p) { cudaMalloc(p, 64); }\n",
                   "__device__ float twice_f(float v) { return 2.0f * v; }\n");
    kh_source hb[1] = {{"util.cuh", bad.text, strlen(bad.text)}};
    char want[96];
    snprintf(want, sizeof want, "util.cuh:%d: host API call 'cudaMalloc'", bad.bad_line);
    expect_header_problem(entry, hb, 1, NULL, want);
    free(bad.text);
    const char *main_in_h = "int main() { return 0; }\n";
    kh_source hm[1] = {{"util.cuh", main_in_h, strlen(main_in_h)}};
    expect_header_problem(entry, hm, 1, NULL, "util.cuh:1: host function 'main'");
    const char *inc_in_h = "\n#include <stdio.h>\n";
    kh_source hi[1] = {{"util.cuh", inc_in_h, strlen(inc_in_h)}};
    expect_header_problem(entry, hi, 1, NULL, "util.cuh:2: #include <stdio.h> is not on the "
                                              "allowlist");
    const char *utf = "// caf\xc3 broken\n";
    kh_source hu[1] = {{"util.cuh", utf, strlen(utf)}};
    expect_header_problem(entry, hu, 1, NULL, "util.cuh:1: source is not valid UTF-8");

    /* a quoted #include that names none of the sources is still refused, in
     * the entry and in a header; the angled form of one of them too */
    expect_header_problem("#include \"missing.cuh\"\n", h, 2, NULL,
                          "candidate.cu:1: #include \"missing.cuh\" is not on the allowlist");
    const char *hmiss = "\n\n#include \"nope.h\"\n";
    kh_source hn[1] = {{"util.cuh", hmiss, strlen(hmiss)}};
    expect_header_problem(entry, hn, 1, NULL, "util.cuh:3: #include \"nope.h\" is not on the "
                                              "allowlist (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h, "
                                              "cooperative_groups, cuda/std/*, cub/*) and is not "
                                              "one of the candidate's sources");
    expect_header_problem("#include <util.cuh>\n", h, 2, NULL,
                          "#include <util.cuh> names the candidate's own source: include it as "
                          "\"util.cuh\"");
    /* without headers, the same include is refused as before */
    kh_err err;
    assert_int_equal(kh_srccheck_run(entry, strlen(entry), NULL, NULL, &err), KH_ECOMPILE);
    assert_non_null(strstr(err.msg, "candidate.cu:2: #include \"util.cuh\" is not on the "
                                    "allowlist"));

    /* the manifest's kernels may be defined in a header */
    const char *kh_text = "extern \"C\" __global__ void kern(float *a) { a[0] = 1; }\n";
    kh_source hk[1] = {{"kernels.cuh", kh_text, strlen(kh_text)}};
    kh_srccheck_opts ok = {.kernels = ks, .n_kernels = 1, .headers = hk, .n_headers = 1};
    expect_ok("#include \"kernels.cuh\"\n", &ok);
    const char *kh_cpp = "\n__global__ void kern(float *a) { a[0] = 1; }\n";
    kh_source hc[1] = {{"kernels.cuh", kh_cpp, strlen(kh_cpp)}};
    kh_srccheck_opts okk = {.kernels = ks, .n_kernels = 1};
    expect_header_problem("#include \"kernels.cuh\"\n", hc, 1, &okk,
                          "kernels.cuh:2: kernel 'kern' is not declared extern \"C\"");
    expect_header_problem("#include \"kernels.cuh\"\n", h, 2, &okk,
                          "kernel 'kern' named in the manifest is not defined as a __global__ "
                          "function in any of the candidate's sources");

    /* the size limit is over every source together */
    size_t max = 1000 + (size_t)(rand() % 1000);
    char *big = malloc(max);
    memset(big, ' ', max);
    kh_source hs[1] = {{"pad.cuh", big, max / 2 + 1}};
    kh_srccheck_opts os = {.max_bytes = max, .headers = hs, .n_headers = 1};
    size_t fits = max - (max / 2 + 1); /* with the header: exactly max */
    assert_int_equal(kh_srccheck_run(big, fits, &os, NULL, &err), KH_OK);
    assert_int_equal(kh_srccheck_run(big, fits + 1, &os, NULL, &err), KH_ECOMPILE);
    char want2[160];
    snprintf(want2, sizeof want2, "sources are %zu bytes together (candidate.cu %zu, its 1 "
             "header %zu), over the limit of %zu bytes", max + 1, fits + 1, max / 2 + 1, max);
    free(big);
    if (!strstr(err.msg, want2))
        fail_msg("wanted '%s', got '%s'", want2, err.msg);
}

static void test_header_names(void **state)
{
    (void)state;
    static const char *const good[] = {"util.cuh", "include/util.cuh", "a-b_c+d.h", "x.h.in",
                                       "..hidden.h", "a/b/c/d.cuh"};
    for (size_t i = 0; i < KH_ARRAY_LEN(good); i++)
        if (kh_srccheck_header_name_problem(good[i]))
            fail_msg("'%s' refused: %s", good[i], kh_srccheck_header_name_problem(good[i]));
    static const struct {
        const char *name, *why;
    } bad[] = {
        {"../x.h", "goes up with '..'"},        {"a/../../x.h", "goes up with '..'"},
        {"/etc/passwd", "absolute path"},       {"", "empty"},
        {"a//b.h", "empty path component"},     {"dir/", "empty path component"},
        {"./util.cuh", "'.' path component"},   {"my util.h", "a character other than"},
        {"a\\b.h", "a character other than"},   {"x\".h", "a character other than"},
        {"caf\xc3\xa9.h", "a character other than"},
    };
    const char *entry = "extern \"C\" __global__ void k() {}\n";
    for (size_t i = 0; i < KH_ARRAY_LEN(bad); i++) {
        const char *why = kh_srccheck_header_name_problem(bad[i].name);
        if (!why || !strstr(why, bad[i].why))
            fail_msg("'%s': wanted '%s', got '%s'", bad[i].name, bad[i].why, why ? why : "OK");
        /* as a check's report: it names the source */
        kh_source h[1] = {{bad[i].name, "", 0}};
        char want[320];
        snprintf(want, sizeof want, "candidate.cu: source '%s' cannot be a header: %s",
                 bad[i].name, why);
        expect_header_problem(entry, h, 1, NULL, want);
    }
    char longname[300];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    assert_non_null(strstr(kh_srccheck_header_name_problem(longname), "longer than 255"));
    /* twice, or the entry's own name */
    kh_source dup[2] = {{"u.cuh", "", 0}, {"u.cuh", "", 0}};
    expect_header_problem(entry, dup, 2, NULL, "candidate.cu: source 'u.cuh' is given twice");
    kh_source self[1] = {{"main.cu", "", 0}};
    kh_srccheck_opts o = {.name = "main.cu"};
    expect_header_problem(entry, self, 1, &o, "main.cu: source 'main.cu' is given again as a "
                                              "header");
    /* kh_srccheck_names alone: every problem, the first in err */
    kh_source two[2] = {{"../a.h", "", 0}, {"/b.h", "", 0}};
    char *report = NULL;
    kh_err err;
    assert_int_equal(kh_srccheck_names("k.cu", two, 2, &report, &err), KH_ECOMPILE);
    assert_non_null(strstr(err.msg, "k.cu: source '../a.h'"));
    assert_non_null(strstr(report, "source '/b.h' cannot be a header: it is an absolute path"));
    free(report);
    assert_int_equal(kh_srccheck_names("k.cu", NULL, 0, NULL, &err), KH_OK);
}

/* The warm prefix never takes a candidate's header; the PCH of a source may
 * hold one when it is included before the first line of code (or where a
 * conditional or a computed include leaves that open). */
static void test_pch_and_headers(void **state)
{
    (void)state;
    kh_source h[1] = {{"util.cuh", "", 0}};
    const char *a = "#include <cuda_bf16.h>\n#include \"util.cuh\"\n#include <cuda_fp16.h>\n"
                    "extern \"C\" __global__ void k() {}\n";
    char *p = kh_srccheck_pch_prefix(a, strlen(a), h, 1);
    assert_non_null(p);
    assert_string_equal(p, "#include <cuda_bf16.h>\n");
    free(p);
    p = kh_srccheck_pch_prefix(a, strlen(a), NULL, 0);
    assert_string_equal(p, "#include <cuda_bf16.h>\n#include \"util.cuh\"\n"
                           "#include <cuda_fp16.h>\n");
    free(p);
    const char *b = "// first\n#include \"util.cuh\"\n#include <cuda_bf16.h>\nint x;\n";
    assert_null(kh_srccheck_pch_prefix(b, strlen(b), h, 1));

    assert_int_equal(kh_srccheck_pch_may_hold(a, strlen(a), h, 1), 1);
    assert_int_equal(kh_srccheck_pch_may_hold(a, strlen(a), NULL, 0), 0);
    const char *after_code = "#include <cuda_bf16.h>\ntypedef int I;\n#include \"util.cuh\"\n";
    assert_int_equal(kh_srccheck_pch_may_hold(after_code, strlen(after_code), h, 1), 0);
    const char *angled = "#include <util.cuh>\nint x;\n";
    assert_int_equal(kh_srccheck_pch_may_hold(angled, strlen(angled), h, 1), 1);
    /* a false #if hides code from the PCH's end: not known here */
    const char *cond = "#if 0\nint y;\n#endif\n#include <cuda_bf16.h>\nint x;\n"
                       "#include \"util.cuh\"\n";
    assert_int_equal(kh_srccheck_pch_may_hold(cond, strlen(cond), h, 1), 1);
    const char *computed = "#define H \"util.cuh\"\n#include H\nint x;\n";
    assert_int_equal(kh_srccheck_pch_may_hold(computed, strlen(computed), h, 1), 1);
    const char *comment = "// #include \"util.cuh\"\n#pragma once\nint x;\n#include \"util.cuh\"\n";
    assert_int_equal(kh_srccheck_pch_may_hold(comment, strlen(comment), h, 1), 0);
}

/* Fastest of three runs of kh_srccheck_run over `n` bytes of `unit` repeated. */
static double check_seconds(const char *unit, size_t cap, size_t *n_out)
{
    char *t = malloc(cap + 1);
    assert_non_null(t);
    size_t n = 0, l = strlen(unit);
    while (n + l <= cap) {
        memcpy(t + n, unit, l);
        n += l;
    }
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        char *report = NULL;
        kh_err err;
        double t0 = kh_now();
        kh_status st = kh_srccheck_run(t, n, NULL, &report, &err);
        double took = kh_now() - t0;
        best = took < best ? took : best;
        assert_true(st == KH_OK || st == KH_ECOMPILE);
        if (report)
            assert_true(strlen(report) < 64 * 1024);
        free(report);
    }
    free(t);
    *n_out = n;
    return best;
}

/* Hostile shapes at the size limit cost time in proportion to their size (no
 * quadratic scans), and a flood of problems gives a bounded report.  The check
 * is a ratio measured side by side (4x the bytes must cost well under 16x the
 * time), not a wall-clock limit, so a slow or loaded machine does not fail it. */
static void test_pathological_inputs(void **state)
{
    (void)state;
    static const char *const unit[] = {"__global__ ", "__launch_bounds__((((", "(", "k<<<",
                                       "extern \"C\" {", "}"};
    size_t cap = KH_SRCCHECK_MAX_BYTES;
    for (size_t u = 0; u < KH_ARRAY_LEN(unit); u++) {
        size_t n_small, n_big;
        double small = check_seconds(unit[u], cap / 4, &n_small);
        double big = check_seconds(unit[u], cap, &n_big);
        /* below a few ms the clock's grain dominates: nothing to compare */
        if (big < 0.005)
            continue;
        double ratio = big / (small > 1e-6 ? small : 1e-6);
        if (ratio > 9.0)
            fail_msg("'%s': %zu bytes took %.3f s, %zu bytes %.3f s (x%.1f for x4 the input: "
                     "worse than linear)", unit[u], n_small, small, n_big, big, ratio);
    }
}

int main(void)
{
    const char *s = getenv("KH_TEST_SEED");
    g_seed = s ? (unsigned)strtoul(s, NULL, 10) : (unsigned)time(NULL);
    srand(g_seed);
    printf("# seed %u (KH_TEST_SEED to repeat)\n", g_seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_filler_passes),    cmocka_unit_test(test_host_api),
        cmocka_unit_test(test_host_functions),   cmocka_unit_test(test_includes),
        cmocka_unit_test(test_device_launch),    cmocka_unit_test(test_manifest_kernels),
        cmocka_unit_test(test_size_limit),       cmocka_unit_test(test_encoding),
        cmocka_unit_test(test_report_lists_all), cmocka_unit_test(test_pch_prefix),
        cmocka_unit_test(test_fuzz),             cmocka_unit_test(test_pathological_inputs),
        cmocka_unit_test(test_headers),          cmocka_unit_test(test_header_names),
        cmocka_unit_test(test_pch_and_headers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
