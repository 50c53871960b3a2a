/* test_compile_service.c: the compile service of issue #5 (no GPU needed):
 * compiles on compile servers with the PCH-warm server preferred; the
 * store-backed cache (a hit needs no server, its record is complete, compile
 * errors are cached, the static checks and the manifest still apply to a
 * hit); a server killed between compiles or mid-compile is replaced and the
 * next compile succeeds; a hung server (template bomb) is killed at the
 * deadline with ETIMEOUT and the reason; jobs on two servers overlap. */
#include "kh_test.h"

#include "compile/compile_service.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static unsigned g_seed;

/* The servers run the sanitizer build too: no leak report at their exit. */
static const char *const server_env[] = {"ASAN_OPTIONS=detect_leaks=0", NULL};

typedef struct fx {
    kh_engine *e;
    char *dir;
} fx;

static int setup(void **state)
{
    kh_err err;
    fx *f = calloc(1, sizeof *f);
    f->e = kh_engine_new(NULL, &err);
    f->dir = kh_test_tmpdir();
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    kh_engine_free(f->e);
    kh_test_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

static kh_compile_service *service(fx *f, size_t n, double grace)
{
    if (!kh_engine_nvrtc(f->e, NULL))
        skip();
    kh_compile_service_opts o = {.servers = n, .exe = kh_test_khlua(), .env = server_env,
                                 .grace_s = grace};
    kh_err err;
    kh_compile_service *s = kh_compile_service_new(f->e, &o, &err);
    if (!s)
        fail_msg("%s", err.msg);
    return s;
}

/* A bf16 kernel with a random shared array. */
static void bf16_kernel(char *buf, size_t n, int smem_floats, int salt)
{
    snprintf(buf, n,
             "#include <cuda_bf16.h>\n"
             "extern \"C\" __global__ void scale_bf16(\n"
             "    const __nv_bfloat16 *x, __nv_bfloat16 *y, float s, int n) {\n"
             "  __shared__ float t[%d];\n"
             "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
             "  t[threadIdx.x %% %d] = i < n ? __bfloat162float(x[i]) : 0.f;\n"
             "  __syncthreads();\n"
             "  if (i < n) y[i] = __float2bfloat16(t[(threadIdx.x + %d) %% %d] * s);\n"
             "}\n",
             smem_floats, smem_floats, salt, smem_floats);
}

static const char *const k_scale[] = {"scale_bf16"};

static kh_artifact *build_ok(kh_compile_service *s, kh_store *db, const kh_compile_req *req)
{
    kh_artifact *a = NULL;
    kh_err err;
    kh_status st = kh_compile_service_build(s, db, req, &a, &err);
    if (st != KH_OK)
        fail_msg("seed %u: %s: %s\n%s", g_seed, kh_status_name(st), err.msg, a ? a->log : "");
    return a;
}

static const char *bomb(char *buf, size_t n)
{
    /* 2^40 instantiations; NVRTC does not poll its cancel callback inside */
    snprintf(buf, n,
             "template <int N, unsigned M> struct T {\n"
             "  static constexpr unsigned long v = T<N - 1, M * 2u>::v + T<N - 1, M * 2u + 1u>::v;\n"
             "};\n"
             "template <unsigned M> struct T<0, M> { static constexpr unsigned long v = M; };\n"
             "extern \"C\" __global__ void k(unsigned long *a) { a[0] = T<%d, 1u>::v; }\n",
             36 + rand() % 8);
    return buf;
}

/* kh_compile_service_prestart: a server started before any job, and the
 * first build served by it rather than by another one started then; asking
 * again with one alive starts none. */
static void test_prestart(void **state)
{
    fx *f = *state;
    kh_compile_service *s = service(f, 2, 0);
    kh_err err;
    kh_compile_service_stats st;
    assert_int_equal(kh_compile_service_prestart(s, 1, &err), KH_OK);
    kh_compile_service_stats_get(s, &st);
    assert_int_equal(st.started, 1);
    char src[4096];
    bf16_kernel(src, sizeof src, 16 + rand() % 2000, rand() % 7);
    kh_compile_req req = {.source = src, .source_len = strlen(src), .kernels = k_scale,
                          .n_kernels = 1};
    kh_artifact *a = build_ok(s, NULL, &req);
    assert_string_equal(a->served_by, "server");
    assert_true(a->server_pid > 0 && a->server_pid != getpid());
    kh_artifact_free(a);
    assert_int_equal(kh_compile_service_prestart(s, 1, &err), KH_OK);
    kh_compile_service_stats_get(s, &st);
    assert_int_equal(st.started, 1);
    kh_compile_service_free(s);
}

static void test_servers_compile_and_route(void **state)
{
    fx *f = *state;
    kh_compile_service *s = service(f, 2, 0);
    char src[4096];
    int smem = 16 + rand() % 2000;
    bf16_kernel(src, sizeof src, smem, rand() % 7);
    kh_compile_req req = {.source = src, .source_len = strlen(src), .kernels = k_scale,
                          .n_kernels = 1};
    kh_artifact *a = build_ok(s, NULL, &req);
    assert_true(a->ok);
    assert_string_equal(a->served_by, "server");
    assert_true(a->server_pid > 0 && a->server_pid != getpid());
    const kh_kernel_res *k = kh_cubin_find(&a->res, "scale_bf16");
    assert_non_null(k);
    assert_int_equal(k->shared_static, 4 * smem);
    assert_int_equal(memcmp(a->cubin, "\177ELF", 4), 0);
    /* the key is the in-process key */
    kh_compiler *c = kh_compile_new(f->e, NULL);
    unsigned char key[16];
    assert_int_equal(kh_compile_key(c, &req, key, NULL), KH_OK);
    assert_memory_equal(key, a->key, 16);
    kh_compile_free(c);
    /* the same includes go to the same (warm) server, even with another idle */
    int pid = a->server_pid;
    kh_artifact_free(a);
    for (int i = 0; i < 2; i++) {
        bf16_kernel(src, sizeof src, 16 + rand() % 2000, 100 + i);
        req.source_len = strlen(src);
        a = build_ok(s, NULL, &req);
        assert_int_equal(a->server_pid, pid);
        kh_artifact_free(a);
    }
    kh_compile_service_stats st;
    kh_compile_service_stats_get(s, &st);
    assert_int_equal(st.warm_routed, 2);
    assert_int_equal(st.dispatched, 3);
    /* a compile error is a verdict with the log; the server lives on */
    const char *bad = "extern \"C\" __global__ void k(float *a) { a[0] = ; }\n";
    kh_compile_req br = {.source = bad, .source_len = strlen(bad), .name = "bad.cu"};
    kh_err err;
    assert_int_equal(kh_compile_service_build(s, NULL, &br, &a, &err), KH_ECOMPILE);
    assert_non_null(strstr(a->log, "bad.cu(1): error"));
    assert_non_null(strstr(err.msg, "error"));
    assert_false(a->ok);
    kh_artifact_free(a);
    /* the manifest is checked against the cubin (trusted: no static check
     * names the missing kernel first) */
    static const char *const nope[] = {"nope"};
    req.kernels = nope;
    req.trusted = 1;
    assert_int_equal(kh_compile_service_build(s, NULL, &req, &a, &err), KH_ECOMPILE);
    assert_non_null(strstr(err.msg, "kernel 'nope' is not in the cubin"));
    kh_artifact_free(a);
    kh_compile_service_stats_get(s, &st);
    assert_int_equal(st.deaths, 0);
    kh_compile_service_free(s);
}

static void test_store_cache(void **state)
{
    fx *f = *state;
    char path[1024];
    snprintf(path, sizeof path, "%s/store", f->dir);
    kh_store *db;
    kh_err err;
    assert_int_equal(kh_store_open(path, NULL, &db, &err), KH_OK);
    kh_compile_service *s = service(f, 1, 0);
    char src[4096];
    int smem = 16 + rand() % 2000;
    bf16_kernel(src, sizeof src, smem, rand() % 7);
    kh_compile_req req = {.source = src, .source_len = strlen(src), .kernels = k_scale,
                          .n_kernels = 1, .name = "scale.cu"};
    kh_artifact *a = build_ok(s, db, &req);
    assert_string_equal(a->served_by, "server");
    kh_compile_service_stats st;
    kh_compile_service_stats_get(s, &st);
    assert_int_equal(st.store_writes, 1);
    assert_int_equal(st.store_hits, 0);

    /* the record is complete */
    char id[64];
    snprintf(id, sizeof id, "compile-%s", a->hash);
    json_t *rec;
    assert_int_equal(kh_store_get(db, id, &rec, &err), KH_OK);
    assert_string_equal(json_string_value(json_object_get(rec, "status")), "ok");
    assert_string_equal(json_string_value(json_object_get(rec, "key")), a->hash);
    assert_string_equal(json_string_value(json_object_get(rec, "arch")), a->arch);
    assert_string_equal(json_string_value(json_object_get(rec, "nvrtc")), a->nvrtc_version);
    assert_int_equal(json_array_size(json_object_get(rec, "options")), a->n_options);
    json_t *pv = json_object_get(rec, "provenance");
    assert_string_equal(json_string_value(json_object_get(pv, "compiler")), "nvrtc");
    assert_string_equal(json_string_value(json_object_get(pv, "served_by")), "server");
    assert_int_equal(json_integer_value(json_object_get(pv, "server_pid")), a->server_pid);
    json_t *kr = json_object_get(json_object_get(rec, "kernels"), "scale_bf16");
    assert_int_equal(json_integer_value(json_object_get(kr, "shared_static")), 4 * smem);
    assert_true(json_number_value(json_object_get(json_object_get(rec, "timings"), "compile")) >
                0);
    kh_hash h;
    void *blob;
    size_t len;
    assert_int_equal(kh_hash_parse(json_string_value(json_object_get(rec, "binary_blob")), &h,
                                   &err), KH_OK);
    assert_int_equal(kh_store_get_blob(db, &h, &blob, &len, &err), KH_OK);
    assert_int_equal(len, a->cubin_len);
    assert_memory_equal(blob, a->cubin, len);
    free(blob);
    assert_int_equal(kh_hash_parse(json_string_value(json_object_get(rec, "source_blob")), &h,
                                   &err), KH_OK);
    assert_int_equal(kh_store_get_blob(db, &h, &blob, &len, &err), KH_OK);
    assert_int_equal(len, strlen(src));
    assert_memory_equal(blob, src, len);
    free(blob);
    assert_int_equal(kh_hash_parse(json_string_value(json_object_get(rec, "log_blob")), &h,
                                   &err), KH_OK);
    json_decref(rec);

    /* a fresh service (no server has seen it) answers from the store */
    kh_compile_service *s2 = service(f, 1, 0);
    kh_artifact *b = build_ok(s2, db, &req);
    assert_string_equal(b->served_by, "store");
    assert_int_equal(b->cubin_len, a->cubin_len);
    assert_memory_equal(b->cubin, a->cubin, a->cubin_len);
    assert_int_equal(kh_cubin_find(&b->res, "scale_bf16")->registers,
                     kh_cubin_find(&a->res, "scale_bf16")->registers);
    kh_compile_service_stats_get(s2, &st);
    assert_int_equal(st.dispatched, 0);
    assert_int_equal(st.started, 0); /* no server was needed at all */
    assert_int_equal(st.store_hits, 1);
    kh_artifact_free(b);
    /* the manifest still applies to a hit */
    static const char *const nope[] = {"nope"};
    req.kernels = nope;
    req.trusted = 1;
    assert_int_equal(kh_compile_service_build(s2, db, &req, &b, &err), KH_ECOMPILE);
    assert_non_null(strstr(err.msg, "'nope' is not in the cubin"));
    kh_artifact_free(b);
    kh_artifact_free(a);

    /* compile errors are cached too, with their log */
    char bad[256];
    int pad = rand() % 9;
    snprintf(bad, sizeof bad, "%.*sextern \"C\" __global__ void k(float *a) { a[0] = ; }\n",
             pad, "\n\n\n\n\n\n\n\n\n");
    kh_compile_req br = {.source = bad, .source_len = strlen(bad), .name = "bad.cu"};
    char want[32];
    snprintf(want, sizeof want, "bad.cu(%d): error", pad + 1);
    assert_int_equal(kh_compile_service_build(s, db, &br, &a, &err), KH_ECOMPILE);
    assert_non_null(strstr(a->log, want));
    assert_int_equal(kh_compile_service_build(s2, db, &br, &b, &err), KH_ECOMPILE);
    assert_string_equal(b->served_by, "store");
    assert_non_null(strstr(b->log, want));
    assert_non_null(strstr(err.msg, "error"));
    kh_artifact_free(a);
    kh_artifact_free(b);

    /* a trusted compile in the store does not let model-written source skip
     * the static checks (the key does not cover trust) */
    const char *vt = "#include <vector_types.h>\n"
                     "extern \"C\" __global__ void v(float2 *a) { a[0].x = 1.f; }\n";
    kh_compile_req tr = {.source = vt, .source_len = strlen(vt), .trusted = 1};
    kh_artifact_free(build_ok(s, db, &tr));
    tr.trusted = 0;
    assert_int_equal(kh_compile_service_build(s2, db, &tr, &b, &err), KH_ECOMPILE);
    assert_non_null(strstr(b->log, "vector_types.h> is not on the allowlist"));
    kh_artifact_free(b);
    kh_compile_service_free(s2);
    kh_compile_service_free(s);
    kh_store_close(db);
}

/* Wait until pid has exited (a zombie of the pool, or gone). */
static void wait_dead(int pid)
{
    for (int i = 0; i < 400; i++) {
        char p[64], buf[256] = "";
        snprintf(p, sizeof p, "/proc/%d/stat", pid);
        FILE *fp = fopen(p, "r");
        if (!fp)
            return;
        size_t n = fread(buf, 1, sizeof buf - 1, fp);
        fclose(fp);
        buf[n] = '\0';
        const char *rp = strrchr(buf, ')');
        if (rp && rp[1] == ' ' && rp[2] == 'Z')
            return;
        usleep(5000);
    }
    fail_msg("process %d did not die", pid);
}

/* 1 if dir holds NVRTC's PCH folder of process pid. */
static int has_pch_of(const char *dir, int pid)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "__nvrtc_auto_pch_%d_", pid);
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    int found = 0;
    while ((de = readdir(d)))
        found |= !strncmp(de->d_name, prefix, strlen(prefix));
    closedir(d);
    return found;
}

static void test_killed_server_is_replaced(void **state)
{
    fx *f = *state;
    kh_compile_service *s = service(f, 1, 0);
    char src[4096];
    bf16_kernel(src, sizeof src, 16 + rand() % 2000, 1);
    kh_compile_req req = {.source = src, .source_len = strlen(src), .no_cache = 1};
    kh_artifact *a = build_ok(s, NULL, &req);
    int pid = a->server_pid;
    kh_artifact_free(a);

    /* between compiles */
    assert_int_equal(kill(pid, SIGKILL), 0);
    wait_dead(pid);
    a = build_ok(s, NULL, &req);
    assert_true(a->server_pid > 0 && a->server_pid != pid);
    pid = a->server_pid;
    kh_artifact_free(a);

    /* mid-compile: a killer process waits, then kill -9s the busy server */
    double delay = 0.3 + (rand() % 300) / 1000.0;
    pid_t killer = fork();
    assert_true(killer >= 0);
    if (killer == 0) {
        usleep((useconds_t)(delay * 1e6));
        kill(pid, SIGKILL);
        _exit(0);
    }
    char bsrc[1024];
    kh_compile_req breq = {.source = bomb(bsrc, sizeof bsrc), .deadline_s = 30};
    breq.source_len = strlen(bsrc);
    kh_err err;
    double t0 = kh_now();
    assert_int_equal(kh_compile_service_build(s, NULL, &breq, &a, &err), KH_ECOMPILE);
    double took = kh_now() - t0;
    int st;
    waitpid(killer, &st, 0);
    char want[64];
    snprintf(want, sizeof want, "compile server pid %d died", pid);
    if (!strstr(err.msg, want) || !strstr(err.msg, "SIGKILL"))
        fail_msg("got: %s", err.msg);
    assert_non_null(strstr(a->log, "will be replaced"));
    assert_true(took < delay + 5);
    assert_false(has_pch_of(kh_compile_service_tmpdir(s), pid));
    kh_artifact_free(a);
    a = build_ok(s, NULL, &req);
    assert_true(a->server_pid != pid);
    kh_artifact_free(a);
    kh_compile_service_stats stt;
    kh_compile_service_stats_get(s, &stt);
    assert_int_equal(stt.deaths, 2);
    assert_int_equal(stt.started, 3);
    kh_compile_service_free(s);
}

static void test_hung_server_times_out(void **state)
{
    fx *f = *state;
    kh_compile_service *s = service(f, 1, 0.5);
    char bsrc[1024];
    double dl = 1.0 + (rand() % 500) / 1000.0;
    kh_compile_req breq = {.source = bomb(bsrc, sizeof bsrc), .deadline_s = dl,
                           .name = "bomb.cu"};
    breq.source_len = strlen(bsrc);
    kh_artifact *a = NULL;
    kh_err err;
    double t0 = kh_now();
    assert_int_equal(kh_compile_service_build(s, NULL, &breq, &a, &err), KH_ETIMEOUT);
    double took = kh_now() - t0;
    printf("# bomb with a %.2f s deadline answered after %.2f s\n", dl, took);
    /* the server has to start first (NVRTC load): allow for that */
    assert_true(took >= dl && took < dl + 0.5 + 5);
    assert_non_null(strstr(err.msg, "bomb.cu passed its deadline"));
    assert_non_null(strstr(err.msg, "was killed"));
    assert_non_null(strstr(a->log, "was killed"));
    kh_artifact_free(a);
    char src[4096];
    bf16_kernel(src, sizeof src, 16 + rand() % 2000, 2);
    kh_compile_req req = {.source = src, .source_len = strlen(src)};
    a = build_ok(s, NULL, &req);
    /* the servers' PCH files live in the service's folder: the live server
     * has its own, and the folder goes with the service */
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s", kh_compile_service_tmpdir(s));
    assert_true(tmp[0] != '\0');
    assert_true(has_pch_of(tmp, a->server_pid));
    kh_artifact_free(a);
    kh_compile_service_stats st;
    kh_compile_service_stats_get(s, &st);
    assert_int_equal(st.timeouts, 1);
    assert_int_equal(st.started, 2);
    kh_compile_service_free(s);
    assert_int_not_equal(access(tmp, F_OK), 0);
}

static void test_two_servers_overlap(void **state)
{
    fx *f = *state;
    kh_compile_service *s = service(f, 2, 0);
    /* start both servers first: process start is not what is measured */
    char w[2][256];
    kh_compile_req warm[2];
    for (int i = 0; i < 2; i++) {
        snprintf(w[i], sizeof w[i], "extern \"C\" __global__ void w%d(int *p) { p[0] = %d; }\n",
                 i, rand());
        warm[i] = (kh_compile_req){.source = w[i], .source_len = strlen(w[i]), .no_cache = 1};
    }
    kh_compile_result r[2];
    kh_compile_service_build_many(s, NULL, warm, 2, r);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(r[i].status, KH_OK);
        kh_artifact_free(r[i].a);
    }
    /* two bf16 kernels (the first with these includes on each server: it
     * creates the PCH, a few hundred ms, so pipe and start-up costs are noise) */
    char src[2][4096];
    kh_compile_req req[2];
    for (int i = 0; i < 2; i++) {
        bf16_kernel(src[i], sizeof src[i], 16 + rand() % 2000, i);
        req[i] = (kh_compile_req){.source = src[i], .source_len = strlen(src[i]),
                                  .no_cache = 1, .deadline_s = 120};
    }
    double t0 = kh_now();
    kh_compile_service_build_many(s, NULL, req, 2, r);
    double wall = kh_now() - t0, sum = 0;
    for (int i = 0; i < 2; i++) {
        if (r[i].status)
            fail_msg("%s: %s", kh_status_name(r[i].status), r[i].err.msg);
        sum += r[i].a->t.total;
    }
    printf("# two compiles on two servers: wall %.2f s, sum of compile times %.2f s\n", wall,
           sum);
    assert_int_not_equal(r[0].a->server_pid, r[1].a->server_pid);
    /* served one after the other, the wall time would be at least the sum */
    assert_true(wall < 0.85 * sum);
    for (int i = 0; i < 2; i++)
        kh_artifact_free(r[i].a);
    kh_compile_service_free(s);
}

/* A candidate of several files through the servers and the store: the
 * headers travel to the server, the record keeps them as blobs that gc
 * keeps, a hit needs the same headers, and a header's static-check problem
 * is named before any server runs. */
static void test_headers_on_servers(void **state)
{
    fx *f = *state;
    char path[1024];
    snprintf(path, sizeof path, "%s/store", f->dir);
    kh_store *db;
    kh_err err;
    assert_int_equal(kh_store_open(path, NULL, &db, &err), KH_OK);
    kh_compile_service *s = service(f, 1, 0);
    const char *entry = "#include <cuda_bf16.h>\n#include \"util.cuh\"\n"
                        "extern \"C\" __global__ void scale_bf16(float *y) { y[0] = k_of(); }\n";
    char util[2][128];
    int k0 = 1 + rand() % 1000;
    for (int v = 0; v < 2; v++)
        snprintf(util[v], sizeof util[v], "#pragma once\n#include \"inc/one.cuh\"\n"
                 "__device__ float k_of() { return %d.0f * one(); }\n", k0 + v);
    const char *one = "#pragma once\n__device__ float one() { return 1.0f; }\n";
    kh_source h[2] = {{"util.cuh", util[0], strlen(util[0])}, {"inc/one.cuh", one, strlen(one)}};
    kh_compile_req req = {.source = entry, .source_len = strlen(entry), .name = "main.cu",
                          .headers = h, .n_headers = 2, .kernels = k_scale, .n_kernels = 1};

    /* the wire form carries them: params list names and sizes, the payload
     * the texts after the source */
    json_t *params = kh_compile_req_to_json(&req);
    void *payload = NULL, *scratch = NULL;
    size_t plen = 0;
    assert_int_equal(kh_compile_req_payload(&req, &payload, &plen, &err), KH_OK);
    kh_compile_req back;
    assert_int_equal(kh_compile_req_from_json(params, payload, plen, &back, &scratch, &err), KH_OK);
    assert_int_equal(back.source_len, req.source_len);
    assert_memory_equal(back.source, entry, req.source_len);
    assert_int_equal(back.n_headers, 2);
    for (int i = 0; i < 2; i++) {
        assert_string_equal(back.headers[i].name, h[i].name);
        assert_int_equal(back.headers[i].len, h[i].len);
        assert_memory_equal(back.headers[i].text, h[i].text, h[i].len);
    }
    free(scratch);
    /* sizes the payload cannot hold are refused */
    json_integer_set(json_object_get(json_array_get(json_object_get(params, "headers"), 1),
                                     "bytes"), (json_int_t)plen);
    assert_int_equal(kh_compile_req_from_json(params, payload, plen, &back, &scratch, &err),
                     KH_EINVAL);
    free(scratch);
    free(payload);
    json_decref(params);

    kh_artifact *a = build_ok(s, db, &req);
    assert_string_equal(a->served_by, "server");
    assert_non_null(kh_cubin_find(&a->res, "scale_bf16"));
    char id[64];
    snprintf(id, sizeof id, "compile-%s", a->hash);
    json_t *rec;
    assert_int_equal(kh_store_get(db, id, &rec, &err), KH_OK);
    json_t *hs = json_object_get(rec, "headers");
    assert_int_equal(json_array_size(hs), 2);
    for (int i = 0; i < 2; i++) {
        json_t *x = json_array_get(hs, (size_t)i);
        assert_string_equal(json_string_value(json_object_get(x, "name")), h[i].name);
        kh_hash hh;
        assert_int_equal(kh_hash_parse(json_string_value(json_object_get(x, "text_blob")), &hh,
                                       &err), KH_OK);
        void *text;
        size_t tlen;
        assert_int_equal(kh_store_get_blob(db, &hh, &text, &tlen, &err), KH_OK);
        assert_int_equal(tlen, h[i].len);
        assert_memory_equal(text, h[i].text, tlen);
        free(text);
    }
    json_decref(rec);
    /* gc keeps them: the record references them */
    json_t *rep;
    assert_int_equal(kh_store_gc(db, 0, &rep, &err), KH_OK);
    assert_int_equal(json_integer_value(json_object_get(rep, "deleted")), 0);
    json_decref(rep);

    /* the same again: the store answers */
    kh_artifact *b = build_ok(s, db, &req);
    assert_string_equal(b->served_by, "store");
    assert_string_equal(b->hash, a->hash);
    kh_artifact_free(b);
    /* another header: another key, compiled (not the first's PCH, nor its record) */
    h[0] = (kh_source){"util.cuh", util[1], strlen(util[1])};
    b = build_ok(s, db, &req);
    assert_string_equal(b->served_by, "server");
    assert_string_not_equal(b->hash, a->hash);
    assert_false(a->cubin_len == b->cubin_len && !memcmp(a->cubin, b->cubin, a->cubin_len));
    kh_artifact_free(b);
    kh_artifact_free(a);

    /* a forbidden construct in a header: refused by the static checks,
     * naming the header, before any server */
    kh_compile_service_stats st0, st1;
    kh_compile_service_stats_get(s, &st0);
    const char *evil = "#pragma once\n\n__device__ float k_of() { cudaFree(0); return 1; }\n";
    h[0] = (kh_source){"util.cuh", evil, strlen(evil)};
    assert_int_equal(kh_compile_service_build(s, db, &req, &a, &err), KH_ECOMPILE);
    assert_non_null(strstr(a->log, "util.cuh:3: host API call 'cudaFree'"));
    kh_artifact_free(a);
    h[0] = (kh_source){"../util.cuh", one, strlen(one)};
    assert_int_equal(kh_compile_service_build(s, db, &req, &a, &err), KH_ECOMPILE);
    assert_non_null(strstr(err.msg, "source '../util.cuh' cannot be a header"));
    kh_artifact_free(a);
    kh_compile_service_stats_get(s, &st1);
    assert_int_equal(st1.dispatched, st0.dispatched);
    kh_compile_service_free(s);
    kh_store_close(db);
}

static void test_in_process_mode_and_bad_requests(void **state)
{
    fx *f = *state;
    if (!kh_engine_nvrtc(f->e, NULL))
        skip();
    kh_err err;
    kh_compile_service_opts o = {.in_process = 1};
    kh_compile_service *s = kh_compile_service_new(f->e, &o, &err);
    assert_non_null(s);
    char src[4096];
    bf16_kernel(src, sizeof src, 16 + rand() % 2000, 3);
    kh_compile_req req = {.source = src, .source_len = strlen(src), .kernels = k_scale,
                          .n_kernels = 1};
    kh_artifact *a = build_ok(s, NULL, &req);
    assert_string_equal(a->served_by, "in-process");
    assert_int_equal(a->server_pid, 0);
    kh_artifact_free(a);
    kh_compile_req bad = {.source = src, .source_len = strlen(src), .arch = "sm_9$"};
    assert_int_equal(kh_compile_service_build(s, NULL, &bad, &a, &err), KH_EINVAL);
    assert_null(a);
    kh_compile_service_free(s);
    o = (kh_compile_service_opts){.servers = 1000};
    assert_null(kh_compile_service_new(f->e, &o, &err));
    assert_int_equal(err.code, KH_EINVAL);
    /* a launch template that cannot start: the job says so, no crash */
    o = (kh_compile_service_opts){.servers = 1, .launch = "/nonexistent/khlua worker"};
    s = kh_compile_service_new(f->e, &o, &err);
    assert_int_not_equal(kh_compile_service_build(s, NULL, &req, &a, &err), KH_OK);
    assert_non_null(strstr(err.msg, "/nonexistent/khlua"));
    kh_artifact_free(a);
    kh_compile_service_free(s);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    g_seed = (unsigned)time(NULL);
    srand(g_seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_servers_compile_and_route, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prestart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_headers_on_servers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_killed_server_is_replaced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hung_server_times_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_servers_overlap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_in_process_mode_and_bad_requests, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
