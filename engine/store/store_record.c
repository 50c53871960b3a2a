/* store_record.c: records (store.h): the record types and the fields each
 * must carry, provenance, ids, record and blob references, the put and get
 * of one record, and the record op's writer (a record and its index
 * entries), which the write log applies.  Index keys are store_index.c's,
 * queries store_query.c's; the transaction and its write log store.c's. */
#include "store/store_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* ---- records: rules ------------------------------------------------------------------ */
/* The record types and the fields each must have (docs/store.md).  A later
 * module adds its type here. */
static const struct {
    const char *name;
    const char *required[3];
} TYPES[] = {
    {"task", {"name"}},
    {"candidate", {"task"}},
    {"compile", {"status"}}, /* content-addressed: many candidates may share one */
    {"evaluation", {"task", "candidate", "status"}},
    {"profile", {"tool"}},   /* a bare cubin may be profiled: candidate when known */
    {"run", {"policy"}},
    {"round", {"run"}},
    {"llm_call", {"model"}},
    {"promotion", {"candidate"}},
    {"device", {"gpu_uuid"}}, /* id device-<GPU UUID>: measured peaks, replaced */
    {"refout", {"definition"}}, /* id refout-<key>: a Python reference's outputs (eval_ref.c) */
};
/* a type added to TYPES goes into kh_store_known_type's switch too */
_Static_assert(KH_ARRAY_LEN(TYPES) == 11, "kh_store_known_type lists every type");
_Static_assert(KH_ARRAY_LEN(TYPES) == KH_STORE_NTYPES, "store_int.h counts every type");

const char *kh_store_type_at(size_t i)
{
    return i < KH_ARRAY_LEN(TYPES) ? TYPES[i].name : NULL;
}

/* Provenance a record of these types must carry (docs/store.md, "Records"):
 * per need, the fields that satisfy it ("a|b": either one), dotted paths
 * into objects; a field counts when present and neither null nor "".
 * Imports (KH_STORE_NOREFCHECK) are exempt: records written before this
 * rule must stay importable.  Other types carry their provenance in their
 * required fields or have none to give (docs/store.md says which). */
static const struct {
    const char *type;
    struct {
        const char *paths, *what;
    } need[3];
} PROVENANCE[] = {
    {"candidate", {{"source_blob|provenance.source_hash", "the source hash"}}},
    {"compile",
     {{"source_blob|provenance.source_hash", "the source hash"},
      {"provenance.compiler", "the compiler"},
      {"provenance.options", "the compiler options"}}},
    {"evaluation",
     {{"provenance.solution_hash|provenance.hashes.source", "the solution hash"},
      {"provenance.gpu_uuid|provenance.host", "the GPU UUID or host"},
      {"provenance.seeds|provenance.seed", "the seeds"}}},
    {"llm_call", {{"fingerprint", "the prompt's fingerprint"}}},
};

/* The value at a dotted path of n bytes, or NULL. */
static const json_t *path_get(const json_t *rec, const char *path, size_t n)
{
    const json_t *v = rec;
    while (n && v) {
        const char *dot = memchr(path, '.', n);
        size_t l = dot ? (size_t)(dot - path) : n;
        v = json_is_object(v) ? json_object_getn(v, path, l) : NULL;
        if (!dot)
            break;
        path = dot + 1;
        n -= l + 1;
    }
    if (!v || json_is_null(v) || (json_is_string(v) && !json_string_length(v)))
        return NULL;
    return v;
}

static kh_status check_provenance(const json_t *rec, const char *type, kh_err *err)
{
    for (size_t t = 0; t < KH_ARRAY_LEN(PROVENANCE); t++) {
        if (strcmp(PROVENANCE[t].type, type))
            continue;
        for (int i = 0; i < 3 && PROVENANCE[t].need[i].paths; i++) {
            const char *p = PROVENANCE[t].need[i].paths;
            int found = 0;
            while (!found) {
                const char *bar = strchr(p, '|');
                size_t l = bar ? (size_t)(bar - p) : strlen(p);
                found = path_get(rec, p, l) != NULL;
                if (!bar)
                    break;
                p = bar + 1;
            }
            if (found)
                continue;
            /* 'a', 'b' or 'c' */
            char names[200];
            size_t k = 0;
            const char *q = PROVENANCE[t].need[i].paths;
            for (int alt = 0; *q && k < sizeof names - 8; alt++) {
                const char *bar = strchr(q, '|');
                size_t l = bar ? (size_t)(bar - q) : strlen(q);
                int r = snprintf(names + k, sizeof names - k, "%s'%.*s'",
                                 alt == 0 ? "" : bar ? ", " : " or ", (int)l, q);
                if (r < 0 || (size_t)r >= sizeof names - k)
                    break;
                k += (size_t)r;
                q = bar ? bar + 1 : q + l;
            }
            return kh_err_set(err, KH_EINVAL,
                              "a%s %s record must carry its provenance: %s (%s) is missing "
                              "(docs/store.md, Records)",
                              strchr("aeiou", type[0]) ? "n" : "", type,
                              PROVENANCE[t].need[i].what, names);
        }
    }
    return KH_OK;
}

int kh_store_known_type(const char *name)
{
    /* every top-level key of every record written comes here (is it a
     * reference?): the first letter narrows TYPES to at most two names */
    int a = 0, b = 0, c = 0; /* 1-based indices into TYPES */
    switch (name[0]) {
    case 't': a = 1; break;
    case 'c': a = 2, b = 3; break;
    case 'e': a = 4; break;
    case 'p': a = 5, b = 9; break;
    case 'r': a = 6, b = 7, c = 11; break;
    case 'l': a = 8; break;
    case 'd': a = 10; break;
    default: return 0;
    }
    if (!strcmp(TYPES[a - 1].name, name))
        return a;
    if (b && !strcmp(TYPES[b - 1].name, name))
        return b;
    if (c && !strcmp(TYPES[c - 1].name, name))
        return c;
    return 0;
}

/* Fields whose value is the id of another record: the type names, plus
 * these two aliases for a candidate. */
static const char *ref_type(const char *field)
{
    if (kh_store_known_type(field))
        return field;
    if ((field[0] == 'p' && !strcmp(field, "parent")) ||
        (field[0] == 'i' && !strcmp(field, "incumbent")))
        return "candidate";
    return NULL;
}

static int id_char(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_' || c == '.' || c == ':';
}

/* check_id's rules without the message (the write path's common case). */
static int id_ok(const char *id, const char *type)
{
    size_t tn = strlen(type), n;
    if (strncmp(id, type, tn) || id[tn] != '-')
        return 0;
    for (n = tn + 1; id[n]; n++)
        if (!id_char((unsigned char)id[n]))
            return 0;
    return n > tn + 1 && n < KH_STORE_ID_MAX;
}

static kh_status check_id(const char *id, const char *type, const char *what, kh_err *err)
{
    size_t n = strlen(id), tn = strlen(type);
    if (n == 0 || n >= KH_STORE_ID_MAX)
        return kh_err_set(err, KH_EINVAL, "%s: id '%.40s' must be 1..%d bytes", what, id,
                          KH_STORE_ID_MAX - 1);
    if (n <= tn + 1 || strncmp(id, type, tn) || id[tn] != '-')
        return kh_err_set(err, KH_EINVAL, "%s: '%s' is not a %s id (%s-...)", what, id, type,
                          type);
    for (size_t i = 0; i < n; i++)
        if (!id_char((unsigned char)id[i]))
            return kh_err_set(err, KH_EINVAL,
                              "%s: id '%s' has a character outside [A-Za-z0-9._:-]", what, id);
    return KH_OK;
}

kh_status kh_store_each_record_ref(const json_t *rec, kh_store_ref_fn fn, void *arg,
                                   kh_err *err)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)rec, k, v) {
        /* only a string is a reference: FlashInfer-Bench's "evaluation" object
         * inside an evaluation record is data */
        if (!ref_type(k) || !json_is_string(v))
            continue;
        kh_status st = fn(arg, k, json_string_value(v), err);
        if (st)
            return st;
    }
    return KH_OK;
}

static kh_status walk_blob_refs(const json_t *j, const char *field, kh_store_ref_fn fn,
                                void *arg, int depth, kh_err *err)
{
    if (depth > 64)
        return KH_OK;
    if (json_is_object(j)) {
        for (void *it = json_object_iter((json_t *)j); it;
             it = json_object_iter_next((json_t *)j, it)) {
            const char *k = json_object_iter_key(it);
            json_t *v = json_object_iter_value(it);
            size_t n = json_object_iter_key_len(it);
            int is_ref = n > 5 && !memcmp(k + n - 5, "_blob", 5);
            if (is_ref && !json_is_null(v)) {
                kh_status st = fn(arg, k, json_string_value(v), err);
                if (st)
                    return st;
            } else if (n == 5 && !memcmp(k, "blobs", 5) && json_is_array(v)) {
                size_t i;
                json_t *e;
                json_array_foreach(v, i, e) {
                    kh_status st = fn(arg, k, json_string_value(e), err);
                    if (st)
                        return st;
                }
            } else if (json_is_object(v) || json_is_array(v)) {
                kh_status st = walk_blob_refs(v, k, fn, arg, depth + 1, err);
                if (st)
                    return st;
            }
        }
    } else if (json_is_array(j)) {
        size_t i;
        json_t *e;
        json_array_foreach(j, i, e) {
            if (json_is_object(e) || json_is_array(e)) {
                kh_status st = walk_blob_refs(e, field, fn, arg, depth + 1, err);
                if (st)
                    return st;
            }
        }
    }
    return KH_OK;
}

kh_status kh_store_each_blob_ref(const json_t *rec, kh_store_ref_fn fn, void *arg, kh_err *err)
{
    return walk_blob_refs(rec, "", fn, arg, 0, err);
}

static const char *opt_string(const json_t *rec, const char *field, size_t max, kh_err *err,
                              kh_status *st)
{
    json_t *v = json_object_get(rec, field);
    if (!v || json_is_null(v))
        return NULL;
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > max ||
        strlen(json_string_value(v)) != json_string_length(v)) {
        *st = kh_err_set(err, KH_EINVAL, "field '%s' must be a non-empty string of at most "
                                         "%zu bytes",
                         field, max);
        return NULL;
    }
    return json_string_value(v);
}

kh_status kh_store_rec_keys(const json_t *rec, kh_rec_keys *k, kh_err *err)
{
    kh_status st = KH_OK;
    memset(k, 0, sizeof *k);
    if (!json_is_object(rec))
        return kh_err_set(err, KH_EINVAL, "a record must be a JSON object");
    k->type = opt_string(rec, "type", 32, err, &st);
    if (st)
        return st;
    if (!k->type || !kh_store_known_type(k->type))
        return kh_err_set(err, KH_EINVAL,
                          "record type '%s' is not one of task, candidate, compile, "
                          "evaluation, profile, run, round, llm_call, promotion, device",
                          k->type ? k->type : "(missing)");
    k->status = opt_string(rec, "status", 64, err, &st);
    if (!st)
        k->task = opt_string(rec, "task", KH_STORE_ID_MAX - 1, err, &st);
    if (!st)
        k->run = opt_string(rec, "run", KH_STORE_ID_MAX - 1, err, &st);
    if (!st)
        k->candidate = opt_string(rec, "candidate", KH_STORE_ID_MAX - 1, err, &st);
    if (st)
        return st;
    const char *ca = json_string_value(json_object_get(rec, "created_at"));
    if (!ca)
        return kh_err_set(err, KH_EINVAL, "record has no created_at");
    return kh_store_parse_time(ca, &k->t_us, err);
}

json_t *kh_store_decode_record(kh_store *s, const MDB_val *v, kh_err *err)
{
    (void)s;
    json_t *j = kh_store_json_parse(v->mv_data, v->mv_size, err);
    if (j && !json_is_object(j)) {
        json_decref(j);
        j = NULL;
        kh_err_set(err, KH_ECORRUPT, "stored record is not a JSON object");
    }
    return j;
}

/* Creation times strictly increase within a process, so newest-first is a
 * total order even for records made in the same microsecond. */
static int64_t next_us(kh_store *s)
{
    int64_t us = (int64_t)(kh_wall_now() * 1e6);
    if (us <= s->last_id_us)
        us = s->last_id_us + 1;
    s->last_id_us = us;
    return us;
}

static void make_id(kh_store *s, const char *type, int64_t *t_us, char out[KH_STORE_ID_MAX])
{
    /* Crockford base32 keeps the lexical order of the numbers. */
    static const char b32[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    int64_t us = next_us(s);
    *t_us = us;
    size_t tn = strlen(type); /* a known type: short */
    memcpy(out, type, tn);
    char *p = out + tn;
    *p++ = '-';
    for (int i = 10; i >= 0; i--)
        *p++ = b32[((uint64_t)us >> (5 * i)) & 31];
    uint32_t salt = s->id_salt;
    for (int i = 0; i < 4; i++)
        *p++ = b32[(salt >> (5 * i)) & 31];
    *p = '\0';
}

kh_status kh_store_new_id(kh_store *s, const char *type, char id[KH_STORE_ID_MAX], kh_err *err)
{
    if (!type || !kh_store_known_type(type))
        return kh_err_set(err, KH_EINVAL, "no record type '%s'", type ? type : "(null)");
    int64_t t_us;
    make_id(s, type, &t_us, id);
    return KH_OK;
}

struct ref_ctx {
    kh_store_txn *tx;
    int check_exists;
};

static kh_status check_blob_ref(void *arg, const char *field, const char *value, kh_err *err)
{
    struct ref_ctx *c = arg;
    kh_hash h;
    if (!value)
        return kh_err_set(err, KH_EINVAL, "field '%s' must hold a blob hash string", field);
    if (kh_hash_parse(value, &h, err))
        return kh_err_prefix(err, "field '%s'", field), KH_EINVAL;
    if (!c->check_exists)
        return KH_OK;
    MDB_val key = {16, h.b}, v;
    int rc = mdb_get(c->tx->txn, c->tx->s->blobs, &key, &v);
    if (rc == MDB_NOTFOUND)
        return kh_err_set(err, KH_EINVAL, "field '%s': blob %s is not in the store (put the "
                                          "blob first)",
                          field, value);
    return rc ? kh_store_mdb_err(err, rc, "checking a blob reference") : KH_OK;
}

static kh_status check_record_ref(void *arg, const char *field, const char *value, kh_err *err)
{
    struct ref_ctx *c = arg;
    if (!value)
        return kh_err_set(err, KH_EINVAL, "field '%s' must hold a record id string", field);
    const char *type = ref_type(field);
    if (!id_ok(value, type)) {
        char what[64];
        snprintf(what, sizeof what, "field '%s'", field);
        kh_status st = check_id(value, type, what, err);
        return st ? st : kh_err_set(err, KH_EINVAL, "%s: bad id '%s'", what, value);
    }
    if (!c->check_exists)
        return KH_OK;
    kh_store *s = c->tx->s;
    size_t n = strlen(value); /* < KH_STORE_ID_MAX: id_ok */
    struct kh_refseen *e = NULL;
    if (!s->seen)
        s->seen = calloc(KH_REFSEEN, sizeof *s->seen); /* NULL: no memo, still correct */
    if (s->seen) {
        e = &s->seen[XXH3_64bits(value, n) % KH_REFSEEN];
        if (e->gen == s->seen_gen && e->len == n && !memcmp(e->id, value, n))
            return KH_OK;
    }
    MDB_val key = {n, (void *)value}, v;
    int rc = mdb_get(c->tx->txn, s->records, &key, &v);
    if (rc == MDB_NOTFOUND)
        return kh_err_set(err, KH_EINVAL,
                          "field '%s': record %s is not in the store (write it first)", field,
                          value);
    if (rc)
        return kh_store_mdb_err(err, rc, "checking a record reference");
    if (e) {
        e->gen = s->seen_gen;
        e->len = (unsigned char)n;
        memcpy(e->id, value, n);
    }
    return KH_OK;
}

/* The KH_OP_RECORD op's writer (kh_store_op.write): write (or replace) a
 * serialized record and its index entries.  The first run has the record's
 * index fields from the put; a replay parses the text again. */
static kh_status record_write(kh_store_txn *tx, const kh_store_op *op, int *full, kh_err *err)
{
    kh_store *s = tx->s;
    const char *id = tx->log.p + op->off, *text = id + op->idlen + 1;
    int flags = op->flags;
    json_t *rec = NULL;
    kh_rec_keys rk;
    const kh_rec_keys *keys = op->keys;
    if (!keys) {
        rec = kh_store_json_parse(text, op->textlen, err);
        if (!rec)
            return kh_err_prefix(err, "record %s", id), KH_EINVAL;
        if (kh_store_rec_keys(rec, &rk, err)) {
            json_decref(rec);
            return KH_EINVAL;
        }
        keys = &rk;
    }
    MDB_val key = {op->idlen, (void *)id}, old;
    kh_status st = KH_OK;
    int rc = MDB_NOTFOUND;
    /* a plain put lets LMDB refuse an existing key (one B-tree descent);
     * only a replace looks up the old record to drop its index entries */
    if (flags & KH_STORE_REPLACE) {
        rc = mdb_get(tx->txn, s->records, &key, &old);
        if (rc == 0) {
            json_t *o = kh_store_decode_record(s, &old, err);
            if (!o) {
                st = KH_ECORRUPT;
                goto out;
            }
            kh_rec_keys ok;
            st = kh_store_rec_keys(o, &ok, err);
            if (!st)
                st = kh_store_index_update(tx, &ok, id, 1, full, err);
            json_decref(o);
            if (st)
                goto out;
        } else if (rc != MDB_NOTFOUND) {
            st = kh_store_mdb_err(err, rc, "reading the records");
            goto out;
        }
    }
    MDB_val v = {op->textlen, (void *)text};
    MDB_cursor *c;
    rc = kh_store_wcursor(tx, 0, s->records, &c);
    if (!rc)
        rc = mdb_cursor_put(c, &key, &v, (flags & KH_STORE_REPLACE) ? 0 : MDB_NOOVERWRITE);
    if (rc == MDB_KEYEXIST) {
        st = kh_err_set(err, KH_ESTATE,
                        "record %s already exists (records are immutable; pass replace to "
                        "overwrite)",
                        id);
        goto out;
    }
    if (rc == MDB_MAP_FULL) {
        *full = 1;
        st = KH_ESTORE;
        goto out;
    }
    if (rc) {
        st = kh_store_mdb_err(err, rc, "writing a record");
        goto out;
    }
    st = kh_store_index_update(tx, keys, id, 0, full, err);
out:
    json_decref(rec);
    return st;
}

kh_status kh_store_txn_put(kh_store_txn *tx, json_t *rec, int flags,
                           char id_out[KH_STORE_ID_MAX], kh_err *err)
{
    kh_status st = kh_store_need_write(tx, err);
    if (st)
        return st;
    kh_store *s = tx->s;
    if (!json_is_object(rec))
        return kh_store_tx_fail(tx, kh_err_set(err, KH_EINVAL, "a record must be a JSON object"), err);
    const char *type = json_string_value(json_object_get(rec, "type"));
    int ti = type ? kh_store_known_type(type) : 0;
    if (!ti)
        return kh_store_tx_fail(tx,
                       kh_err_set(err, KH_EINVAL,
                                  "record type '%s' is not one of task, candidate, compile, "
                                  "evaluation, profile, run, round, llm_call, promotion, device",
                                  type ? type : "(missing)"),
                       err);
    /* an evaluation's status defaults to its FlashInfer-Bench verdict */
    if (!strcmp(type, "evaluation") && !json_object_get(rec, "status")) {
        json_t *es = json_object_get(json_object_get(rec, "evaluation"), "status");
        if (json_is_string(es))
            json_object_set(rec, "status", es);
    }
    for (int i = 0; i < 3 && TYPES[ti - 1].required[i]; i++) {
        json_t *f = json_object_get(rec, TYPES[ti - 1].required[i]);
        if (!f || json_is_null(f))
            return kh_store_tx_fail(tx,
                           kh_err_set(err, KH_EINVAL, "a %s record needs the field '%s'", type,
                                      TYPES[ti - 1].required[i]),
                           err);
    }
    if (!(flags & KH_STORE_NOREFCHECK) && (st = check_provenance(rec, type, err)))
        return kh_store_tx_fail(tx, st, err);
    char id[KH_STORE_ID_MAX];
    json_t *jid = json_object_get(rec, "id");
    json_t *jca = json_object_get(rec, "created_at");
    int64_t t_us = 0;
    if (jid && !json_is_null(jid)) {
        if (!json_is_string(jid))
            return kh_store_tx_fail(tx, kh_err_set(err, KH_EINVAL, "field 'id' must be a string"), err);
        snprintf(id, sizeof id, "%s", json_string_value(jid));
        if ((st = check_id(json_string_value(jid), type, "field 'id'", err)))
            return kh_store_tx_fail(tx, st, err);
    } else if (!strcmp(type, "task") && json_is_string(json_object_get(rec, "name"))) {
        /* tasks are named: their id is "task-<name>" */
        int n = snprintf(id, sizeof id, "task-%s",
                         json_string_value(json_object_get(rec, "name")));
        if (n >= (int)sizeof id || (st = check_id(id, type, "task name", err)))
            return kh_store_tx_fail(tx,
                           n >= (int)sizeof id
                               ? kh_err_set(err, KH_EINVAL, "task name too long")
                               : st,
                           err);
        json_object_set_new(rec, "id", json_string(id));
    } else {
        make_id(s, type, &t_us, id);
        json_object_set_new(rec, "id", json_string(id));
    }
    if (jca && !json_is_null(jca)) {
        if (!json_is_string(jca) ||
            kh_store_parse_time(json_string_value(jca), &t_us, err) != KH_OK)
            return kh_store_tx_fail(tx,
                           kh_err_set(err, KH_EINVAL,
                                      "field 'created_at' must be an ISO 8601 time"),
                           err);
    } else {
        /* a replaced record keeps its creation time (and its place in the indices) */
        MDB_val key = {strlen(id), id}, old;
        json_t *o = NULL;
        if ((flags & KH_STORE_REPLACE) && mdb_get(tx->txn, s->records, &key, &old) == 0 &&
            (o = kh_store_decode_record(s, &old, err)) &&
            json_is_string(json_object_get(o, "created_at"))) {
            json_object_set(rec, "created_at", json_object_get(o, "created_at"));
        } else {
            char ts[40];
            if (!t_us)
                t_us = next_us(s);
            kh_store_format_time(t_us, ts);
            json_object_set_new(rec, "created_at", json_string(ts));
        }
        json_decref(o);
    }
    kh_rec_keys k;
    if ((st = kh_store_rec_keys(rec, &k, err)))
        return kh_store_tx_fail(tx, st, err);
    struct ref_ctx rc = {tx, !(flags & KH_STORE_NOREFCHECK)};
    if ((st = kh_store_each_record_ref(rec, check_record_ref, &rc, err)) ||
        (st = kh_store_each_blob_ref(rec, check_blob_ref, &rc, err)))
        return kh_store_tx_fail(tx, st, err);
    /* "id\0text" into the txn's log, where a replay finds it */
    size_t off = tx->log.n, idlen = strlen(id);
    if ((st = kh_sbuf_reserve(&tx->log, idlen + 1, err)))
        return kh_store_tx_fail(tx, st, err);
    memcpy(tx->log.p + off, id, idlen + 1);
    tx->log.n += idlen + 1;
    if ((st = kh_store_json_dump(rec, &tx->log, err))) {
        tx->log.n = off;
        kh_err_prefix(err, "cannot serialize record %s", id);
        return kh_store_tx_fail(tx, st, err);
    }
    size_t textlen = tx->log.n - off - idlen - 1;
    const char *sec = kh_store_find_secret(s, tx->log.p + off + idlen + 1, textlen);
    if (sec) {
        memset(tx->log.p + off, 0, tx->log.n - off);
        tx->log.n = off;
        return kh_store_tx_fail(tx,
                       kh_err_set(err, KH_EINVAL,
                                  "refusing to store record %s: it contains the value of $%s "
                                  "(an API key must never be archived)",
                                  id, sec),
                       err);
    }
    kh_store_op op = {.kind = KH_OP_RECORD,
                      .write = record_write,
                      .flags = flags & KH_STORE_REPLACE,
                      .off = off,
                      .idlen = idlen,
                      .textlen = textlen,
                      .live = rec,
                      .keys = &k};
    if ((st = kh_store_exec_op(tx, &op, err)))
        return st;
    if (id_out)
        memcpy(id_out, id, strlen(id) + 1);
    return KH_OK;
}

kh_status kh_store_txn_put_many(kh_store_txn *tx, json_t *const *recs, size_t n, int flags,
                                char (*ids)[KH_STORE_ID_MAX], kh_err *err)
{
    for (size_t i = 0; i < n; i++) {
        kh_status st = kh_store_txn_put(tx, recs[i], flags, ids ? ids[i] : NULL, err);
        if (st) {
            kh_err_prefix(err, "record %zu of %zu", i + 1, n);
            if (tx->st == st) /* the sticky copy, which update reports, says which too */
                tx->err = *err;
            return st;
        }
    }
    return KH_OK;
}

kh_status kh_store_txn_get(kh_store_txn *tx, const char *id, json_t **out, kh_err *err)
{
    *out = NULL;
    if (tx->st)
        return kh_store_tx_sticky(tx, err);
    if (!id || !id[0] || strlen(id) >= KH_STORE_ID_MAX)
        return kh_err_set(err, KH_ENOTFOUND, "no record '%.80s'", id ? id : "");
    MDB_val key = {strlen(id), (void *)id}, v;
    int rc = mdb_get(tx->txn, tx->s->records, &key, &v);
    if (rc == MDB_NOTFOUND)
        return kh_err_set(err, KH_ENOTFOUND, "no record '%s'", id);
    if (rc)
        return kh_store_mdb_err(err, rc, "reading a record");
    *out = kh_store_decode_record(tx->s, &v, err);
    if (!*out)
        return kh_err_prefix(err, "record %s", id), KH_ECORRUPT;
    return KH_OK;
}

struct rec_arg {
    json_t *rec;
    int flags;
    char *id;
    const char *get_id;
    json_t **out;
};

static kh_status do_put(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct rec_arg *a = arg;
    return kh_store_txn_put(tx, a->rec, a->flags, a->id, err);
}

kh_status kh_store_put(kh_store *s, json_t *rec, int flags, char id_out[KH_STORE_ID_MAX],
                       kh_err *err)
{
    struct rec_arg a = {.rec = rec, .flags = flags, .id = id_out};
    return kh_store_update(s, do_put, &a, err);
}

struct many_arg {
    json_t *const *recs;
    size_t n;
    int flags;
    char (*ids)[KH_STORE_ID_MAX];
};

static kh_status do_put_many(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct many_arg *a = arg;
    return kh_store_txn_put_many(tx, a->recs, a->n, a->flags, a->ids, err);
}

kh_status kh_store_put_records(kh_store *s, json_t *const *recs, size_t n, int flags,
                               char (*ids)[KH_STORE_ID_MAX], kh_err *err)
{
    struct many_arg a = {recs, n, flags, ids};
    return kh_store_update(s, do_put_many, &a, err);
}

static kh_status do_get(kh_store_txn *tx, void *arg, kh_err *err)
{
    struct rec_arg *a = arg;
    return kh_store_txn_get(tx, a->get_id, a->out, err);
}

kh_status kh_store_get(kh_store *s, const char *id, json_t **out, kh_err *err)
{
    *out = NULL;
    struct rec_arg a = {.get_id = id, .out = out};
    return kh_store_view(s, do_get, &a, err);
}

