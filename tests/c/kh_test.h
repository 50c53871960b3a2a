/* kh_test.h: helpers shared by the cmocka tests (tests/c/test_*.c): running
 * the khlua binary under test, temporary directories, GPU presence.  Each
 * test file includes this after cmocka's prerequisites. */
#ifndef KH_TEST_H
#define KH_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/proc.h"

#define KH_TEST_SKIP 77 /* ctest's SKIP_RETURN_CODE: "skipped", never "passed" */

/* The khlua binary under test ($KHLUA_BIN, set by ctest). */
const char *kh_test_khlua(void);
/* The source tree ($KH_SOURCE_DIR, set by ctest). */
const char *kh_test_source_dir(void);

/* Run khlua with the given arguments (NULL-terminated), stdout and stderr
 * captured together.  Fails the test if it cannot start. */
void kh_test_run_khlua(kh_child_result *res, double timeout_s, ...);

/* A fresh directory under $TMPDIR; removed by kh_test_rmtree.  Caller frees. */
char *kh_test_tmpdir(void);
void kh_test_rmtree(const char *path);

/* 1 if a CUDA GPU is usable (probed in a child process). */
int kh_test_have_gpu(void);

/* Write a file; fails the test on error. */
void kh_test_write_file(const char *path, const char *text);

/* An output and a reference of n elements of dtype t for the comparison's
 * tests, from seed: the reference random bit patterns (finite_only: random
 * finite values), the output a copy with about a tenth of its elements
 * moved a few codes and a hundredth replaced by other random ones (NaN,
 * inf and subnormals among them unless finite_only). */
struct kh_tensor;
void kh_test_compare_pair(int t, uint64_t n, uint64_t seed, int finite_only,
                          struct kh_tensor **out, struct kh_tensor **ref);

/* Compile CUDA source to a cubin with NVRTC for arch (e.g. "sm_90a");
 * returns malloc'ed bytes or fails the test with the log. */
unsigned char *kh_test_nvrtc_cubin(const char *src, const char *arch, size_t *len);
#endif
