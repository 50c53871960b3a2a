/* jail_int.h: what jail.c takes from jail_fs.c, for the jail's own process
 * (kh_jail_main) before it loads the candidate's object. */
#ifndef KH_JAIL_INT_H
#define KH_JAIL_INT_H

/* Landlock: the jail may read beneath the library directories, its own
 * /proc/self and a few system files, and write nothing.  0 when that holds
 * or the kernel has no Landlock; -1 (errno set) when it has and the jail
 * could not. */
int kh_jail_restrict_fs(void);

/* Drop every capability (ambient ones too); capset's result. */
int kh_jail_drop_capabilities(void);

#endif
