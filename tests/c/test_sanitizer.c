/* test_sanitizer.c: compute-sanitizer's report parser and launch template
 * (engine/eval/sanitizer.h) on recorded report text (tests/fixtures/sanitizer/):
 * errors counted only when they name one of the candidate's kernels, the
 * worker's own kernels and host API records ignored, racecheck warnings
 * apart from errors, a report without a summary seen as incomplete; and
 * randomly assembled reports whose counts the parser must recover. */
#include "kh_test.h"

#include "eval/sanitizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static unsigned seed;

static char *fixture(const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/sanitizer/%s", kh_test_source_dir(), name);
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

static void parse(const char *name, const char *tool, const char *k1, const char *k2,
                  kh_san_report *r)
{
    const char *ks[] = {k1, k2};
    kh_san_parse(fixture(name), tool, ks, k2 ? 2 : 1, r);
}

static void test_memcheck(void **state)
{
    (void)state;
    kh_san_report r;
    parse("memcheck_oob.txt", "memcheck", "oob_write", NULL, &r);
    assert_true(r.summary);
    assert_int_equal(r.summary_count, 3);
    assert_int_equal(r.errors, 2);  /* two invalid writes */
    assert_int_equal(r.ignored, 1); /* the host API record */
    assert_non_null(strstr(r.first, "Invalid __global__ write of size 4 bytes"));
    assert_non_null(strstr(r.first, "1 bytes after the nearest allocation"));
    assert_null(strstr(r.first, "=========")); /* prefixes removed */

    /* another candidate's kernels: nothing of this report is theirs (the
     * word "write" in a header is not a kernel named write) */
    parse("memcheck_oob.txt", "memcheck", "oob", "write", &r);
    assert_int_equal(r.errors, 0);
    assert_int_equal(r.ignored, 3);

    parse("memcheck_clean.txt", "memcheck", "oob_write", NULL, &r);
    assert_true(r.summary);
    assert_int_equal(r.summary_count, 0);
    assert_int_equal(r.errors + r.ignored, 0);

    /* the worker's checksum kernel and a leak: not the candidate's */
    parse("memcheck_worker_only.txt", "memcheck", "rmsnorm", NULL, &r);
    assert_true(r.summary);
    assert_int_equal(r.summary_count, 2);
    assert_int_equal(r.errors, 0);
    assert_int_equal(r.ignored, 2);

    /* the older "at 0x150 in file.cu:21:kernel(...)" form; tile_sum_v2 is
     * not tile_sum */
    parse("memcheck_old_format.txt", "memcheck", "tile_sum", NULL, &r);
    assert_int_equal(r.errors, 1);
    assert_int_equal(r.ignored, 1);
    assert_non_null(strstr(r.first, "Invalid __shared__ read of size 4"));
    parse("memcheck_old_format.txt", "memcheck", "tile_sum", "tile_sum_v2", &r);
    assert_int_equal(r.errors, 2);
}

static void test_racecheck(void **state)
{
    (void)state;
    kh_san_report r;
    parse("racecheck_analysis.txt", "racecheck", "racy_reduce", NULL, &r);
    assert_true(r.summary);
    assert_int_equal(r.summary_count, 1); /* errors, not hazards */
    assert_int_equal(r.errors, 1);
    assert_int_equal(r.warnings, 1);
    assert_non_null(strstr(r.first, "Race reported between Write access"));
    assert_non_null(strstr(r.first, "[4032 hazards]"));

    parse("racecheck_hazard.txt", "racecheck", "racy_reduce", NULL, &r);
    assert_int_equal(r.errors, 1);
    assert_non_null(strstr(r.first, "Potential WAW hazard"));
    assert_non_null(strstr(r.first, "Current Value : 0, Incoming Value : 31"));

    parse("racecheck_clean.txt", "racecheck", "racy_reduce", NULL, &r);
    assert_true(r.summary);
    assert_int_equal(r.summary_count, 0);
    assert_int_equal(r.errors, 0);
}

static void test_initcheck(void **state)
{
    (void)state;
    kh_san_report r;
    parse("initcheck_uninit.txt", "initcheck", "uninit_ws", NULL, &r);
    assert_int_equal(r.summary_count, 2);
    assert_int_equal(r.errors, 1);
    assert_int_equal(r.ignored, 1); /* the worker's copy of an output back */
    assert_non_null(strstr(r.first, "Uninitialized __global__ memory read of size 4 bytes"));
}

static void test_incomplete(void **state)
{
    (void)state;
    kh_san_report r;
    parse("truncated.txt", "memcheck", "k", NULL, &r);
    assert_false(r.summary);
    assert_int_equal(r.summary_count, -1);
    assert_int_equal(r.errors, 0);
    kh_san_parse("", "memcheck", NULL, 0, &r);
    assert_false(r.summary);
    kh_san_parse(NULL, "memcheck", NULL, 0, &r);
    assert_false(r.summary);
}

/* Reports assembled at random from candidate and worker records, with other
 * output interleaved: the counts come back exactly. */
static void test_random_reports(void **state)
{
    (void)state;
    static const char *heads[] = {"Invalid __global__ write of size 4 bytes",
                                  "Invalid __global__ read of size 16 bytes",
                                  "Misaligned __global__ address of size 8",
                                  "Uninitialized __global__ memory read of size 2 bytes"};
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    assert_non_null(buf);
    for (int round = 0; round < 200; round++) {
        int want_mine = 0, want_other = 0;
        size_t n = 0;
        n += (size_t)snprintf(buf + n, cap - n, "========= COMPUTE-SANITIZER\n");
        int nrec = rand() % 12;
        int first_mine = -1;
        for (int i = 0; i < nrec; i++) {
            int mine = rand() % 2;
            const char *k = mine ? (rand() % 2 ? "cand_a" : "cand_b")
                                 : (rand() % 2 ? "kh_rng_fill" : "cand_a_helper");
            if (mine && first_mine < 0)
                first_mine = i;
            want_mine += mine;
            want_other += !mine;
            n += (size_t)snprintf(buf + n, cap - n,
                                  "========= %s\n=========     at %s(float *, int)+0x%x\n"
                                  "=========     by thread (%d,0,0) in block (%d,0,0)\n",
                                  heads[i % 4], k, rand() % 4096, rand() % 1024, rand() % 65536);
            if (rand() % 3 == 0)
                n += (size_t)snprintf(buf + n, cap - n, "worker stderr line %d\n", i);
            n += (size_t)snprintf(buf + n, cap - n, "=========\n");
        }
        n += (size_t)snprintf(buf + n, cap - n, "========= ERROR SUMMARY: %d errors\n", nrec);
        const char *ks[] = {"cand_a", "cand_b"};
        kh_san_report r;
        kh_san_parse(buf, "memcheck", ks, 2, &r);
        assert_true(r.summary);
        assert_int_equal(r.summary_count, nrec);
        if (r.errors != want_mine || r.ignored != want_other)
            fail_msg("round %d (seed %u): %d/%d counted, %d/%d ignored", round, seed, r.errors,
                     want_mine, r.ignored, want_other);
        if (first_mine >= 0)
            assert_non_null(strstr(r.first, heads[first_mine % 4]));
        else
            assert_string_equal(r.first, "");
    }
    free(buf);
}

static void test_template(void **state)
{
    (void)state;
    char t[2048];
    kh_err err;
    assert_int_equal(kh_san_template("/cuda/bin/compute-sanitizer", "memcheck", "/tmp/l/m.log",
                                     NULL, NULL, t, sizeof t, &err),
                     KH_OK);
    assert_string_equal(t, "/cuda/bin/compute-sanitizer --tool memcheck --log-file /tmp/l/m.log "
                           "--print-limit 20 --report-api-errors no {exe} worker --role {role}");
    /* a scheduler prefix stays in front; racecheck gets its report mode;
     * extra flags go before the worker */
    assert_int_equal(kh_san_template("cs", "racecheck", "/t/r.log", "--foo 1",
                                     "srun --ntasks=1 {exe} worker --role {role}", t, sizeof t,
                                     &err),
                     KH_OK);
    assert_string_equal(t, "srun --ntasks=1 cs --tool racecheck --log-file /t/r.log "
                           "--print-limit 20 --report-api-errors no --racecheck-report analysis "
                           "--foo 1 {exe} worker --role {role}");
    assert_int_equal(kh_san_template("cs", "helgrind", "/t/r.log", NULL, NULL, t, sizeof t, &err),
                     KH_EINVAL);
    assert_non_null(strstr(err.msg, "unknown compute-sanitizer tool 'helgrind'"));
    assert_int_equal(kh_san_template("cs", "memcheck", "/t/a b.log", NULL, NULL, t, sizeof t,
                                     &err),
                     KH_EINVAL);
    assert_non_null(strstr(err.msg, "whitespace"));
    assert_int_equal(kh_san_template("cs", "memcheck", "/t/a.log", NULL, "ssh host khlua", t,
                                     sizeof t, &err),
                     KH_EINVAL);
    assert_non_null(strstr(err.msg, "no {exe}"));
    char small[40];
    assert_int_equal(kh_san_template("cs", "memcheck", "/t/a.log", NULL, NULL, small,
                                     sizeof small, &err),
                     KH_EINVAL);
    assert_string_equal(kh_san_check_name("initcheck"), "sanitizer:initcheck");
    assert_null(kh_san_check_name("asan"));
}

static void test_find(void **state)
{
    (void)state;
    char p[4096];
    kh_err err;
    setenv("KHLUA_COMPUTE_SANITIZER", "/nonexistent/compute-sanitizer", 1);
    assert_int_equal(kh_san_find(NULL, p, sizeof p, &err), KH_ENOTFOUND);
    assert_non_null(strstr(err.msg, "KHLUA_COMPUTE_SANITIZER=/nonexistent/compute-sanitizer"));
    setenv("KHLUA_COMPUTE_SANITIZER", "/bin/sh", 1);
    assert_int_equal(kh_san_find(NULL, p, sizeof p, &err), KH_OK);
    assert_string_equal(p, "/bin/sh");
    unsetenv("KHLUA_COMPUTE_SANITIZER");
}

int main(void)
{
    seed = (unsigned)time(NULL);
    srand(seed);
    printf("# seed %u\n", seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memcheck),   cmocka_unit_test(test_racecheck),
        cmocka_unit_test(test_initcheck),  cmocka_unit_test(test_incomplete),
        cmocka_unit_test(test_random_reports), cmocka_unit_test(test_template),
        cmocka_unit_test(test_find),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
