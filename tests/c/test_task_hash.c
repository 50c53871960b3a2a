/* test_task_hash.c: kh_task_fingerprint on a package written here: the same
 * files give the same hash, whatever was read in between; a changed byte, an
 * added file and a removed file each change it, and kh_task_fp_diff names
 * the file. */
#include "kh_test.h"

#include "task/task.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[256];

static void put(const char *rel, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_dir, rel);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static kh_task_fp fp_of(void)
{
    kh_task_fp fp;
    kh_err err;
    if (kh_task_fingerprint(g_dir, &fp, &err))
        fail_msg("%s", err.msg);
    return fp;
}

static void test_fingerprint(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/khlua-task-hash-XXXXXX");
    assert_non_null(mkdtemp(g_dir));
    char sub[300];
    snprintf(sub, sizeof sub, "%s/solutions", g_dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    put("definition.json", "{\"name\": \"d\", \"tolerance\": {\"atol\": 0.01}}\n");
    put("workloads.jsonl", "{\"uuid\": \"w1\"}\n");
    put("solutions/ref.json", "{\"name\": \"ref\"}\n");

    kh_task_fp a = fp_of(), b = fp_of();
    assert_int_equal(a.n, 3);
    assert_true(a.hash == b.hash);
    assert_null(kh_task_fp_diff(&a, &b));

    /* one byte of the tolerance */
    put("definition.json", "{\"name\": \"d\", \"tolerance\": {\"atol\": 0.11}}\n");
    kh_task_fp c = fp_of();
    assert_true(c.hash != a.hash);
    assert_string_equal(kh_task_fp_diff(&a, &c), "definition.json");

    /* an added solution, then a removed one */
    put("solutions/cheat.json", "{\"name\": \"cheat\"}\n");
    kh_task_fp d = fp_of();
    assert_string_equal(kh_task_fp_diff(&c, &d), "solutions/cheat.json");
    char p[512];
    snprintf(p, sizeof p, "%s/solutions/ref.json", g_dir);
    assert_int_equal(unlink(p), 0);
    kh_task_fp e = fp_of();
    assert_string_equal(kh_task_fp_diff(&d, &e), "solutions/ref.json");
    assert_true(e.hash != d.hash);

    kh_task_fp_free(&a);
    kh_task_fp_free(&b);
    kh_task_fp_free(&c);
    kh_task_fp_free(&d);
    kh_task_fp_free(&e);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    assert_int_equal(system(cmd), 0);
}

static void test_missing(void **state)
{
    (void)state;
    kh_task_fp fp;
    kh_err err;
    assert_int_equal(kh_task_fingerprint("/nonexistent/khlua-task", &fp, &err), KH_ENOTFOUND);
    assert_non_null(strstr(err.msg, "/nonexistent/khlua-task"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fingerprint),
        cmocka_unit_test(test_missing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
