/* worker_roles.c: the table of worker roles `khlua worker --role` knows.
 * Each role is defined in the module that owns its work. */
#include "worker/worker.h"

extern const kh_worker_role kh_role_compile;
extern const kh_worker_role kh_role_echo;
extern const kh_worker_role kh_role_gpu;
extern const kh_worker_role kh_role_profile;
extern const kh_worker_role kh_role_host;

const kh_worker_role *const kh_worker_roles[] = {
    &kh_role_compile,
    &kh_role_echo,
    &kh_role_gpu,
    &kh_role_profile,
    &kh_role_host,
    NULL,
};
