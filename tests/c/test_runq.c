/* test_runq.c: run-queue waits for the host timing's contended calls
 * (engine/worker/runq.h).  A child process stands in for a jail: one thread
 * spinning and one asleep on a pipe.  With this process held to two CPUs,
 * the first reading (every thread new, so counted as running) gives no
 * figure; the next counts only the spinning thread and gives the sum of the
 * waits; once the sleeper is woken and spins too, two running threads and
 * the caller outnumber the CPUs and there is no figure again.  A process
 * that does not exist gives none. */
#include "kh_test.h"

#include "worker/runq.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int wake_fd;

static void spin(void)
{
    volatile unsigned long n = 0;
    for (;;)
        n++;
}

static void *sleeper(void *arg)
{
    (void)arg;
    char c;
    if (read(wake_fd, &c, 1) == 1)
        spin();
    return NULL;
}

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_sleeping_threads_do_not_count(void **state)
{
    (void)state;
    cpu_set_t all, two;
    assert_int_equal(sched_getaffinity(0, sizeof all, &all), 0);
    if (CPU_COUNT(&all) < 2)
        skip();
    CPU_ZERO(&two);
    for (int c = 0, k = 0; c < CPU_SETSIZE && k < 2; c++)
        if (CPU_ISSET(c, &all)) {
            CPU_SET(c, &two);
            k++;
        }
    assert_int_equal(sched_setaffinity(0, sizeof two, &two), 0);
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        close(p[1]);
        wake_fd = p[0];
        pthread_t t;
        if (pthread_create(&t, NULL, sleeper, NULL))
            _exit(1);
        spin();
    }
    close(p[0]);
    pause_ms(100); /* the child's second thread is up and asleep */
    kh_runq q = {.n = 0};
    assert_true(kh_runq_waited(&q, child) == UINT64_MAX); /* both new: both counted */
    assert_int_equal(q.n, 2);
    pause_ms(100);
    uint64_t w1 = kh_runq_waited(&q, child); /* only the spinning thread ran */
    assert_true(w1 != UINT64_MAX);
    pause_ms(100);
    uint64_t w2 = kh_runq_waited(&q, child);
    assert_true(w2 != UINT64_MAX);
    assert_true(w2 >= w1); /* waits only grow */
    assert_int_equal(write(p[1], "x", 1), 1); /* the sleeper wakes and spins */
    pause_ms(100);
    assert_true(kh_runq_waited(&q, child) == UINT64_MAX); /* two running + the caller > 2 */
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    close(p[1]);
    assert_true(kh_runq_waited(&q, child) == UINT64_MAX); /* gone */
    assert_int_equal(sched_setaffinity(0, sizeof all, &all), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sleeping_threads_do_not_count),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
