/* supervisor_launch.c: a worker's command line and environment from a launch
 * template (supervisor.h, kh_wproc_opts.launch): the presets (local, srun,
 * ssh), the placeholders {exe} {role} {index} {gpu} {host}, and {env}, one
 * argument per environment entry.  Starting the process and everything after
 * is supervisor.c's. */
#include "worker/supervisor.h"
#include "worker/supervisor_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* s with {exe} {role} {index} {gpu} {host} filled, into tok[n]. */
static void expand(const kh_wproc_opts *o, const char *exe, const char *s, size_t len, char *tok,
                   size_t n)
{
    char idx[32];
    snprintf(idx, sizeof idx, "%d", o->index);
    const char *gpu = o->gpu ? o->gpu : "", *host = o->host ? o->host : "localhost";
    size_t tl = 0;
    for (const char *p = s; p < s + len && tl < n - 1;) {
        const char *rep = NULL;
        size_t skip = 0;
        if (!strncmp(p, "{exe}", 5)) { rep = exe; skip = 5; }
        else if (!strncmp(p, "{role}", 6)) { rep = o->role; skip = 6; }
        else if (!strncmp(p, "{index}", 7)) { rep = idx; skip = 7; }
        else if (!strncmp(p, "{gpu}", 5)) { rep = gpu; skip = 5; }
        else if (!strncmp(p, "{host}", 6)) { rep = host; skip = 6; }
        if (rep) {
            tl += (size_t)snprintf(tok + tl, n - tl, "%s", rep);
            if (tl >= n)
                tl = n - 1;
            p += skip;
        } else {
            tok[tl++] = *p++;
        }
    }
    tok[tl] = '\0';
}

/* The env entries with placeholders filled; entries whose value is empty
 * (CUDA_VISIBLE_DEVICES={gpu} on an unplaced slot) are left out.  A
 * malloc'ed NULL-terminated array of malloc'ed strings; NULL when out of
 * memory. */
char **kh_wproc_build_env(const kh_wproc_opts *o, const char *exe, int remote)
{
    size_t n = 0;
    while (o->env && o->env[n])
        n++;
    char **env = calloc(n + 2, sizeof *env);
    size_t k = 0;
    for (size_t i = 0; env && i < n; i++) {
        char buf[2048];
        expand(o, exe, o->env[i], strlen(o->env[i]), buf, sizeof buf);
        const char *eq = strchr(buf, '=');
        if (!eq || !eq[1])
            continue;
        if (!(env[k++] = kh_strdup(buf))) {
            for (size_t j = 0; j < k; j++)
                free(env[j]);
            free(env);
            return NULL;
        }
    }
    /* srun's slurmstepd forwards output at newlines: the worker adds one
     * after each frame (wire.h) */
    if (env && remote && !(env[k++] = kh_strdup("KHLUA_WIRE_NEWLINE=1"))) {
        for (size_t j = 0; j < k; j++)
            free(env[j]);
        free(env);
        return NULL;
    }
    return env;
}

/* Split the template into argv with placeholders filled.  Returns a
 * malloc'ed array of malloc'ed strings (NULL-terminated). */
char **kh_wproc_build_argv(const kh_wproc_opts *o, const char *exe, char *const *env)
{
    const char *tpl = o->launch && o->launch[0] ? o->launch : KH_LAUNCH_LOCAL;
    size_t cap = 8, n = 0;
    char **argv = calloc(cap, sizeof *argv);
    const char *s = tpl;
    while (argv && *s) {
        while (*s == ' ' || *s == '\t')
            s++;
        if (!*s)
            break;
        const char *e = s;
        while (*e && *e != ' ' && *e != '\t')
            e++;
        if (e - s == 5 && !strncmp(s, "{env}", 5)) {
            /* one argument per env entry */
            for (size_t k = 0; env && env[k] && argv; k++) {
                if (n + 2 > cap) {
                    cap *= 2;
                    char **na = realloc(argv, cap * sizeof *na);
                    if (!na)
                        goto oom;
                    argv = na;
                }
                argv[n++] = kh_strdup(env[k]);
                argv[n] = NULL;
            }
            s = e;
            continue;
        }
        /* expand placeholders inside the token */
        char tok[1024];
        expand(o, exe, s, (size_t)(e - s), tok, sizeof tok);
        if (n + 2 > cap) {
            cap *= 2;
            char **na = realloc(argv, cap * sizeof *na);
            if (!na)
                goto oom;
            argv = na;
        }
        argv[n++] = kh_strdup(tok);
        argv[n] = NULL;
        s = e;
    }
    for (size_t k = 0; argv && k < n; k++)
        if (!argv[k])
            goto oom;
    return argv;
oom:
    for (size_t k = 0; argv && k < n; k++)
        free(argv[k]);
    free(argv);
    return NULL;
}

void kh_wproc_free_argv(char **argv)
{
    for (size_t i = 0; argv && argv[i]; i++)
        free(argv[i]);
    free(argv);
}

/* ---- launch presets ------------------------------------------------------- */
#define LAUNCH_SRUN "srun --nodes=1 --ntasks=1 --kill-on-bad-exit=1 --quiet"
#define LAUNCH_TAIL " {exe} worker --role {role}"

const char *kh_launch_kind(const char *spec)
{
    if (!spec || !*spec || !strcmp(spec, "local"))
        return "local";
    if (!strcmp(spec, "srun") || !strcmp(spec, "ssh"))
        return spec;
    return "template";
}

kh_status kh_launch_template(const char *spec, const char *role, const char **out, kh_err *err)
{
    int gpu = role && (!strcmp(role, "gpu") || !strcmp(role, "profile"));
    const char *k = kh_launch_kind(spec);
    if (!strcmp(k, "local"))
        *out = KH_LAUNCH_LOCAL;
    else if (!strcmp(k, "srun"))
        *out = gpu ? LAUNCH_SRUN " --gres=gpu:1" LAUNCH_TAIL : LAUNCH_SRUN LAUNCH_TAIL;
    else if (!strcmp(k, "ssh"))
        *out = "ssh -T -o BatchMode=yes {host} env {env}" LAUNCH_TAIL;
    else if (strstr(spec, "{exe}") || strstr(spec, " worker "))
        *out = spec;
    else
        return kh_err_set(err, KH_EINVAL,
                          "launch '%s' is neither a preset (local, srun, ssh) nor a template "
                          "(a command line with {exe}, e.g. \"srun -N1 {exe} worker --role "
                          "{role}\")", spec);
    return KH_OK;
}
