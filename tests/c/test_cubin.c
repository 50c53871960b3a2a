/* test_cubin.c: the cubin reader against ptxas's own report.  Kernels with
 * randomly drawn shared arrays, local arrays, launch bounds and register caps
 * are compiled by nvcc -cubin -Xptxas -v (the oracle) and by NVRTC with
 * -Xptxas -v; the resources read from each cubin must equal what ptxas
 * printed.  Then hostile input: truncated, mutated and foreign images must
 * give EPARSE, never a crash. */
#include "kh_test.h"

#include "compile/compile.h"
#include "compile/cubin.h"
#include "core/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static unsigned g_seed;

typedef struct oracle {
    int regs;
    long stack, spill_st, smem;
    int found;
} oracle;

/* ptxas -v lines for one function:
 *   Function properties for NAME
 *   [ptxas .]  N bytes stack frame, S bytes spill stores, L bytes spill loads
 *   ptxas info    : Used R registers, used B barriers[, Z bytes smem] */
static oracle ptxas_says(const char *log, const char *name)
{
    oracle o = {0};
    char needle[256];
    snprintf(needle, sizeof needle, "Function properties for %s\n", name);
    const char *p = strstr(log, needle);
    if (!p)
        return o;
    p += strlen(needle);
    const char *sf = strstr(p, "bytes stack frame");
    const char *nl = sf;
    while (nl > p && nl[-1] != '\n')
        nl--;
    while (*nl && (*nl < '0' || *nl > '9'))
        nl++;
    o.stack = strtol(nl, NULL, 10);
    const char *ss = strstr(sf, "bytes stack frame, ");
    o.spill_st = strtol(ss + strlen("bytes stack frame, "), NULL, 10);
    const char *used = strstr(p, "Used ");
    o.regs = (int)strtol(used + 5, NULL, 10);
    const char *eol = strchr(used, '\n');
    const char *sm = strstr(used, "bytes smem");
    if (sm && (!eol || sm < eol)) {
        const char *q = sm;
        while (q > used && q[-1] == ' ')
            q--;
        while (q > used && q[-1] >= '0' && q[-1] <= '9')
            q--;
        o.smem = strtol(q, NULL, 10);
    }
    o.found = 1;
    return o;
}

typedef struct kspec {
    char name[32];
    int shared_floats, local_floats, bounds, maxnreg;
} kspec;

/* One kernel with the drawn sizes; the local array is indexed dynamically so
 * it lives in local memory; maxnreg > 0 makes a spiller. */
static void kernel_source(const kspec *k, char *buf, size_t n)
{
    if (k->maxnreg) {
        snprintf(buf, n,
                 "extern \"C\" __global__ void __maxnreg__(%d) %s(float *a, int n) {\n"
                 "  float v[48];\n"
                 "  #pragma unroll\n"
                 "  for (int j = 0; j < 48; j++) v[j] = a[j * n + threadIdx.x];\n"
                 "  #pragma unroll\n"
                 "  for (int r = 0; r < 48; r++) { float acc = 0;\n"
                 "    #pragma unroll\n"
                 "    for (int q = 0; q < 48; q++) acc += v[q] * v[(q + r) %% 48];\n"
                 "    a[r * n + threadIdx.x] = acc; }\n"
                 "}\n",
                 k->maxnreg, k->name);
        return;
    }
    snprintf(buf, n,
             "extern \"C\" __global__ void __launch_bounds__(%d) %s(float *a, int n) {\n"
             "  __shared__ float s[%d];\n"
             "  float loc[%d];\n"
             "  int i = threadIdx.x;\n"
             "  for (int j = 0; j < %d; j++) loc[j] = a[j * n + i];\n"
             "  s[i %% %d] = loc[(i * 7) %% %d];\n"
             "  __syncthreads();\n"
             "  a[i] = s[(i + 1) %% %d] + loc[(n + i) %% %d];\n"
             "}\n",
             k->bounds, k->name, k->shared_floats, k->local_floats, k->local_floats,
             k->shared_floats, k->local_floats, k->shared_floats, k->local_floats);
}

static void draw(kspec *ks, int n)
{
    for (int i = 0; i < n; i++) {
        memset(&ks[i], 0, sizeof ks[i]);
        snprintf(ks[i].name, sizeof ks[i].name, "k%d_%u", i, (unsigned)rand() % 1000);
        ks[i].shared_floats = 1 + rand() % 3000;
        ks[i].local_floats = 8 + rand() % 120;
        ks[i].bounds = 32 * (1 + rand() % 32);
    }
    /* the last one spills */
    ks[n - 1].maxnreg = rand() % 2 ? 24 : 32;
}

static void check_against(const kh_cubin_info *info, const kspec *ks, int n, const char *log,
                          const char *who)
{
    assert_int_equal(info->n_kernels, (size_t)n);
    for (int i = 0; i < n; i++) {
        const kh_kernel_res *r = kh_cubin_find(info, ks[i].name);
        oracle o = ptxas_says(log, ks[i].name);
        if (!r || !o.found)
            fail_msg("%s: kernel %s missing (cubin %p, ptxas report %d); seed %u", who,
                     ks[i].name, (const void *)r, o.found, g_seed);
        if (r->registers != o.regs || r->local_bytes != o.stack || r->shared_static != o.smem)
            fail_msg("%s %s: cubin regs %d local %ld smem %ld; ptxas regs %d stack %ld smem "
                     "%ld (seed %u)", who, ks[i].name, r->registers, r->local_bytes,
                     r->shared_static, o.regs, o.stack, o.smem, g_seed);
        if ((o.spill_st > 0) != (r->spill_instructions > 0))
            fail_msg("%s %s: ptxas spill stores %ld but %d spill instructions (seed %u)", who,
                     ks[i].name, o.spill_st, r->spill_instructions, g_seed);
        if (ks[i].maxnreg) {
            assert_true(r->registers <= ks[i].maxnreg);
            assert_int_equal(r->maxreg, ks[i].maxnreg);
        } else {
            assert_int_equal(r->max_threads, ks[i].bounds);
            assert_true(r->barriers >= 1);
        }
        assert_true(r->max_threads_per_block > 0 && r->max_threads_per_block <= 1024);
        if (r->max_threads)
            assert_true(r->max_threads_per_block <= r->max_threads);
        assert_true(r->code_bytes > 0);
        assert_true(r->param_bytes > 0);
    }
}

static char *nvcc_path(void)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/bin", KH_DEFAULT_CUDA_HOME);
    return kh_which("nvcc", dir);
}

static void run_nvcc_oracle(const char *arch)
{
    char *nvcc = nvcc_path();
    if (!nvcc)
        skip();
    kspec ks[4];
    draw(ks, 4);
    char *dir = kh_test_tmpdir();
    char src[600], out[600], archflag[64], body[8192] = "";
    for (int i = 0; i < 4; i++)
        kernel_source(&ks[i], body + strlen(body), sizeof body - strlen(body));
    snprintf(src, sizeof src, "%s/k.cu", dir);
    snprintf(out, sizeof out, "%s/k.cubin", dir);
    snprintf(archflag, sizeof archflag, "-arch=%s", arch);
    kh_test_write_file(src, body);
    char *argv[] = {nvcc, "-cubin", archflag, "-Xptxas", "-v", "-o", out, src, NULL};
    kh_child_result r;
    kh_err err;
    assert_int_equal(kh_proc_run(argv, 300, 1 << 20, &r, &err), KH_OK);
    if (!r.exited || r.exit_code)
        fail_msg("nvcc failed: %s", r.out);
    FILE *f = fopen(out, "rb");
    assert_non_null(f);
    static unsigned char blob[1 << 20];
    size_t n = fread(blob, 1, sizeof blob, f);
    fclose(f);
    kh_cubin_info info;
    assert_int_equal(kh_cubin_parse(blob, n, &info, &err), KH_OK);
    assert_int_equal(info.sm, atoi(arch + 3));
    check_against(&info, ks, 4, r.out, arch);
    kh_cubin_info_free(&info);
    kh_child_result_free(&r);
    kh_test_rmtree(dir);
    free(dir);
    free(nvcc);
}

static void test_nvcc_oracle_sm90a(void **state)
{
    (void)state;
    run_nvcc_oracle("sm_90a");
}

/* sm_80 has no reserved shared region inside .nv.shared.<k> */
static void test_nvcc_oracle_sm80(void **state)
{
    (void)state;
    run_nvcc_oracle("sm_80");
}

static void test_nvrtc_crosscheck(void **state)
{
    (void)state;
    kh_err err;
    kh_engine *e = kh_engine_new(NULL, &err);
    assert_non_null(e);
    if (!kh_engine_nvrtc(e, NULL)) {
        kh_engine_free(e);
        skip();
    }
    kh_compiler *c = kh_compile_new(e, &err);
    kspec ks[4];
    draw(ks, 4);
    char body[8192] = "";
    for (int i = 0; i < 4; i++)
        kernel_source(&ks[i], body + strlen(body), sizeof body - strlen(body));
    const char *opts[] = {"-Xptxas", "-v"};
    kh_compile_req req = {.source = body, .source_len = strlen(body), .options = opts,
                          .n_options = 2, .trusted = 1, .no_cache = 1};
    kh_artifact *a;
    if (kh_compile_build(c, &req, &a, &err) != KH_OK)
        fail_msg("%s\n%s", err.msg, a ? a->log : "");
    check_against(&a->res, ks, 4, a->log, "nvrtc");
    assert_int_equal(a->res.sm, 90);
    kh_artifact_free(a);
    kh_compile_free(c);
    kh_engine_free(e);
}

static unsigned char *nvrtc_cubin(size_t *len)
{
    kh_err err;
    kh_engine *e = kh_engine_new(NULL, &err);
    if (!kh_engine_nvrtc(e, NULL)) {
        kh_engine_free(e);
        return NULL;
    }
    kh_compiler *c = kh_compile_new(e, &err);
    kspec ks[2];
    draw(ks, 2);
    char body[8192] = "";
    for (int i = 0; i < 2; i++)
        kernel_source(&ks[i], body + strlen(body), sizeof body - strlen(body));
    kh_compile_req req = {.source = body, .source_len = strlen(body), .trusted = 1,
                          .no_cache = 1};
    kh_artifact *a;
    assert_int_equal(kh_compile_build(c, &req, &a, &err), KH_OK);
    unsigned char *blob = malloc(a->cubin_len);
    memcpy(blob, a->cubin, a->cubin_len);
    *len = a->cubin_len;
    kh_artifact_free(a);
    kh_compile_free(c);
    kh_engine_free(e);
    return blob;
}

static void test_hostile_images(void **state)
{
    (void)state;
    kh_cubin_info info;
    kh_err err;
    unsigned char junk[4096];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (unsigned char)rand();
    assert_int_equal(kh_cubin_parse(junk, sizeof junk, &info, &err), KH_EPARSE);
    assert_int_equal(kh_cubin_parse(NULL, 0, &info, &err), KH_EPARSE);
    assert_int_equal(info.n_kernels, 0);

    size_t len = 0;
    unsigned char *good = nvrtc_cubin(&len);
    if (!good)
        skip();
    assert_int_equal(kh_cubin_parse(good, len, &info, &err), KH_OK);
    assert_int_equal(info.n_kernels, 2);
    kh_cubin_info_free(&info);

    /* a host ELF is refused by machine */
    unsigned char host[64];
    memcpy(host, good, 64);
    host[18] = 62; /* EM_X86_64 */
    host[19] = 0;
    assert_int_equal(kh_cubin_parse(host, 64, &info, &err), KH_EPARSE);
    assert_non_null(strstr(err.msg, "not CUDA"));

    /* every truncation, at a stride: an error or a parse, never a crash */
    for (size_t cut = 0; cut < len; cut += 1 + len / 300) {
        kh_status st = kh_cubin_parse(good, cut, &info, &err);
        if (st == KH_OK)
            kh_cubin_info_free(&info);
        else
            assert_int_equal(st, KH_EPARSE);
    }
    /* random byte mutations (ASan watches the reads) */
    unsigned char *m = malloc(len);
    for (int round = 0; round < 400; round++) {
        memcpy(m, good, len);
        int flips = 1 + rand() % 8;
        for (int f = 0; f < flips; f++)
            m[(size_t)rand() % len] = (unsigned char)rand();
        kh_status st = kh_cubin_parse(m, len, &info, &err);
        if (st == KH_OK)
            kh_cubin_info_free(&info);
        else
            assert_true(st == KH_EPARSE || st == KH_ENOMEM);
    }
    free(m);
    free(good);
}

int main(void)
{
    const char *s = getenv("KH_TEST_SEED");
    g_seed = s ? (unsigned)strtoul(s, NULL, 10) : (unsigned)time(NULL);
    srand(g_seed);
    printf("# seed %u (KH_TEST_SEED to repeat)\n", g_seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nvcc_oracle_sm90a),
        cmocka_unit_test(test_nvcc_oracle_sm80),
        cmocka_unit_test(test_nvrtc_crosscheck),
        cmocka_unit_test(test_hostile_images),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
