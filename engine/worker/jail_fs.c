/* jail_fs.c: what the jail may reach of the file system (Landlock) and the
 * capabilities it drops, set up in the jail before its object loads (see
 * jail.h, "Host confinement"), and kh_jail_describe_fs, the same rules in
 * words for the warden.  The rest of the jail (the handshake, the seccomp
 * filter, fault descriptions) is jail.c's. */
#include "worker/jail.h"
#include "worker/jail_int.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#if defined(__has_include)
#if __has_include(<linux/landlock.h>)
#include <linux/landlock.h>
#endif
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(LANDLOCK_CREATE_RULESET_VERSION) && defined(__NR_landlock_create_ruleset)
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14) /* ABI 3 */
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15) /* ABI 5 */
#endif

/* Allow reading (and, for directories, mapping libraries as executable)
 * beneath path; a path that does not exist is skipped. */
static void fs_allow(int rs, const char *path)
{
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0)
        return;
    struct stat sb;
    __u64 acc = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_EXECUTE;
    if (fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode))
        acc |= LANDLOCK_ACCESS_FS_READ_DIR;
    struct landlock_path_beneath_attr pb = {.allowed_access = acc, .parent_fd = fd};
    (void)syscall(__NR_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &pb, 0);
    close(fd);
}
#endif

static long landlock_abi(void)
{
#if defined(LANDLOCK_CREATE_RULESET_VERSION) && defined(__NR_landlock_create_ruleset)
    return syscall(__NR_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
#else
    errno = ENOSYS;
    return -1;
#endif
}

void kh_jail_describe_fs(char *buf, size_t n)
{
    long abi = landlock_abi();
    if (abi >= 1)
        snprintf(buf, n, "Landlock ABI %ld: while loading, reads beneath the library "
                 "directories and /proc/self only; no writes", abi);
    else
        snprintf(buf, n, "no Landlock (%s): while loading, reads any file its uid may",
                 strerror(errno));
}

/* Landlock: the jail may read beneath the library directories (the dynamic
 * loader's, and LD_LIBRARY_PATH's), its own /proc/self, the CPU topology
 * and a few system files, and create, write or remove nothing, whatever its
 * uid.  0 when that holds, or when the kernel has no Landlock (the warden
 * says so: kh_jail_describe_fs); -1 when it has and the jail could not. */
int kh_jail_restrict_fs(void)
{
#if defined(LANDLOCK_CREATE_RULESET_VERSION) && defined(__NR_landlock_create_ruleset)
    long abi = landlock_abi();
    if (abi < 1)
        return 0;
    struct landlock_ruleset_attr ra = {
        .handled_access_fs =
            LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE |
            LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR |
            LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE |
            LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR |
            LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SOCK |
            LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_BLOCK |
            LANDLOCK_ACCESS_FS_MAKE_SYM | (abi >= 2 ? LANDLOCK_ACCESS_FS_REFER : 0) |
            (abi >= 3 ? LANDLOCK_ACCESS_FS_TRUNCATE : 0) |
            (abi >= 5 ? LANDLOCK_ACCESS_FS_IOCTL_DEV : 0)};
    int rs = (int)syscall(__NR_landlock_create_ruleset, &ra, sizeof ra.handled_access_fs, 0);
    if (rs < 0)
        return -1;
    static const char *const allow[] = {
        "/usr", "/lib", "/lib64", "/lib32", "/libx32", "/etc/ld.so.cache", "/etc/localtime",
        "/proc/self", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/sys/devices/system/cpu",
        "/sys/devices/system/node", "/dev/null", "/dev/zero", "/dev/urandom",
    };
    for (size_t i = 0; i < sizeof allow / sizeof allow[0]; i++)
        fs_allow(rs, allow[i]);
    const char *lp = getenv("LD_LIBRARY_PATH");
    char dir[4096];
    while (lp && *lp) {
        size_t l = strcspn(lp, ":");
        if (l && l < sizeof dir) {
            memcpy(dir, lp, l);
            dir[l] = '\0';
            fs_allow(rs, dir);
        }
        lp += l + (lp[l] == ':');
    }
    (void)prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    int r = (int)syscall(__NR_landlock_restrict_self, rs, 0);
    int e = errno;
    close(rs);
    errno = e;
    return r ? -1 : 0;
#else
    return 0;
#endif
}

/* No capability: a jail started by root keeps uid 0, but not CAP_SYS_PTRACE
 * (which opens the undumpable warden's /proc/<pid>/mem), CAP_DAC_OVERRIDE or
 * the others. */
int kh_jail_drop_capabilities(void)
{
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];
    memset(d, 0, sizeof d);
    (void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    return (int)syscall(SYS_capset, &h, d);
}
