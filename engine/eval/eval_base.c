/* eval_base.c: the bottom of engine/eval/: the options' defaults
 * (kh_eval_opts_default, eval.h) and the small helpers every eval_*.c unit
 * uses.  It calls none of them, so the units' calls point one way: eval.c
 * (the API and a run's driver) on top, down through the stages to here. */
#include "eval/eval_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

char *eval_dupstr(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

void eval_hex128(const void *data, size_t len, char out[33])
{
    XXH128_hash_t h = XXH3_128bits(data, len);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, h);
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", c.digest[i]);
}

void kh_eval_opts_default(kh_eval_opts *o)
{
    memset(o, 0, sizeof *o);
    o->protocol = "official";
    o->timing = 1;
    o->trials = 3;
    o->seed = KH_EVAL_SEED_RANDOM;
    o->warmup = o->iters = o->timing_trials = -1;
    o->rotate_inputs = 3;
    o->verify_timed_fraction = 1.0;
    o->cold = 1;
    o->deterministic = -1;
    o->deadline_s = 300;
    o->atol = o->rtol = o->required_matched_ratio = -1;
    o->time_reference = 1;
    /* where the reference runs on the GPU too, judge there (docs/evaluation.md,
     * "Verification on the device"); the default since 2026-12-07 */
    o->device_compare = 1;
    o->record = 1;
    o->round_index = -1;
}
