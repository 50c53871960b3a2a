/* runq.c: run-queue waits from /proc (runq.h). */
#include "worker/runq.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* "exec_ns wait_ns slices" from a schedstat file; -1 when it cannot be read */
static int schedstat(const char *path, uint64_t *exec_ns, uint64_t *wait_ns)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char buf[128];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    unsigned long long e, w;
    if (sscanf(buf, "%llu %llu", &e, &w) != 2)
        return -1;
    *exec_ns = e;
    *wait_ns = w;
    return 0;
}

/* Did thread tid run since the last reading (or is it new)? */
static int ran(const kh_runq *q, pid_t tid, uint64_t exec_ns)
{
    for (int i = 0; i < q->n; i++)
        if (q->tid[i] == tid)
            return exec_ns > q->exec_ns[i];
    return 1;
}

uint64_t kh_runq_waited(kh_runq *q, pid_t jail)
{
    cpu_set_t cpus;
    long ncpu = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus)
                                                               : sysconf(_SC_NPROCESSORS_ONLN);
    char path[96];
    uint64_t sum = 0, ex, wt;
    snprintf(path, sizeof path, "/proc/self/task/%ld/schedstat", (long)gettid());
    if (schedstat(path, &ex, &wt))
        return UINT64_MAX;
    sum += wt;
    snprintf(path, sizeof path, "/proc/%ld/task", (long)jail);
    DIR *d = opendir(path);
    if (!d)
        return UINT64_MAX;
    kh_runq next = {.n = 0};
    long threads = 0, running = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "/proc/%ld/task/%.20s/schedstat", (long)jail, de->d_name);
        if (schedstat(path, &ex, &wt)) /* a thread may end meanwhile */
            continue;
        pid_t tid = (pid_t)atol(de->d_name);
        sum += wt;
        threads++;
        running += ran(q, tid, ex);
        if (next.n < KH_RUNQ_MAX_THREADS) {
            next.tid[next.n] = tid;
            next.exec_ns[next.n++] = ex;
        }
    }
    closedir(d);
    *q = next;
    return threads && running + 1 <= ncpu ? sum : UINT64_MAX;
}
