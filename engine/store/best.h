/* best.h: a stored kernel as a FlashInfer-Bench Solution.  A run's best
 * kernel (its incumbent: the candidate it promoted last, else the seed it
 * started from) or any candidate record becomes a Solution JSON with khlua's
 * launch manifest under spec.khlua and its sources; a run's also carries
 * its figures (score, the promotion's gate figures and evidence ids).  What
 * a run did with the candidate (promoted in round R, proposed by model M)
 * comes from the run's records: the candidate record holds content only
 * (candidate.h).  One
 * owner for this, shared by `khlua best` and `khlua export solution`.  Reads
 * the store; writes nothing. */
#ifndef KH_BEST_H
#define KH_BEST_H

#include "core/kh.h"
#include "store/store.h"

#include <jansson.h>

typedef struct kh_best {
    char run[KH_STORE_ID_MAX];       /* the run; "" for a candidate named on its own */
    char candidate[KH_STORE_ID_MAX]; /* the candidate record */
    /* {name, definition, author, description, spec {language, target_hardware,
     * entry_point, destination_passing_style, khlua}, sources [{path, content}]}:
     * a run's is named RUN_rR (promoted in round R) or RUN_seed, authored by
     * the model that proposed it; the sources under their own paths (a record
     * from before candidate.h: its one source as kernel.cu or kernel.c) */
    json_t *solution;
    /* a run's {run, candidate, origin, score, metrics, promotion}; NULL for a
     * candidate named on its own */
    json_t *figures;
} kh_best;

/* The incumbent of run ("last": the newest run in the store).  Errors name
 * what is wrong: "run-x: no such run in the store (khlua store ls --type run
 * lists them)" (KH_ENOTFOUND), "last: the store holds no run", "X: not a run
 * record (a candidate)", "X: the run has no incumbent yet (...)", a source
 * that is not UTF-8 text.  On success free with kh_best_free. */
kh_status kh_best_of_run(kh_store *s, const char *run, kh_best *out, kh_err *err);
/* The candidate record cand as a Solution (figures NULL). */
kh_status kh_best_of_candidate(kh_store *s, const char *cand, kh_best *out, kh_err *err);
void kh_best_free(kh_best *b);

#endif
