/* test_compile.c: NVRTC builds end to end (no GPU needed): resources of a
 * bf16 kernel, the cache (hit, miss on any change, key function agrees),
 * the warm precompiled header, and the bad inputs of issue #5: a syntax
 * error gives the log with its line, a template-recursion bomb hits the
 * deadline, an oversized source is refused, non-UTF-8 bytes are handled.
 * Also the trusted paths: nvcc -> cubin and cc -> shared object. */
#include "kh_test.h"

#include "compile/compile.h"
#include "compile/hostcc.h"
#include "compile/srccheck.h"

#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static unsigned g_seed;

typedef struct fx {
    kh_engine *e;
    kh_compiler *c;
} fx;

static int setup(void **state)
{
    kh_err err;
    fx *f = calloc(1, sizeof *f);
    f->e = kh_engine_new(NULL, &err);
    f->c = kh_compile_new(f->e, &err);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    kh_compile_free(f->c);
    kh_engine_free(f->e);
    free(f);
    return 0;
}

static void need_nvrtc(fx *f)
{
    if (!kh_engine_nvrtc(f->e, NULL))
        skip();
}

/* A bf16 kernel with a random shared array and launch bound. */
static void bf16_kernel(char *buf, size_t n, int smem_floats, int bounds, int salt)
{
    snprintf(buf, n,
             "#include <cuda_bf16.h>\n"
             "extern \"C\" __global__ void __launch_bounds__(%d) scale_bf16(\n"
             "    const __nv_bfloat16 *x, __nv_bfloat16 *y, float s, int n) {\n"
             "  __shared__ float t[%d];\n"
             "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
             "  t[threadIdx.x %% %d] = i < n ? __bfloat162float(x[i]) : 0.f;\n"
             "  __syncthreads();\n"
             "  if (i < n) y[i] = __float2bfloat16(t[(threadIdx.x + %d) %% %d] * s);\n"
             "}\n",
             bounds, smem_floats, smem_floats, salt, smem_floats);
}

static kh_artifact *build_ok(fx *f, kh_compile_req *req)
{
    kh_artifact *a = NULL;
    kh_err err;
    kh_status st = kh_compile_build(f->c, req, &a, &err);
    if (st != KH_OK)
        fail_msg("seed %u: %s: %s\n%s", g_seed, kh_status_name(st), err.msg, a ? a->log : "");
    return a;
}

static void test_bf16_resources(void **state)
{
    fx *f = *state;
    need_nvrtc(f);
    int smem = 16 + rand() % 2000, bounds = 32 * (1 + rand() % 32);
    char src[4096];
    bf16_kernel(src, sizeof src, smem, bounds, 1 + rand() % 31);
    const char *ks[] = {"scale_bf16"};
    kh_compile_req req = {.source = src, .source_len = strlen(src), .kernels = ks,
                          .n_kernels = 1, .isolate = 1};
    kh_artifact *a = build_ok(f, &req);
    assert_true(a->ok);
    assert_string_equal(a->arch, kh_compile_default_arch());
    assert_int_equal(a->res.n_kernels, 1);
    const kh_kernel_res *k = kh_cubin_find(&a->res, "scale_bf16");
    assert_non_null(k);
    assert_int_equal(k->shared_static, 4L * smem);
    assert_int_equal(k->max_threads, bounds);
    assert_true(k->registers > 0 && k->registers <= 255);
    assert_int_equal(strlen(a->hash), 32);
    assert_true(a->t.compile > 0 && a->t.total >= a->t.compile);
    /* the options are recorded as given to NVRTC */
    int lineinfo = 0, std17 = 0;
    for (size_t i = 0; i < a->n_options; i++) {
        lineinfo |= !strcmp(a->options[i], "-lineinfo");
        std17 |= !strcmp(a->options[i], "--std=c++17");
    }
    assert_true(lineinfo && std17);
    kh_artifact_free(a);
}

static void test_cache(void **state)
{
    fx *f = *state;
    need_nvrtc(f);
    char src[4096];
    bf16_kernel(src, sizeof src, 64 + rand() % 512, 256, 1 + rand() % 31);
    kh_compile_req req = {.source = src, .source_len = strlen(src), .trusted = 1};
    kh_artifact *a = build_ok(f, &req);
    assert_false(a->cache_hit);
    kh_artifact *b = build_ok(f, &req);
    assert_true(b->cache_hit);
    assert_string_equal(a->hash, b->hash);
    assert_int_equal(a->cubin_len, b->cubin_len);
    assert_memory_equal(a->cubin, b->cubin, a->cubin_len);
    assert_true(b->t.total < 0.01); /* a hash and a copy, not a compile */
    unsigned char key[16];
    kh_err err;
    assert_int_equal(kh_compile_key(f->c, &req, key, &err), KH_OK);
    assert_memory_equal(key, a->key, 16);
    /* any change to source, option or arch is a miss */
    const char *opt[] = {"--use_fast_math"};
    kh_compile_req r2 = req;
    r2.options = opt;
    r2.n_options = 1;
    kh_artifact *c = build_ok(f, &r2);
    assert_false(c->cache_hit);
    assert_string_not_equal(c->hash, a->hash);
    kh_compile_req r3 = req;
    r3.arch = "sm_80";
    kh_artifact *d = build_ok(f, &r3);
    assert_false(d->cache_hit);
    assert_int_equal(d->res.sm, 80);
    /* -pch does not change the output, so it does not change the key */
    kh_compile_req r4 = req;
    r4.no_pch = 1;
    assert_int_equal(kh_compile_key(f->c, &r4, key, &err), KH_OK);
    assert_memory_equal(key, a->key, 16);
    kh_compile_cache_stats s;
    kh_compile_cache_stats_get(f->c, &s);
    assert_true(s.hits >= 1 && s.entries >= 3);
    kh_compile_cache_limit(f->c, 0);
    kh_compile_cache_stats_get(f->c, &s);
    assert_int_equal(s.entries, 0);
    kh_artifact_free(a);
    kh_artifact_free(b);
    kh_artifact_free(c);
    kh_artifact_free(d);
}

/* Same includes, different bodies: the second finds the PCH warm, both in
 * process and in an isolated child; the cubins agree between the two modes. */
static void test_warm_pch(void **state)
{
    fx *f = *state;
    need_nvrtc(f);
    int smem = 32 + rand() % 256;
    char s1[4096], s2[4096];
    bf16_kernel(s1, sizeof s1, smem, 128, 1);
    bf16_kernel(s2, sizeof s2, smem, 128, 2);
    kh_compile_req r1 = {.source = s1, .source_len = strlen(s1), .trusted = 1, .no_cache = 1};
    kh_artifact *a = build_ok(f, &r1);
    kh_compile_req r2 = {.source = s2, .source_len = strlen(s2), .trusted = 1, .no_cache = 1};
    kh_artifact *b = build_ok(f, &r2);
    assert_string_equal(b->pch, "reused or not needed");
    r2.isolate = 1;
    kh_artifact *c = build_ok(f, &r2);
    assert_string_equal(c->pch, "reused or not needed");
    assert_int_equal(b->cubin_len, c->cubin_len);
    assert_memory_equal(b->cubin, c->cubin, b->cubin_len);
    assert_string_equal(a->log, "");
    kh_artifact_free(a);
    kh_artifact_free(b);
    kh_artifact_free(c);
}

/* A candidate of several files: the entry source includes its headers by
 * name, headers include each other; errors in a header name the header. */
static const char *MS_ENTRY =
    "#include <cuda_bf16.h>\n"
    "#include \"util.cuh\"\n"
    "extern \"C\" __global__ void scale2(const float *x, float *y, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = twice_sq(x[i]);\n"
    "}\n";

static kh_artifact *build_st(fx *f, const kh_compile_req *req, kh_status want, kh_err *err)
{
    kh_artifact *a = NULL;
    kh_status st = kh_compile_build(f->c, req, &a, err);
    if (st != want)
        fail_msg("seed %u: wanted %s, got %s: %s\n%s", g_seed, kh_status_name(want),
                 kh_status_name(st), err->msg, a ? a->log : "");
    return a;
}

static void test_headers_compile(void **state)
{
    fx *f = *state;
    need_nvrtc(f);
    char util[512], sq[256];
    float k = (float)(1 + rand() % 1000) / 8.0f;
    snprintf(util, sizeof util, "#pragma once\n#include \"more/sq.cuh\"\n"
             "__device__ float twice_sq(float v) { return %.3ff * sq(v); }\n", k);
    snprintf(sq, sizeof sq, "#pragma once\n"
             "__device__ __forceinline__ float sq(float v) { return v * v; }\n");
    kh_source h[2] = {{"util.cuh", util, strlen(util)}, {"more/sq.cuh", sq, strlen(sq)}};
    const char *ks[] = {"scale2"};
    kh_compile_req req = {.source = MS_ENTRY, .source_len = strlen(MS_ENTRY), .name = "main.cu",
                          .headers = h, .n_headers = 2, .kernels = ks, .n_kernels = 1,
                          .isolate = 1};
    kh_err err;
    kh_artifact *a = build_st(f, &req, KH_OK, &err);
    assert_true(a->ok);
    assert_non_null(kh_cubin_find(&a->res, "scale2"));

    /* the key: every header's name and text, not the order they come in */
    unsigned char key[16];
    assert_int_equal(kh_compile_key(f->c, &req, key, &err), KH_OK);
    assert_memory_equal(key, a->key, 16);
    kh_source swapped[2] = {h[1], h[0]};
    kh_compile_req r2 = req;
    r2.headers = swapped;
    assert_int_equal(kh_compile_key(f->c, &r2, key, &err), KH_OK);
    assert_memory_equal(key, a->key, 16);
    char util2[512];
    snprintf(util2, sizeof util2, "%s// one more line\n", util);
    kh_source changed[2] = {{"util.cuh", util2, strlen(util2)}, h[1]};
    r2.headers = changed;
    assert_int_equal(kh_compile_key(f->c, &r2, key, &err), KH_OK);
    assert_memory_not_equal(key, a->key, 16);
    kh_artifact *b = build_st(f, &r2, KH_OK, &err);
    assert_false(b->cache_hit);
    assert_string_not_equal(a->hash, b->hash);
    kh_artifact_free(b);
    kh_artifact_free(a);

    /* a compile error in a header names the header and its line */
    const char *broken = "#pragma once\n\n__device__ float twice_sq(float v) { return v +; }\n";
    kh_source hb[1] = {{"util.cuh", broken, strlen(broken)}};
    kh_compile_req rb = req;
    rb.headers = hb;
    rb.n_headers = 1;
    a = build_st(f, &rb, KH_ECOMPILE, &err);
    if (!strstr(a->log, "util.cuh(3): error"))
        fail_msg("wanted util.cuh(3): error in:\n%s", a->log);
    kh_artifact_free(a);

    /* trusted, so NVRTC says it: a quoted include of no source is not found */
    const char *miss = "#include \"absent.cuh\"\nextern \"C\" __global__ void scale2() {}\n";
    kh_compile_req rm = {.source = miss, .source_len = strlen(miss), .headers = h,
                         .n_headers = 2, .trusted = 1};
    a = build_st(f, &rm, KH_ECOMPILE, &err);
    assert_non_null(strstr(a->log, "absent.cuh"));
    kh_artifact_free(a);
    /* model-written: the static checks refuse it first */
    rm.trusted = 0;
    a = build_st(f, &rm, KH_ECOMPILE, &err);
    assert_non_null(strstr(err.msg, "#include \"absent.cuh\" is not on the allowlist"));
    kh_artifact_free(a);
}

/* NVRTC's automatic PCH keeps a header's text and hands it to the next
 * program with the same leading directives: two candidates that differ only
 * in a header must still get their own cubins, in process and isolated. */
static void test_headers_not_in_pch(void **state)
{
    fx *f = *state;
    need_nvrtc(f);
    for (int isolate = 0; isolate < 2; isolate++) {
        kh_artifact *a[2];
        for (int v = 0; v < 2; v++) {
            char util[256];
            snprintf(util, sizeof util, "#pragma once\n__device__ float twice_sq(float v) "
                     "{ return %d.5f * v; }\n", 2 + v + 4 * isolate + 8 * (rand() % 100));
            kh_source h[1] = {{"util.cuh", util, strlen(util)}};
            kh_compile_req req = {.source = MS_ENTRY, .source_len = strlen(MS_ENTRY),
                                  .headers = h, .n_headers = 1, .trusted = 1,
                                  .isolate = isolate, .no_cache = 1};
            kh_err err;
            a[v] = build_st(f, &req, KH_OK, &err);
            if (!isolate) {
                /* in process, the PCH could hold util.cuh: none is made */
                assert_string_equal(a[v]->pch, "off");
                for (size_t i = 0; i < a[v]->n_options; i++)
                    assert_string_not_equal(a[v]->options[i], "-pch");
            }
        }
        if (a[0]->cubin_len == a[1]->cubin_len &&
            !memcmp(a[0]->cubin, a[1]->cubin, a[0]->cubin_len))
            fail_msg("isolate %d: the second header's cubin is the first's (a stale PCH)",
                     isolate);
        kh_artifact_free(a[0]);
        kh_artifact_free(a[1]);
    }
    /* a header included after the first line of code is not in the PCH:
     * -pch stays */
    const char *late = "#include <cuda_bf16.h>\ntypedef float f32;\n#include \"util.cuh\"\n"
                       "extern \"C\" __global__ void scale2(float *y) { y[0] = twice_sq(1); }\n";
    const char *util = "__device__ float twice_sq(float v) { return 2 * v; }\n";
    kh_source h[1] = {{"util.cuh", util, strlen(util)}};
    kh_compile_req req = {.source = late, .source_len = strlen(late), .headers = h,
                          .n_headers = 1, .trusted = 1, .no_cache = 1};
    kh_err err;
    kh_artifact *a = build_st(f, &req, KH_OK, &err);
    assert_string_not_equal(a->pch, "off");
    kh_artifact_free(a);
}

/* Header names a candidate cannot use, trusted or not: each refused before
 * NVRTC, naming the source. */
static void test_header_names_refused(void **state)
{
    fx *f = *state;
    need_nvrtc(f);
    static const struct {
        const char *name, *why;
    } bad[] = {
        {"../x.h", "goes up with '..'"},
        {"/etc/passwd", "absolute path"},
        {"./util.cuh", "'.' path component"},
        {"cuda_fp16.h", "it has the name of "},          /* the toolkit's: NVRTC would use ours */
        {"cuda/std/version", "it has the name of "},     /* CCCL's, on the include path */
    };
    for (int trusted = 0; trusted < 2; trusted++)
        for (size_t i = 0; i < KH_ARRAY_LEN(bad); i++) {
            kh_source h[1] = {{bad[i].name, "// x\n", 5}};
            kh_compile_req req = {.source = MS_ENTRY, .source_len = strlen(MS_ENTRY),
                                  .name = "main.cu", .headers = h, .n_headers = 1,
                                  .trusted = trusted, .isolate = 1};
            kh_err err;
            kh_artifact *a = build_st(f, &req, KH_ECOMPILE, &err);
            char want[160];
            snprintf(want, sizeof want, "main.cu: source '%s' cannot be a header", bad[i].name);
            if (!strstr(a->log, want) || !strstr(a->log, bad[i].why) || !strstr(err.msg, want))
                fail_msg("'%s': wanted '%s ... %s', got %s / %s", bad[i].name, want,
                         bad[i].why, err.msg, a->log);
            assert_true(a->t.compile == 0);
            kh_artifact_free(a);
        }
    /* twice */
    kh_source dup[2] = {{"util.cuh", "", 0}, {"util.cuh", "", 0}};
    kh_compile_req req = {.source = MS_ENTRY, .source_len = strlen(MS_ENTRY), .headers = dup,
                          .n_headers = 2, .trusted = 1};
    kh_err err;
    kh_artifact_free(build_st(f, &req, KH_ECOMPILE, &err));
    assert_non_null(strstr(err.msg, "source 'util.cuh' is given twice"));
    /* a NUL byte would cut a header short: refused */
    kh_source nul[1] = {{"util.cuh", "a\0b", 3}};
    req.headers = nul;
    req.n_headers = 1;
    kh_artifact *a = NULL;
    assert_int_equal(kh_compile_build(f->c, &req, &a, &err), KH_EINVAL);
    assert_null(a);
    assert_non_null(strstr(err.msg, "header 'util.cuh' contains a NUL byte"));
    /* the hard cap counts every source */
    char *big = malloc(KH_COMPILE_MAX_SOURCE);
    memset(big, ' ', KH_COMPILE_MAX_SOURCE);
    kh_source hb[1] = {{"big.cuh", big, KH_COMPILE_MAX_SOURCE - 10}};
    req.headers = hb;
    assert_int_equal(kh_compile_build(f->c, &req, &a, &err), KH_EINVAL);
    free(big);
    assert_non_null(strstr(err.msg, "hard limit"));
}

static void test_syntax_error_names_line(void **state)
{
    fx *f = *state;
    need_nvrtc(f);
    int pad = 2 + rand() % 30;
    char src[8192] = "";
    for (int i = 0; i < pad; i++)
        strcat(src, "// filler\n");
    strcat(src, "extern \"C\" __global__ void k(float *a) { a[0] = 1.0f +; }\n");
    for (int isolate = 0; isolate < 2; isolate++) {
        kh_compile_req req = {.source = src, .source_len = strlen(src), .name = "cand.cu",
                              .isolate = isolate};
        kh_artifact *a = NULL;
        kh_err err;
        assert_int_equal(kh_compile_build(f->c, &req, &a, &err), KH_ECOMPILE);
        assert_non_null(a);
        assert_false(a->ok);
        assert_null(a->cubin);
        char want[64];
        snprintf(want, sizeof want, "cand.cu(%d): error", pad + 1);
        if (!strstr(a->log, want) || !strstr(err.msg, want))
            fail_msg("want '%s' in log and message; log:\n%s\nmsg: %s", want, a->log, err.msg);
        kh_artifact_free(a);
    }
}

/* Nothing of an isolated child's may stay in TMPDIR: no child folders, no
 * NVRTC PCH folders but this process's own. */
static void assert_tmp_clean(void)
{
    const char *tmp = getenv("TMPDIR");
    DIR *d = opendir(tmp);
    assert_non_null(d);
    char mine[64];
    snprintf(mine, sizeof mine, "__nvrtc_auto_pch_%ld_", (long)getpid());
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strncmp(de->d_name, "khlua-nvrtc-", 12) ||
            (!strncmp(de->d_name, "__nvrtc_auto_pch_", 17) && strncmp(de->d_name, mine, strlen(mine))))
            fail_msg("left behind in %s: %s", tmp, de->d_name);
    }
    closedir(d);
}

static void test_bomb_hits_deadline(void **state)
{
    fx *f = *state;
    need_nvrtc(f);
    /* 2^40 distinct instantiations: runs for minutes if not stopped, and
     * NVRTC's flow callback is not polled while it instantiates */
    int depth = 36 + rand() % 8;
    char src[1024];
    snprintf(src, sizeof src,
             "template <int N, unsigned M> struct T {\n"
             "  static constexpr unsigned long v = T<N - 1, M * 2u>::v + T<N - 1, M * 2u + 1u>::v;\n"
             "};\n"
             "template <unsigned M> struct T<0, M> { static constexpr unsigned long v = M; };\n"
             "extern \"C\" __global__ void k(unsigned long *a) { a[0] = T<%d, 1u>::v; }\n",
             depth);
    kh_compile_req req = {.source = src, .source_len = strlen(src), .deadline_s = 2.0,
                          .isolate = 1, .no_cache = 1};
    kh_artifact *a = NULL;
    kh_err err;
    double t0 = kh_now();
    assert_int_equal(kh_compile_build(f->c, &req, &a, &err), KH_ETIMEOUT);
    double took = kh_now() - t0;
    printf("# bomb (depth %d) stopped after %.2f s\n", depth, took);
    assert_true(took >= 2.0 && took < 8.0); /* unstopped, it runs for minutes */
    assert_non_null(strstr(err.msg, "deadline"));
    kh_artifact_free(a);
    /* the same bomb hidden in a #define of the prefix that warms the PCH in
     * this process: the warm-up must not expand it (it would hang here) */
    snprintf(src, sizeof src,
             "#include <cuda_bf16.h>\n"
             "#define void template <int N, unsigned M> struct T { static constexpr unsigned "
             "long v = T<N - 1, M * 2u>::v + T<N - 1, M * 2u + 1u>::v; }; template <unsigned "
             "M> struct T<0, M> { static constexpr unsigned long v = M; }; "
             "static_assert(T<%d, 1u>::v > 0, \"\"); void\n"
             "extern \"C\" __global__ void k(float *a) { a[0] = 1; }\n", depth);
    req.source_len = strlen(src);
    t0 = kh_now();
    assert_int_equal(kh_compile_build(f->c, &req, &a, &err), KH_ETIMEOUT);
    took = kh_now() - t0;
    printf("# bomb in a #define stopped after %.2f s (PCH warm-up %.3f s)\n", took, a->t.warm);
    assert_true(took < 8.0);
    kh_artifact_free(a);
    /* the compiler still works afterwards */
    char ok[4096];
    bf16_kernel(ok, sizeof ok, 64, 64, 3);
    kh_compile_req r2 = {.source = ok, .source_len = strlen(ok), .isolate = 1};
    kh_artifact_free(build_ok(f, &r2));
    assert_tmp_clean();
}

static void test_oversized_refused(void **state)
{
    fx *f = *state;
    need_nvrtc(f);
    kh_err err;
    kh_artifact *a = NULL;
    /* over the candidate limit: refused by the static checks, before NVRTC */
    size_t n = KH_SRCCHECK_MAX_BYTES + 1 + (size_t)(rand() % 1000);
    char *big = malloc(KH_COMPILE_MAX_SOURCE + 2);
    memset(big, '\n', KH_COMPILE_MAX_SOURCE + 2);
    kh_compile_req req = {.source = big, .source_len = n};
    assert_int_equal(kh_compile_build(f->c, &req, &a, &err), KH_ECOMPILE);
    assert_non_null(strstr(err.msg, "over the limit"));
    assert_true(a->t.compile == 0);
    kh_artifact_free(a);
    /* over the hard cap: refused even when trusted */
    req.source_len = KH_COMPILE_MAX_SOURCE + 1;
    req.trusted = 1;
    assert_int_equal(kh_compile_build(f->c, &req, &a, &err), KH_EINVAL);
    assert_null(a);
    assert_non_null(strstr(err.msg, "hard limit"));
    free(big);
}

static int valid_utf8(const char *s)
{
    size_t n = strlen(s), len;
    char *c = kh_utf8_sanitize(s, n, &len);
    int same = c && len == n && !memcmp(c, s, n);
    free(c);
    return same;
}

static void test_non_utf8(void **state)
{
    fx *f = *state;
    need_nvrtc(f);
    kh_err err;
    kh_artifact *a = NULL;
    /* an invalid byte inside an identifier NVRTC quotes back in its error */
    const char *src = "extern \"C\" __global__ void k(float *a) {\n"
                      "  a[0] = undefined_\xff\xfe_name;\n}\n";
    kh_compile_req req = {.source = src, .source_len = strlen(src), .trusted = 1};
    kh_status st = kh_compile_build(f->c, &req, &a, &err);
    assert_int_equal(st, KH_ECOMPILE);
    assert_true(valid_utf8(a->log));
    assert_true(valid_utf8(err.msg));
    assert_non_null(strstr(a->log, "(2): error"));
    kh_artifact_free(a);
    /* model-written: refused by the checks, naming the line */
    req.trusted = 0;
    assert_int_equal(kh_compile_build(f->c, &req, &a, &err), KH_ECOMPILE);
    assert_non_null(strstr(err.msg, "candidate.cu:2: source is not valid UTF-8"));
    kh_artifact_free(a);
    /* trusted, in a comment: compiles */
    const char *ok = "// caf\xe9 latin-1\nextern \"C\" __global__ void k(float *a) { a[0] = 2; }\n";
    kh_compile_req r2 = {.source = ok, .source_len = strlen(ok), .trusted = 1};
    kh_artifact_free(build_ok(f, &r2));
}

static void test_missing_kernel_and_bad_requests(void **state)
{
    fx *f = *state;
    need_nvrtc(f);
    const char *src = "extern \"C\" __global__ void present(float *a) { a[0] = 3; }\n";
    const char *ks[] = {"absent"};
    kh_compile_req req = {.source = src, .source_len = strlen(src), .kernels = ks,
                          .n_kernels = 1, .trusted = 1};
    kh_artifact *a = NULL;
    kh_err err;
    assert_int_equal(kh_compile_build(f->c, &req, &a, &err), KH_ECOMPILE);
    assert_non_null(strstr(err.msg, "'absent' is not in the cubin (kernels: present)"));
    assert_non_null(strstr(a->log, "absent"));
    kh_artifact_free(a);
    kh_compile_req bad = {.source = src, .source_len = strlen(src), .arch = "sm_90a; rm -rf"};
    assert_int_equal(kh_compile_build(f->c, &bad, &a, &err), KH_EINVAL);
    const char *o[] = {"--time=/tmp/x"};
    kh_compile_req bad2 = {.source = src, .source_len = strlen(src), .options = o,
                           .n_options = 1};
    assert_int_equal(kh_compile_build(f->c, &bad2, &a, &err), KH_EINVAL);
    kh_compile_req bad3 = {.source = NULL};
    assert_int_equal(kh_compile_build(f->c, &bad3, &a, &err), KH_EINVAL);
    const char *o4[] = {"--no-such-nvrtc-option"};
    kh_compile_req bad4 = {.source = src, .source_len = strlen(src), .options = o4,
                           .n_options = 1, .trusted = 1};
    assert_int_equal(kh_compile_build(f->c, &bad4, &a, &err), KH_ECOMPILE);
    kh_artifact_free(a);
}

/* A host candidate's staged compile (kh_hostcc_build_candidate): it builds
 * and runs; a file of its own next to it may be included, another may not;
 * and while the files read are unchecked nothing the compiler said is kept:
 * another file's macro in a diagnostic and a #warning, then a read that never
 * ends (a FIFO) and times out, leave an empty log. */
static void test_hostcc_candidate(void **state)
{
    fx *f = *state;
    char *dir = kh_test_tmpdir();
    char src[600], own[600], so[700], secret[600], fifo[600], text[1600];
    snprintf(src, sizeof src, "%s/cand.c", dir);
    snprintf(own, sizeof own, "%s/own.h", dir);
    snprintf(so, sizeof so, "%s/cand.so", dir);
    snprintf(secret, sizeof secret, "%s/secret.h", dir);
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    kh_test_write_file(own, "static int twice(int x) { return 2 * x; }\n");
    kh_test_write_file(secret, "#define LEAK \"khlua-secret-9q8w7e\" +\n");
    kh_test_write_file(src, "#include <math.h>\n#include \"own.h\"\n"
                            "int khlua_entry(int x) { return twice(x) + (int)sqrt(16.0); }\n");
    const char *owned[] = {own, NULL}, *flags[] = {"-lm"};
    kh_hostcc_result r;
    kh_err err;
    kh_status st = kh_hostcc_build_candidate(f->e, src, so, owned, flags, 1, 60, &r, &err);
    if (st == KH_ENOTFOUND) {
        kh_hostcc_result_free(&r);
        kh_test_rmtree(dir);
        free(dir);
        skip();
    }
    if (st)
        fail_msg("%s\n%s", err.msg, r.log);
    assert_non_null(strstr(r.command, "-MD"));
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(h);
    int (*entry)(int) = (int (*)(int))dlsym(h, "khlua_entry");
    assert_non_null(entry);
    assert_int_equal(entry(5), 14);
    dlclose(h);
    kh_hostcc_result_free(&r);

    /* own.h is not one of its files this time */
    assert_int_equal(kh_hostcc_build_candidate(f->e, src, so, NULL, flags, 1, 60, &r, &err),
                     KH_ECOMPILE);
    assert_non_null(strstr(r.log, "cand.c:2: '#include \"own.h\"' reads own.h, which is not allowed"));
    assert_null(strstr(r.log, "twice"));
    kh_hostcc_result_free(&r);

    assert_int_equal(mkfifo(fifo, 0600), 0);
    snprintf(text, sizeof text,
             "#include \"%s\"\n#if LEAK\n#endif\n#warning printed before the check\n"
             "#include \"%s\"\n",
             secret, fifo);
    kh_test_write_file(src, text);
    st = kh_hostcc_build_candidate(f->e, src, so, NULL, flags, 1, 3, &r, &err);
    assert_int_equal(st, KH_ETIMEOUT);
    assert_null(strstr(r.log, "khlua-secret"));
    assert_null(strstr(r.log, "printed before the check"));
    assert_null(strstr(err.msg, "khlua-secret"));
    kh_hostcc_result_free(&r);
    kh_test_rmtree(dir);
    free(dir);
}

static void test_hostcc_paths(void **state)
{
    fx *f = *state;
    char *dir = kh_test_tmpdir();
    char src[600], so[700];
    snprintf(src, sizeof src, "%s/host.c", dir);
    snprintf(so, sizeof so, "%s/host.so", dir);
    int magic = 1000 + rand() % 100000;
    char text[256];
    snprintf(text, sizeof text, "int khlua_entry(int x) { return x + %d; }\n", magic);
    kh_test_write_file(src, text);
    kh_hostcc_result r;
    kh_err err;
    kh_status st = kh_hostcc_build(f->e, KH_HOSTCC_CC_SO, src, so, NULL, NULL, 0, 60, &r, &err);
    if (st == KH_ENOTFOUND) {
        kh_hostcc_result_free(&r);
        kh_test_rmtree(dir);
        free(dir);
        skip();
    }
    if (st)
        fail_msg("%s\n%s", err.msg, r.log);
    assert_non_null(strstr(r.command, "-shared"));
    assert_non_null(strstr(r.command, so));
    assert_true(strlen(r.version) > 0);
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(h);
    int (*entry)(int) = (int (*)(int))dlsym(h, "khlua_entry");
    assert_non_null(entry);
    assert_int_equal(entry(7), 7 + magic);
    dlclose(h);
    kh_hostcc_result_free(&r);
    /* a C error fails with the compiler's log */
    kh_test_write_file(src, "int broken( { }\n");
    assert_int_equal(kh_hostcc_build(f->e, KH_HOSTCC_CC_SO, src, so, NULL, NULL, 0, 60, &r, &err),
                     KH_ECOMPILE);
    assert_non_null(strstr(r.log, "host.c:1"));
    kh_hostcc_result_free(&r);
    /* nvcc -> cubin, read back by the cubin reader */
    char cu[600], cubin[700];
    snprintf(cu, sizeof cu, "%s/k.cu", dir);
    snprintf(cubin, sizeof cubin, "%s/k.cubin", dir);
    int smem = 8 + rand() % 1000;
    snprintf(text, sizeof text,
             "extern \"C\" __global__ void kk(float *a) { __shared__ float s[%d];"
             " s[threadIdx.x %% %d] = a[0]; __syncthreads(); a[1] = s[1 %% %d]; }\n",
             smem, smem, smem);
    kh_test_write_file(cu, text);
    st = kh_hostcc_build(f->e, KH_HOSTCC_NVCC_CUBIN, cu, cubin, "sm_90a", NULL, 0, 300, &r, &err);
    if (st != KH_ENOTFOUND) {
        if (st)
            fail_msg("%s\n%s", err.msg, r.log);
        assert_non_null(strstr(r.version, "release"));
        FILE *fp = fopen(cubin, "rb");
        static unsigned char blob[1 << 20];
        size_t n = fread(blob, 1, sizeof blob, fp);
        fclose(fp);
        kh_cubin_info info;
        assert_int_equal(kh_cubin_parse(blob, n, &info, &err), KH_OK);
        assert_int_equal(kh_cubin_find(&info, "kk")->shared_static, 4L * smem);
        kh_cubin_info_free(&info);
    }
    kh_hostcc_result_free(&r);
    kh_test_rmtree(dir);
    free(dir);
}

/* nvcc -> shared object with a C entry point, as for a baseline written by a
 * person: dlopen it and call the entry (no GPU needed for a host function). */
static void test_nvcc_shared_object(void **state)
{
    fx *f = *state;
    char *dir = kh_test_tmpdir();
    char cu[600], so[700], text[512];
    snprintf(cu, sizeof cu, "%s/base.cu", dir);
    snprintf(so, sizeof so, "%s/base.so", dir);
    int magic = 1 + rand() % 1000000;
    snprintf(text, sizeof text,
             "__global__ void twice(float *a) { a[threadIdx.x] *= 2.f; }\n"
             "extern \"C\" int khlua_baseline(int x) { return x * 3 + %d; }\n", magic);
    kh_test_write_file(cu, text);
    kh_hostcc_result r;
    kh_err err;
    kh_status st = kh_hostcc_build(f->e, KH_HOSTCC_NVCC_SO, cu, so, "sm_90a", NULL, 0, 300, &r,
                                   &err);
    if (st == KH_ENOTFOUND) {
        kh_hostcc_result_free(&r);
        kh_test_rmtree(dir);
        free(dir);
        skip();
    }
    if (st)
        fail_msg("%s\n%s", err.msg, r.log);
    assert_non_null(strstr(r.command, "-shared"));
    assert_non_null(strstr(r.command, "-arch=sm_90a"));
    assert_non_null(strstr(r.version, "release"));
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        fail_msg("dlopen %s: %s", so, dlerror());
    int (*entry)(int) = (int (*)(int))dlsym(h, "khlua_baseline");
    assert_non_null(entry);
    assert_int_equal(entry(11), 33 + magic);
    dlclose(h);
    kh_hostcc_result_free(&r);
    kh_test_rmtree(dir);
    free(dir);
}

int main(void)
{
    const char *s = getenv("KH_TEST_SEED");
    g_seed = s ? (unsigned)strtoul(s, NULL, 10) : (unsigned)time(NULL);
    srand(g_seed);
    printf("# seed %u (KH_TEST_SEED to repeat)\n", g_seed);
    /* a TMPDIR of our own, so assert_tmp_clean sees only this run */
    char *tmp = kh_test_tmpdir();
    setenv("TMPDIR", tmp, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bf16_resources, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_warm_pch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_headers_compile, setup, teardown),
        cmocka_unit_test_setup_teardown(test_headers_not_in_pch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_header_names_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_syntax_error_names_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bomb_hits_deadline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oversized_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_non_utf8, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_kernel_and_bad_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hostcc_paths, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hostcc_candidate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nvcc_shared_object, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    kh_test_rmtree(tmp);
    free(tmp);
    return rc;
}
