/* test_ccguard.c: the checks of a host candidate's compile (ccguard.h) on
 * records written by hand: the system directories read from `cc -E -v`;
 * #line, line markers and #embed found however they are spelled (digraphs,
 * trigraphs, splices, comments) and not found in strings or comments; a
 * dependency list with escaped names, where a file outside the allowlist is
 * named with the directive that included it; asm outside system headers;
 * assembler directives in any case, but not in a static's name; the log
 * keeps the candidate's and the system's lines, quotes the candidate's own
 * line from memory and drops any line about another file. */
#include "kh_test.h"

#include "compile/ccguard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *dir;
static char src[4200], other[4200], secret[4200];

static int setup(void **state)
{
    (void)state;
    dir = kh_test_tmpdir();
    snprintf(src, sizeof src, "%s/cand.c", dir);
    snprintf(other, sizeof other, "%s/own.h", dir);
    snprintf(secret, sizeof secret, "%s/secret.h", dir);
    kh_test_write_file(other, "static int own_h;\n");
    kh_test_write_file(secret, "SECRET TEXT\n");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kh_test_rmtree(dir);
    free(dir);
    return 0;
}

static kh_ccguard *guard(const char *text)
{
    kh_test_write_file(src, text);
    const char *sys[] = {"/usr/include", NULL};
    const char *own[] = {src, other, NULL};
    kh_err err;
    kh_ccguard *g = kh_ccguard_new(sys, own, &err);
    if (!g)
        fail_msg("kh_ccguard_new: %s", err.msg);
    return g;
}

static void test_system_dirs(void **state)
{
    (void)state;
    const char *out = "ignoring nonexistent directory \"/x\"\n"
                      "#include \"...\" search starts here:\n"
                      "#include <...> search starts here:\n"
                      " /usr/lib/gcc/x86_64-linux-gnu/12/include\n"
                      " /usr/include\n"
                      " /Library/Frameworks (framework directory)\n"
                      "End of search list.\n"
                      " /not/this\n";
    char **d = kh_ccguard_sysdirs(out);
    assert_non_null(d);
    assert_string_equal(d[0], "/usr/lib/gcc/x86_64-linux-gnu/12/include");
    assert_string_equal(d[1], "/usr/include");
    assert_string_equal(d[2], "/Library/Frameworks");
    assert_null(d[3]);
    kh_ccguard_strv_free(d);
    d = kh_ccguard_sysdirs("no list here");
    assert_non_null(d);
    assert_null(d[0]);
    kh_ccguard_strv_free(d);
}

static void expect_source(const char *text, const char *want)
{
    kh_ccguard *g = guard(text);
    kh_err err;
    kh_status st = kh_ccguard_check_sources(g, &err);
    if (want && (st != KH_ECOMPILE || !strstr(err.msg, want)))
        fail_msg("'%s': want '%s', got %s '%s'", text, want, kh_status_name(st),
                 st ? err.msg : "");
    if (!want && st)
        fail_msg("'%s': want it to pass, got '%s'", text, err.msg);
    kh_ccguard_free(g);
}

static void test_directives(void **state)
{
    (void)state;
    expect_source("int a;\n#line 5 \"x.h\"\n", "cand.c:2: #line is not allowed");
    expect_source("  %: line 5\n", "#line is not allowed");
    expect_source("?\?=line 5\n", "#line is not allowed");
    expect_source("#li\\\nne 5\n", "#line is not allowed");
    expect_source("# /* c */ 12 \"/usr/include/stdio.h\" 3\n", "line markers");
    expect_source("/* a\n */ # 1 \"x\"\n", "line markers");
    expect_source("#em\\\nbed \"/etc/passwd\"\n", "#embed is not allowed");
    expect_source("int x;\n\n#  embed <f>\n", "cand.c:3: #embed");
    /* none of these is a directive */
    expect_source("const char *s = \"\\n#line 5\";\n", NULL);
    expect_source("// #line 5\n/* #line 5 */\nint x; # line 5\n", NULL);
    expect_source("#define H #\nH line 5\n", NULL); /* the preprocessor does not run it */
    expect_source("#include <a/*b.h>\n#include \"own.h\"\n", NULL);
    expect_source("#if __has_include(<x//y.h>)\n#endif\n", NULL);
    expect_source("double d = 1e+5 + 0x1p-3;\n", NULL);
}

static void test_dependencies(void **state)
{
    (void)state;
    char pre[16384], deps[16384];
    kh_ccguard *g = guard("#include <stdio.h>\n#include \"own.h\"\n#define X \"secret.h\"\n"
                          "#include X\n");
    kh_err err;
    /* the candidate's own header and a system header pass */
    snprintf(deps, sizeof deps, "cand.o: %s \\\n /usr/include/stdio.h %s\n", src, other);
    assert_int_equal(kh_ccguard_check_deps(g, deps, NULL, 0, &err), KH_OK);
    /* another file: named with the directive that read it, nothing of its text */
    snprintf(deps, sizeof deps, "x.i: %s /usr/include/stdio.h \\\n %s \\\n %s\n", src, other,
             secret);
    snprintf(pre, sizeof pre,
             "# 0 \"%s\"\n# 1 \"%s\"\n# 1 \"/usr/include/stdio.h\" 1 3 4\nint printf();\n"
             "# 2 \"%s\" 2\n# 1 \"%s\" 1\nstatic int own_h;\n# 3 \"%s\" 2\n\n"
             "# 1 \"%s\" 1\nSECRET TEXT\n# 5 \"%s\" 2\n",
             src, src, src, other, src, secret, src);
    assert_int_equal(kh_ccguard_check_deps(g, deps, pre, 0, &err), KH_ECOMPILE);
    assert_non_null(strstr(err.msg, "cand.c:4: '#include X' reads secret.h, which is not allowed"));
    assert_null(strstr(err.msg, "SECRET TEXT"));
    /* without the preprocessed text: the directive that names it */
    assert_int_equal(kh_ccguard_check_deps(g, deps, NULL, 0, &err), KH_ECOMPILE);
    assert_non_null(strstr(err.msg, "cand.c:3:"));
    assert_non_null(strstr(err.msg, "not allowed"));
    /* a header that was not found has no text (a -MG listing) */
    snprintf(deps, sizeof deps, "cand.o: %s nosuch.h\n", src);
    assert_int_equal(kh_ccguard_check_deps(g, deps, NULL, 1, &err), KH_OK);
    assert_int_equal(kh_ccguard_check_deps(g, deps, NULL, 0, &err), KH_ECOMPILE);
    /* escaped names are read as make writes them */
    char spaced[4300], esc[4400];
    snprintf(spaced, sizeof spaced, "%s/a b#$.h", dir);
    kh_test_write_file(spaced, "x\n");
    snprintf(esc, sizeof esc, "%s/a\\ b\\#$$.h", dir);
    snprintf(deps, sizeof deps, "cand.o: %s %s\n", src, esc);
    assert_int_equal(kh_ccguard_check_deps(g, deps, NULL, 0, &err), KH_ECOMPILE);
    assert_non_null(strstr(err.msg, "a b#$.h"));
    /* a list that cannot be read is not a pass */
    assert_int_equal(kh_ccguard_check_deps(g, "garbage", NULL, 0, &err), KH_ECOMPILE);
    kh_ccguard_free(g);
}

static void test_asm_outside_system_headers(void **state)
{
    (void)state;
    kh_ccguard *g = guard("int x;\n");
    kh_err err;
    char pre[8192];
    snprintf(pre, sizeof pre,
             "# 1 \"%s\"\n# 1 \"/usr/include/stdio.h\" 1 3 4\n"
             "extern int f(void) __asm__ (\"\" \"g\");\n# 2 \"%s\" 2\n"
             "const char *s = \"__asm__\"; int asm1 = 'a';\n",
             src, src);
    assert_int_equal(kh_ccguard_check_preprocessed(g, pre, strlen(pre), &err), KH_OK);
    strcat(pre, "int y;\nvoid h(void) { __asm volatile (\"nop\"); }\n");
    assert_int_equal(kh_ccguard_check_preprocessed(g, pre, strlen(pre), &err), KH_ECOMPILE);
    assert_non_null(strstr(err.msg, "cand.c:4: asm is not allowed"));
    /* a directive the compile of this text would act on */
    snprintf(pre, sizeof pre, "# 1 \"%s\"\n#pragma GCC pch_preprocess \"%s\"\n", src, secret);
    assert_int_equal(kh_ccguard_check_preprocessed(g, pre, strlen(pre), &err), KH_ECOMPILE);
    snprintf(pre, sizeof pre, "# 1 \"%s\"\n#pragma omp parallel for\n#ident \"x\"\n", src);
    assert_int_equal(kh_ccguard_check_preprocessed(g, pre, strlen(pre), &err), KH_OK);
    kh_ccguard_free(g);
}

static void test_assembly(void **state)
{
    (void)state;
    kh_err err;
    const char *ok = "\t.text\n\t.globl f\nf:\n\tret\nf.include_count:\n\t.long 0\n";
    assert_int_equal(kh_ccguard_check_assembly(ok, strlen(ok), &err), KH_OK);
    static const char *const bad[] = {"#APP\n\tnop\n#NO_APP\n", ".section x\n.incbin \"/etc/passwd\"\n",
                                      "\t.INCLUDE \"x.s\"\n", ".macro m\n.endm\n",
                                      "x: .data; .IrP a,b\n", ".incbin\"/x\""};
    for (size_t i = 0; i < KH_ARRAY_LEN(bad); i++) {
        assert_int_equal(kh_ccguard_check_assembly(bad[i], strlen(bad[i]), &err), KH_ECOMPILE);
        assert_non_null(strstr(err.msg, "not allowed"));
    }
}

static void test_log(void **state)
{
    (void)state;
    kh_ccguard *g = guard("int main(void)\n{\n    return nope;\n}\n");
    char log[16384];
    snprintf(log, sizeof log,
             "In file included from %s:1:\n"
             "%s: In function 'main':\n"
             "%s:3:12: error: 'nope' undeclared\n"
             "%s:1:1: error: expected identifier: SECRET TEXT\n"
             "/usr/include/stdio.h:10:1: note: declared here\n"
             "cc1: some warnings being treated as errors\n",
             src, src, src, secret);
    char *out = kh_ccguard_log(g, log);
    assert_non_null(out);
    assert_null(strstr(out, "SECRET"));
    assert_null(strstr(out, dir));
    assert_non_null(strstr(out, "In file included from cand.c:1:\n"));
    assert_non_null(strstr(out, "cand.c:3:12: error: 'nope' undeclared\n    3 | return nope;\n"));
    assert_non_null(strstr(out, "/usr/include/stdio.h:10:1: note: declared here\n"));
    assert_non_null(strstr(out, "cc1: some warnings"));
    free(out);
    kh_ccguard_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_system_dirs),
        cmocka_unit_test(test_directives),
        cmocka_unit_test(test_dependencies),
        cmocka_unit_test(test_asm_outside_system_headers),
        cmocka_unit_test(test_assembly),
        cmocka_unit_test(test_log),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
