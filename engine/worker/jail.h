/* jail.h: the confined child process that runs a host-backend candidate
 * (docs/evaluation.md, "Host confinement").
 *
 * The host worker (role_host.c) is the warden: it owns the inputs, their
 * checksums, the poisoning, every check, the captured outputs and the timer,
 * all in its own private memory.  The candidate's shared object is loaded
 * only in a jail: a fresh process image (`khlua __host-jail`, exec'd, so it
 * inherits none of the warden's memory: no seeds, no request) with an empty
 * environment, /dev/null as stdin and stdout, the worker's stderr, the
 * arena and nothing else.  Before the object is loaded (its constructors
 * run then) a seccomp-bpf allowlist is installed: no exec, no fork or clone
 * but threads, no socket, no ptrace or process_vm_*, no signal to another
 * process, no open for writing, no file creation, renaming or removal, no
 * namespaces or mounts; after it is loaded, no open at all.  A forbidden
 * call kills the jail with "khlua-fault: kind=forbidden_syscall
 * syscall=NAME" on stderr.  While it loads, what it may open for reading is
 * limited too (Landlock, where the kernel has it): the system's library
 * directories, its own /proc/self and a few system files, so a constructor
 * cannot read another process's /proc/<pid>/environ or mem, nor any other
 * file; and it holds no capability (a jail started by root would otherwise
 * read the undumpable warden's memory with CAP_SYS_PTRACE).
 *
 * The two share one memory region (the arena, a memfd mapped by both):
 * a control page and the candidate's buffers.  A call is a handshake on
 * the control page: the warden "arms" the jail (which then spins), writes
 * the slot's inputs and poisons its outputs (a timed call's only then, after
 * the cache flush), takes t0, says "go", and takes t1 when the jail says
 * "done".  The warden trusts nothing the jail writes but the armed and done
 * sequence numbers, and waits for nothing the jail says once the inputs are
 * visible to it, until "done". */
#ifndef KH_JAIL_H
#define KH_JAIL_H

#include "core/engine.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define KH_JAIL_MAX_SLOTS 16
#define KH_JAIL_MAX_TENSORS 64
#define KH_JAIL_MAX_ARGS 32
#define KH_JAIL_MAX_GUARDS (2 * KH_JAIL_MAX_SLOTS * KH_JAIL_MAX_TENSORS)

/* How an argument of the entry point is passed (role_host.c parses them). */
enum { KH_JARG_PTR, KH_JARG_I32, KH_JARG_I64, KH_JARG_U32, KH_JARG_U64, KH_JARG_F32,
       KH_JARG_F64, KH_JARG_SCALAR };
/* The dtype of a tensor passed by value (KH_JARG_SCALAR). */
enum { KH_JSCALAR_F32, KH_JSCALAR_I32, KH_JSCALAR_I64, KH_JSCALAR_BOOL };

typedef struct kh_jail_arg {
    int32_t kind, tensor, scalar;
    int64_t i;
    double f;
} kh_jail_arg;

typedef struct kh_jail_guard {
    uint64_t off, len; /* within the arena */
    char what[80];     /* "before output 'y'" */
} kh_jail_guard;

/* The control page(s) at the start of the arena. */
typedef struct kh_jail_ctl {
    /* warden -> jail */
    _Alignas(64) _Atomic uint32_t arm;
    _Alignas(64) _Atomic uint32_t go;
    _Atomic uint32_t go_sleeping;
    /* jail -> warden */
    _Alignas(64) _Atomic uint32_t state; /* 0 starting, 1 ready, 2 could not load */
    _Atomic uint32_t state_sleeping;
    _Alignas(64) _Atomic uint32_t armed;
    _Atomic uint32_t armed_sleeping;
    _Alignas(64) _Atomic uint32_t done;
    _Atomic uint32_t done_sleeping;
    _Alignas(64) uint32_t op; /* with arm: 1 call, 2 quit */
    uint32_t slot;
    /* the layout, written before the jail starts */
    char symbol[256];
    double cpu_s; /* CPU-time limit of the jail (0: none) */
    uint32_t nslots, nt, na, nguards;
    uint64_t data_off[KH_JAIL_MAX_SLOTS][KH_JAIL_MAX_TENSORS];
    kh_jail_arg a[KH_JAIL_MAX_ARGS];
    kh_jail_guard guards[KH_JAIL_MAX_GUARDS];
    char msg[512]; /* why the object could not be loaded */
} kh_jail_ctl;

typedef struct kh_jail {
    int arena_fd;
    unsigned char *arena; /* the warden's mapping: ctl, then data */
    size_t arena_len, ctl_len;
    kh_jail_ctl *ctl;
    pid_t pid;
    uint32_t seq;
    char exe[4096];
} kh_jail;

/* Set up the warden (the host worker): remembers its executable, makes
 * itself undumpable (a jail cannot read its memory through /proc). */
kh_status kh_jail_warden_init(kh_jail *j, kh_err *err);

/* A fresh arena of ctl_len + data_bytes bytes, zeroed; j->arena + j->ctl_len
 * is the data region.  The caller fills j->ctl's layout. */
kh_status kh_jail_arena(kh_jail *j, size_t data_bytes, kh_err *err);

/* Start a jail on the arena that loads the shared object so[0..n) and
 * resolves j->ctl->symbol.  KH_ECOMPILE when it cannot be loaded (the
 * dynamic loader's message).  A jail that dies never returns here: see
 * kh_jail_call. */
kh_status kh_jail_start(kh_jail *j, const unsigned char *so, size_t n, kh_err *err);

/* One call on slot: kh_jail_arm before the timed window (the jail wakes and
 * spins; it reads its arguments after "go", so the slot's inputs may be
 * written between the two, and must be: the warden waits for the jail's
 * "armed", which a jail could hold back while it works on inputs it can
 * already see), kh_jail_go inside it (returns when the call has returned).
 * When the jail dies, the warden dies the same way (the same signal, or the
 * same exit code), after the jail's own description of the fault on stderr:
 * the supervisor and the verdict see what they would have seen had the
 * candidate run in the worker itself. */
void kh_jail_arm(kh_jail *j, uint32_t slot);
void kh_jail_go(kh_jail *j);

/* What a jail may read while its object loads, in words ("Landlock ABI 7:
 * ...", or why there is no such limit on this kernel). */
void kh_jail_describe_fs(char *buf, size_t n);

/* Stop the jail (asked, then killed), reap it; the arena stays. */
void kh_jail_stop(kh_jail *j);
/* Stop the jail and release the arena. */
void kh_jail_free(kh_jail *j);

/* The jail's process: `khlua __host-jail` (khlua.c calls it before anything
 * else). */
int kh_jail_main(void);

#endif
