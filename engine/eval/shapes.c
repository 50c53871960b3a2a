/* shapes.c: draws admissible shapes that are not in a definition's workload
 * list (shapes.h; docs/evaluation.md, "Shapes at promotion").  It owns four
 * decisions: which listed workloads may serve as templates, which var axes
 * may change, the candidate values of each such axis, and whether a tuple of
 * axis values is admissible (every constraint holds, the size bound holds,
 * no listed workload has it).  Evaluating the drawn workloads is the
 * caller's (eval.c, the promotion gate); nothing here runs a kernel. */
#include "eval/shapes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* ---- seeded choices ------------------------------------------------------------ */

/* splitmix64's output function: a bijection that spreads every input bit. */
static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* One number for the choice named (a, b, c) under seed: independent of every
 * other choice, so adding a gap or a kind never moves the others' values. */
static uint64_t choose(uint64_t seed, uint64_t a, uint64_t b, uint64_t c)
{
    return mix64(seed + mix64(a + mix64(b + mix64(c + 0x6b686c7561ULL))));
}

/* ---- candidate values of one axis ------------------------------------------------ */

/* The kinds of candidate, in the order a round of the interleave takes them
 * (docs/evaluation.md lists them with examples). */
enum {
    K_EDGE,     /* 1, just below the smallest listed, just above the largest */
    K_PRIME,    /* a prime strictly inside a gap */
    K_ODD,      /* an odd value strictly inside a gap */
    K_UNALIGN8, /* even but not a multiple of 8, inside a gap */
    K_UNALIGN32,/* a multiple of 8 but not of 32, inside a gap */
    K_COUNT
};

typedef struct vlist {
    int64_t *v;
    size_t n, cap;
} vlist;

static int vl_push(vlist *l, int64_t x)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        int64_t *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return 0;
}

static int vl_has(const vlist *l, int64_t x)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i] == x)
            return 1;
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int is_prime(int64_t v)
{
    if (v < 2)
        return 0;
    if (v % 2 == 0)
        return v == 2;
    for (int64_t i = 3; i <= v / i; i += 2)
        if (v % i == 0)
            return 0;
    return 1;
}

static int want(int kind, int64_t v)
{
    switch (kind) {
    case K_PRIME: return is_prime(v);
    case K_ODD: return v % 2 != 0;
    case K_UNALIGN8: return v % 2 == 0 && v % 8 != 0;
    default: return v % 8 == 0 && v % 32 != 0;
    }
}

/* A value of the kind strictly between lo and hi, looked for from a seeded
 * start upwards, then wrapping round from lo; 0 when there is none within
 * the first 4096 values looked at (prime gaps this low are far shorter).
 * With log_start the start's offset in the gap is log-uniform, not uniform:
 * in the gap from 1 up to the smallest listed value, small sizes (where a
 * kernel's tiling assumptions break) are as likely as large ones per
 * doubling. */
static int64_t in_gap(int kind, int64_t lo, int64_t hi, uint64_t r, int log_start)
{
    int64_t width = hi - lo - 1;
    if (width < 1)
        return 0;
    int64_t off = (int64_t)(r % (uint64_t)width);
    if (log_start) {
        double u = (double)(r >> 11) * 0x1p-53; /* [0, 1) */
        off = (int64_t)floor(exp(u * log((double)width)));
        off = off >= 1 ? off - 1 : 0;
        if (off >= width)
            off = width - 1;
    }
    int64_t start = lo + 1 + off;
    for (int64_t k = 0; k < width && k < 4096; k++) {
        int64_t v = start + k;
        if (v >= hi)
            v -= width;
        if (want(kind, v))
            return v;
    }
    return 0;
}

static void shuffle(vlist *l, uint64_t seed, uint64_t axis, uint64_t kind)
{
    for (size_t i = l->n; i > 1; i--) {
        size_t j = (size_t)(choose(seed, axis, kind, 1000000 + i) % i);
        int64_t t = l->v[i - 1];
        l->v[i - 1] = l->v[j];
        l->v[j] = t;
    }
}

/* The candidates of axis ai in the order they are tried: each kind's values
 * shuffled by the seed, then interleaved one of each kind per round, so the
 * first few drawn shapes already differ in kind.  listed: the axis's sorted
 * distinct listed values (n >= 1).  None is listed or below 1. */
static int axis_candidates(const int64_t *listed, size_t n, uint64_t seed, size_t ai, vlist *out)
{
    vlist kinds[K_COUNT] = {{0}};
    int64_t lo = listed[0], hi = listed[n - 1];
    int rc = 0;
    int64_t edges[] = {1, lo - 1, hi < INT64_MAX - 2 ? hi + 1 : 0, hi < INT64_MAX - 2 ? hi + 2 : 0};
    for (size_t i = 0; i < KH_ARRAY_LEN(edges) && !rc; i++)
        if (edges[i] >= 1 && !vl_has(&kinds[K_EDGE], edges[i]))
            rc = vl_push(&kinds[K_EDGE], edges[i]);
    /* gaps: below the smallest (from 1), between neighbours, and above the
     * largest by a quarter (the size bound rejects what does not fit) */
    int64_t above = hi > INT64_MAX / 2 ? hi : hi + hi / 4 + 1;
    for (size_t g = 0; g <= n && !rc; g++) {
        int64_t a = g == 0 ? 1 : listed[g - 1];
        int64_t b = g == n ? above + 1 : listed[g];
        for (int k = K_PRIME; k < K_COUNT && !rc; k++) {
            int64_t v = in_gap(k, a, b, choose(seed, ai, (uint64_t)k, g), g == 0);
            if (v >= 1 && !vl_has(&kinds[k], v))
                rc = vl_push(&kinds[k], v);
        }
    }
    size_t most = 0;
    for (int k = 0; k < K_COUNT; k++) {
        shuffle(&kinds[k], seed, ai, (uint64_t)k);
        most = kinds[k].n > most ? kinds[k].n : most;
    }
    /* the size 1 always comes first (where the constraints admit it): the
     * smallest shape is where an assumption of a whole tile, a full warp or a
     * multiple of anything breaks, and a draw must not leave it out */
    for (size_t i = 1; i < kinds[K_EDGE].n; i++)
        if (kinds[K_EDGE].v[i] == 1) {
            kinds[K_EDGE].v[i] = kinds[K_EDGE].v[0];
            kinds[K_EDGE].v[0] = 1;
        }
    for (size_t r = 0; r < most && !rc; r++)
        for (int k = 0; k < K_COUNT && !rc; k++)
            if (r < kinds[k].n) {
                int64_t v = kinds[k].v[r];
                if (!bsearch(&v, listed, n, sizeof *listed, cmp_i64) && !vl_has(out, v))
                    rc = vl_push(out, v);
            }
    for (int k = 0; k < K_COUNT; k++)
        free(kinds[k].v);
    return rc;
}

/* ---- which var axes may change ----------------------------------------------------- */

/* Axis names of the index-tensor family (paged KV caches, ragged batches):
 * their values must agree with tensor contents that a reshape would not
 * change, so such an axis stays as listed. */
static const char *const INDEX_HINTS[] = {"page", "indptr", "indices", "seqlens", "seq_lens"};

static int is_index_dtype(const char *dtype)
{
    return dtype && (!strcmp(dtype, "int16") || !strcmp(dtype, "int32") ||
                     !strcmp(dtype, "int64"));
}

static int tensor_has_axis(const kh_task_tensor *t, size_t ai)
{
    for (size_t k = 0; t->valid && k < t->rank; k++)
        if (t->dims[k] == ai)
            return 1;
    return 0;
}

static const kh_task_tensor *tensor_named(const kh_task_def *d, const char *name)
{
    for (size_t i = 0; i < d->ninputs + d->noutputs; i++) {
        const kh_task_tensor *t = i < d->ninputs ? &d->inputs[i] : &d->outputs[i - d->ninputs];
        if (!strcmp(t->name, name))
            return t;
    }
    return NULL;
}

/* 1 if constraint expression e mentions axis ai: by name, through a shape,
 * or through the data of a tensor it sizes. */
static int expr_touches(const kh_task_def *d, const kh_expr *e, size_t ai)
{
    for (size_t k = 0; k < kh_expr_nvars(e); k++) {
        const kh_expr_var *x = kh_expr_var_at(e, k);
        if (x->kind == KH_EXPR_AXIS) {
            if (kh_task_axis_index(d, x->name) == (int)ai)
                return 1;
            continue;
        }
        const kh_task_tensor *t = tensor_named(d, x->name);
        if (!t || !t->valid)
            return 1; /* cannot tell what it reads: assume the worst */
        if (x->kind == KH_EXPR_DATA && tensor_has_axis(t, ai))
            return 1;
        if (x->kind == KH_EXPR_SHAPE) {
            int64_t i = x->index < 0 ? x->index + (int64_t)t->rank : x->index;
            if (i < 0 || i >= (int64_t)t->rank || t->dims[i] == ai)
                return 1;
        }
    }
    return 0;
}

/* Why var axis ai must keep its listed value, into why; 0 when it may change. */
static int frozen(const kh_task_def *d, size_t ai, char *why, size_t n)
{
    for (size_t i = 0; i < d->nconstraints; i++) {
        const kh_task_constraint *c = &d->constraints[i];
        if (!c->expr) {
            snprintf(why, n, "constraint '%s' does not parse", c->text);
            return 1;
        }
        if (kh_expr_needs_data(c->expr) && expr_touches(d, c->expr, ai)) {
            snprintf(why, n, "in constraint '%s', which reads tensor data", c->text);
            return 1;
        }
    }
    for (size_t i = 0; i < d->ninputs; i++)
        if (is_index_dtype(d->inputs[i].dtype) && tensor_has_axis(&d->inputs[i], ai)) {
            snprintf(why, n, "sizes the %s input '%s'", d->inputs[i].dtype, d->inputs[i].name);
            return 1;
        }
    for (size_t i = 0; i < KH_ARRAY_LEN(INDEX_HINTS); i++)
        if (strstr(d->axes[ai].name, INDEX_HINTS[i])) {
            snprintf(why, n, "an index-style axis ('%s')", INDEX_HINTS[i]);
            return 1;
        }
    return 0;
}

/* ---- templates and admissibility --------------------------------------------------- */

static int is_listed_of(const kh_task_def *d, const kh_task_workload *w)
{
    return w && w->definition && !strcmp(w->definition, d->name) && w->axes_ok && w->axes &&
           w->uuid && json_is_object(w->json);
}

/* 1 if every input of w is random or scalar (an absent one is random, as
 * the evaluator makes it); else 0 and the first input that is not. */
static int reshapable(const kh_task_def *d, const kh_task_workload *w, const char **bad)
{
    json_t *ins = json_object_get(w->json, "inputs");
    for (size_t i = 0; i < d->ninputs; i++) {
        json_t *in = json_object_get(ins, d->inputs[i].name);
        const char *type = json_string_value(json_object_get(in, "type"));
        if (in && (!type || (strcmp(type, "random") && strcmp(type, "scalar")))) {
            *bad = d->inputs[i].name;
            return 0;
        }
    }
    return 1;
}

/* Tuples already taken (listed or drawn): open addressing over XXH3 of the
 * values, so a check costs the same however long the workload list is. */
typedef struct tupset {
    size_t naxes, n, cap; /* cap: a power of two, at least twice the most entries */
    int64_t *vals;        /* n tuples of naxes values */
    size_t *slot;         /* cap entries: index + 1, 0 empty */
} tupset;

static size_t ts_pos(const tupset *s, const int64_t *t, int *found)
{
    size_t h = (size_t)XXH3_64bits(t, s->naxes * sizeof *t) & (s->cap - 1);
    for (;; h = (h + 1) & (s->cap - 1)) {
        if (!s->slot[h] ||
            !memcmp(&s->vals[(s->slot[h] - 1) * s->naxes], t, s->naxes * sizeof *t)) {
            *found = s->slot[h] != 0;
            return h;
        }
    }
}

static int ts_has(const tupset *s, const int64_t *t)
{
    int found;
    ts_pos(s, t, &found);
    return found;
}

/* The caller sized the set for every tuple it adds. */
static void ts_add(tupset *s, const int64_t *t)
{
    int found;
    size_t h = ts_pos(s, t, &found);
    if (found)
        return;
    memcpy(&s->vals[s->n * s->naxes], t, s->naxes * sizeof *t);
    s->slot[h] = ++s->n;
}

typedef struct tally {
    size_t tried, listed, constraint, size;
} tally;

/* 1 if axes satisfy every constraint that reads no data (those that do
 * mention frozen axes only, which keep the template's values). */
static int constraints_hold(const kh_task_def *d, const int64_t *axes)
{
    for (size_t i = 0; i < d->nconstraints; i++) {
        const kh_expr *e = d->constraints[i].expr;
        int64_t r = 0;
        kh_err err;
        if (e && !kh_expr_needs_data(e) && (kh_task_eval(d, axes, e, NULL, NULL, &r, &err) || !r))
            return 0;
    }
    return 1;
}

/* ---- the drawn workloads ------------------------------------------------------------- */

/* "shape-" + 16 hex digits of XXH3 over the definition name, every axis's
 * name and value, and the template's inputs entries: two shapes share a uuid
 * (and so the reference outputs cached under it) only when they would get
 * the same inputs. */
static void shape_uuid(const kh_task_def *d, const int64_t *axes, const char *inputs_json,
                       char out[23])
{
    XXH3_state_t *h = XXH3_createState();
    uint64_t x = 0;
    if (h) {
        XXH3_64bits_reset(h);
        XXH3_64bits_update(h, "khlua-shape-1", 14);
        XXH3_64bits_update(h, d->name, strlen(d->name) + 1);
        for (size_t i = 0; i < d->naxes; i++) {
            char buf[64];
            int len = snprintf(buf, sizeof buf, "=%lld", (long long)axes[i]);
            XXH3_64bits_update(h, d->axes[i].name, strlen(d->axes[i].name));
            XXH3_64bits_update(h, buf, (size_t)len + 1);
        }
        XXH3_64bits_update(h, inputs_json, strlen(inputs_json));
        x = XXH3_64bits_digest(h);
        XXH3_freeState(h);
    }
    snprintf(out, 23, "shape-%016llx", (unsigned long long)x);
}

static void wl_clear(kh_task_workload *w)
{
    free(w->definition);
    free(w->uuid);
    free(w->file);
    free(w->axes);
    json_decref(w->json);
    json_decref(w->record);
}

/* w: zeroed; filled as shapes.h describes. */
static kh_status make_workload(const kh_task_def *d, const kh_task_workload *t,
                               const int64_t *axes, kh_task_workload *w, kh_err *err)
{
    char *inj = json_dumps(json_object_get(t->json, "inputs"),
                           JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    char uuid[23];
    shape_uuid(d, axes, inj ? inj : "", uuid);
    free(inj);
    w->def = d;
    w->definition = kh_strdup(d->name);
    w->uuid = kh_strdup(uuid);
    w->file = kh_strdup(t->file);
    w->line = t->line;
    w->seq = t->seq;
    w->axes_ok = 1;
    w->axes = malloc((d->naxes + 1) * sizeof *w->axes);
    w->json = json_deep_copy(t->json);
    json_t *ax = json_object();
    int bad = !w->definition || !w->uuid || (t->file && !w->file) || !w->axes || !w->json || !ax;
    for (size_t i = 0; !bad && i < d->naxes; i++) {
        w->axes[i] = axes[i];
        if (!d->axes[i].is_const)
            bad = json_object_set_new(ax, d->axes[i].name, json_integer(axes[i])) != 0;
    }
    if (!bad)
        bad = json_object_set_new(w->json, "uuid", json_string(uuid)) ||
              json_object_set(w->json, "axes", ax);
    json_decref(ax);
    if (!bad)
        bad = !(w->record = json_pack("{s:s, s:n, s:O, s:n, s:{s:s}}", "definition", d->name,
                                      "solution", "workload", w->json, "evaluation", "khlua",
                                      "shape_of", t->uuid));
    if (bad) {
        wl_clear(w);
        memset(w, 0, sizeof *w);
        return kh_err_set(err, KH_ENOMEM, "out of memory drawing shapes of %s", d->name);
    }
    return KH_OK;
}

void kh_shapes_free(kh_shapes *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        wl_clear(&s->w[i]);
    free(s->w);
    free(s->from);
    s->n = 0;
    s->w = NULL;
    s->from = NULL;
    s->note[0] = 0;
}

/* ---- the draw -------------------------------------------------------------------------- */

typedef struct drawer {
    const kh_task_def *d;
    const kh_task_workload *const *listed;
    size_t nlisted, want;
    uint64_t seed;
    kh_shapes *out;
    size_t *templ, ntempl;    /* indices into listed */
    size_t *free_ax, nfree;   /* var axes that may change */
    vlist *cand;              /* nfree candidate lists */
    int64_t max_bytes;        /* of the largest listed workload */
    tupset taken;
    tally tl;
    int64_t *tuple;
} drawer;

static kh_status note(drawer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static kh_status note(drawer *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->out->note, sizeof w->out->note, fmt, ap);
    va_end(ap);
    return KH_OK;
}

/* Templates, free axes and their candidates; KH_OK with a note and no
 * template or no free axis when there is nothing to draw. */
static kh_status prepare(drawer *w, kh_err *err)
{
    const kh_task_def *d = w->d;
    size_t nvalid = 0, nvar = 0;
    const char *bad = NULL, *bad_uuid = NULL;
    if (!(w->templ = calloc(w->nlisted + 1, sizeof *w->templ)) ||
        !(w->free_ax = calloc(d->naxes + 1, sizeof *w->free_ax)) ||
        !(w->cand = calloc(d->naxes + 1, sizeof *w->cand)))
        return kh_err_set(err, KH_ENOMEM, "out of memory drawing shapes of %s", d->name);
    for (size_t i = 0; i < w->nlisted; i++) {
        const kh_task_workload *l = w->listed[i];
        if (!is_listed_of(d, l))
            continue;
        nvalid++;
        int64_t b;
        kh_err e2;
        if (kh_task_io_bytes(d, l->axes, &b, &e2) == KH_OK && b > w->max_bytes)
            w->max_bytes = b;
        const char *why;
        if (!reshapable(d, l, &why)) {
            bad = bad ? bad : why;
            bad_uuid = bad_uuid ? bad_uuid : l->uuid;
            continue;
        }
        /* a template equal to an earlier one (axes and inputs) adds nothing */
        int dup = 0;
        for (size_t k = 0; k < w->ntempl && !dup; k++) {
            const kh_task_workload *o = w->listed[w->templ[k]];
            dup = !memcmp(o->axes, l->axes, d->naxes * sizeof *l->axes) &&
                  json_equal(json_object_get(o->json, "inputs"), json_object_get(l->json, "inputs"));
        }
        if (!dup)
            w->templ[w->ntempl++] = i;
    }
    if (!nvalid)
        return note(w, "%s has no listed workload with valid axes to start from", d->name);
    if (!w->ntempl)
        return note(w, "none of the %zu listed workloads of %s can be reshaped: each reads an "
                       "input from a safetensors file (workload %s, input '%s'), whose contents "
                       "fit its listed shape only", nvalid, d->name, bad_uuid, bad);
    char frozen_list[400] = "";
    size_t used = 0;
    for (size_t ai = 0; ai < d->naxes; ai++) {
        if (d->axes[ai].is_const)
            continue;
        nvar++;
        char why[200];
        if (frozen(d, ai, why, sizeof why)) {
            if (used < sizeof frozen_list)
                used += (size_t)snprintf(frozen_list + used, sizeof frozen_list - used, "%s%s (%s)",
                                         used ? "; " : "", d->axes[ai].name, why);
            continue;
        }
        /* the axis's distinct listed values, sorted */
        vlist vals = {0};
        for (size_t i = 0; i < w->nlisted; i++)
            if (is_listed_of(d, w->listed[i]) && !vl_has(&vals, w->listed[i]->axes[ai]) &&
                vl_push(&vals, w->listed[i]->axes[ai])) {
                free(vals.v);
                return kh_err_set(err, KH_ENOMEM, "out of memory drawing shapes of %s", d->name);
            }
        qsort(vals.v, vals.n, sizeof *vals.v, cmp_i64);
        size_t f = w->nfree++;
        w->free_ax[f] = ai;
        int rc = axis_candidates(vals.v, vals.n, w->seed, ai, &w->cand[f]);
        free(vals.v);
        if (rc)
            return kh_err_set(err, KH_ENOMEM, "out of memory drawing shapes of %s", d->name);
    }
    if (!nvar)
        return note(w, "%s has no var axes: its one shape is listed", d->name);
    if (!w->nfree)
        return note(w, "every var axis of %s keeps its listed values: %s", d->name, frozen_list);
    return KH_OK;
}

/* Try candidate value v for free axis f on template t; add it when admissible. */
static kh_status try_one(drawer *w, const kh_task_workload *t, size_t f, int64_t v, kh_err *err)
{
    const kh_task_def *d = w->d;
    memcpy(w->tuple, t->axes, d->naxes * sizeof *w->tuple);
    w->tuple[w->free_ax[f]] = v;
    w->tl.tried++;
    int64_t b;
    kh_err e2;
    if (ts_has(&w->taken, w->tuple)) {
        w->tl.listed++;
        return KH_OK;
    }
    if (!constraints_hold(d, w->tuple)) {
        w->tl.constraint++;
        return KH_OK;
    }
    /* 4b <= 5m: at most 1.25 times the largest listed workload's bytes */
    if (kh_task_io_bytes(d, w->tuple, &b, &e2) || b > INT64_MAX / 4 ||
        (w->max_bytes <= INT64_MAX / 5 && 4 * b > 5 * w->max_bytes)) {
        w->tl.size++;
        return KH_OK;
    }
    kh_shapes *o = w->out;
    kh_status st = make_workload(d, t, w->tuple, &o->w[o->n], err);
    if (st)
        return st;
    o->from[o->n++] = t;
    ts_add(&w->taken, w->tuple);
    return KH_OK;
}

static kh_status draw_all(drawer *w, kh_err *err)
{
    const kh_task_def *d = w->d;
    size_t most = 0, total = 0;
    for (size_t f = 0; f < w->nfree; f++) {
        most = w->cand[f].n > most ? w->cand[f].n : most;
        total += w->cand[f].n;
    }
    /* no more shapes than (template, axis, candidate) triples */
    size_t cap_n = w->want;
    if (total <= SIZE_MAX / 4 / w->ntempl && total * w->ntempl < cap_n)
        cap_n = total * w->ntempl;
    size_t entries = w->nlisted + cap_n, cap = 64;
    while (cap < 2 * entries)
        cap *= 2;
    kh_shapes *o = w->out;
    w->taken.naxes = d->naxes;
    w->taken.cap = cap;
    if (!(w->taken.vals = calloc(entries * d->naxes + 1, sizeof *w->taken.vals)) ||
        !(w->taken.slot = calloc(cap, sizeof *w->taken.slot)) ||
        !(w->tuple = calloc(d->naxes + 1, sizeof *w->tuple)) ||
        !(o->w = calloc(cap_n + 1, sizeof *o->w)) || !(o->from = calloc(cap_n + 1, sizeof *o->from)))
        return kh_err_set(err, KH_ENOMEM, "out of memory drawing shapes of %s", d->name);
    for (size_t i = 0; i < w->nlisted; i++)
        if (is_listed_of(d, w->listed[i]))
            ts_add(&w->taken, w->listed[i]->axes);
    /* First pass: round p gives each free axis's p-th candidate to one
     * template, the first that admits it from a start that depends on the
     * value alone (so the same shape comes from the same template whatever
     * the seed, and successive values spread over the templates).  Second
     * pass, when more are wanted: every (template, value) pair. */
    for (int pass = 0; pass < 2; pass++)
        for (size_t p = 0; p < most && o->n < cap_n; p++)
            for (size_t f = 0; f < w->nfree && o->n < cap_n; f++) {
                if (p >= w->cand[f].n)
                    continue;
                int64_t v = w->cand[f].v[p];
                size_t start = (size_t)(mix64((uint64_t)v ^ ((uint64_t)f << 48)) % w->ntempl);
                for (size_t j = 0; j < w->ntempl && o->n < cap_n; j++) {
                    size_t before = o->n;
                    kh_status st = try_one(w, w->listed[w->templ[(start + j) % w->ntempl]], f, v,
                                           err);
                    if (st)
                        return st;
                    if (pass == 0 && o->n > before)
                        break;
                }
            }
    if (o->n < w->want)
        note(w, "drew %zu of %zu: %zu candidate shapes of %s tried, %zu of them listed or drawn "
                "already, %zu violate a constraint, %zu need more than 1.25 x %lld bytes (the "
                "largest listed workload's)", o->n, w->want, w->tl.tried, d->name, w->tl.listed,
             w->tl.constraint, w->tl.size, (long long)w->max_bytes);
    return KH_OK;
}

kh_status kh_shapes_draw(const kh_task_def *d, const kh_task_workload *const *listed,
                         size_t nlisted, size_t n, uint64_t seed, kh_shapes *out, kh_err *err)
{
    if (!d || !out || (nlisted && !listed))
        return kh_err_set(err, KH_EINVAL, "kh_shapes_draw: NULL definition, result or list");
    memset(out, 0, sizeof *out);
    if (!n)
        return KH_OK;
    drawer w = {.d = d, .listed = listed, .nlisted = nlisted, .want = n, .seed = seed, .out = out};
    kh_status st = prepare(&w, err);
    if (!st && w.ntempl && w.nfree)
        st = draw_all(&w, err);
    for (size_t f = 0; f < w.nfree; f++)
        free(w.cand[f].v);
    free(w.cand);
    free(w.templ);
    free(w.free_ax);
    free(w.taken.vals);
    free(w.taken.slot);
    free(w.tuple);
    if (st)
        kh_shapes_free(out);
    return st;
}
