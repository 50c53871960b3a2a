/* runq.h: how long the warden's thread and a jail's threads waited on the
 * run queue (schedstat's run_delay), for hostbench's retakes of contended
 * timed calls (hostbench.h waited_ns; docs/evaluation.md, "Host timing"). */
#ifndef KH_RUNQ_H
#define KH_RUNQ_H

#include <stdint.h>
#include <sys/types.h>

#define KH_RUNQ_MAX_THREADS 64

/* The jail's threads and their CPU time at the last reading. */
typedef struct kh_runq {
    pid_t tid[KH_RUNQ_MAX_THREADS];
    uint64_t exec_ns[KH_RUNQ_MAX_THREADS];
    int n;
} kh_runq;

/* The run-queue wait so far, in ns, of the calling thread and of every
 * thread of process jail, summed; UINT64_MAX when the kernel does not keep
 * it, or when the wait may be the candidate's own doing: the jail's threads
 * that ran since the last reading (a thread not seen before counts as
 * running) and the calling thread outnumber the CPUs it may use.  A thread
 * that only sleeps (AddressSanitizer's background thread, a pool's idle
 * worker) competes for no CPU and does not count. */
uint64_t kh_runq_waited(kh_runq *q, pid_t jail);

#endif
