/* candidate.c: one identity for a candidate (candidate.h). */
#include "store/candidate.h"

#include <stdlib.h>
#include <string.h>

static int cmp_path(const void *a, const void *b)
{
    const json_t *x = *(const json_t *const *)a, *y = *(const json_t *const *)b;
    return strcmp(json_string_value(json_object_get(x, "path")),
                  json_string_value(json_object_get(y, "path")));
}

kh_status kh_candidate_of(const json_t *sol, kh_candidate *c, kh_err *err)
{
    memset(c, 0, sizeof *c);
    const char *def = json_string_value(json_object_get(sol, "definition"));
    const json_t *spec = json_object_get(sol, "spec");
    const char *ep = json_string_value(json_object_get(spec, "entry_point"));
    const json_t *srcs = json_object_get(sol, "sources");
    if (!def || !*def)
        return kh_err_set(err, KH_EINVAL, "a candidate needs its definition's name");
    if (!ep || !strstr(ep, "::"))
        return kh_err_set(err, KH_EINVAL, "a candidate needs spec.entry_point "
                                          "\"<file>::<function>\"");
    size_t n = json_array_size(srcs);
    if (!n)
        return kh_err_set(err, KH_EINVAL, "a candidate needs its sources");
    size_t flen = (size_t)(strstr(ep, "::") - ep);
    json_t **list = calloc(n, sizeof *list);
    json_t *sorted = json_array();
    kh_status st = list && sorted ? KH_OK : kh_err_set(err, KH_ENOMEM, "out of memory");
    const char *entry = NULL;
    size_t entry_len = 0;
    for (size_t i = 0; !st && i < n; i++) {
        const json_t *s = json_array_get(srcs, i);
        const char *p = json_string_value(json_object_get(s, "path"));
        const json_t *ct = json_object_get(s, "content");
        if (!p || !json_is_string(ct)) {
            st = kh_err_set(err, KH_EINVAL, "source %zu needs a path and string content", i + 1);
            break;
        }
        for (size_t k = 0; k < i; k++)
            if (!strcmp(json_string_value(json_object_get(list[k], "path")), p))
                st = kh_err_set(err, KH_EINVAL, "two sources named '%s'", p);
        list[i] = json_pack("{s:s, s:O}", "path", p, "content", ct);
        if (!st && !list[i])
            st = kh_err_set(err, KH_ENOMEM, "out of memory");
        if (!st && strlen(p) == flen && !strncmp(p, ep, flen)) {
            entry = json_string_value(ct);
            entry_len = json_string_length(ct);
        }
    }
    if (!st && !entry)
        st = kh_err_set(err, KH_EINVAL, "entry point '%s' names a file that is not among the "
                        "sources", ep);
    if (!st) {
        qsort(list, n, sizeof *list, cmp_path);
        for (size_t i = 0; i < n && !st; i++) {
            if (json_array_append_new(sorted, list[i]))
                st = kh_err_set(err, KH_ENOMEM, "out of memory");
            list[i] = NULL;
        }
    }
    const json_t *man = json_object_get(spec, "khlua");
    json_t *canon = st ? NULL
                       : json_pack("{s:s, s:s%, s:O, s:O}", "definition", def, "entry_file", ep,
                                   flen, "khlua", man ? man : json_null(), "sources", sorted);
    if (!st && !canon)
        st = kh_err_set(err, KH_ENOMEM, "out of memory");
    if (!st) {
        c->canonical = json_dumps(canon, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
        c->entry_source = malloc(entry_len + 1);
        c->definition = kh_strdup(def);
        c->manifest = man ? json_deep_copy(man) : json_null();
        if (!c->canonical || !c->entry_source || !c->definition || !c->manifest)
            st = kh_err_set(err, KH_ENOMEM, "out of memory");
    }
    if (!st) {
        memcpy(c->entry_source, entry, entry_len);
        c->entry_source[entry_len] = 0;
        c->entry_len = entry_len;
        c->canonical_len = strlen(c->canonical);
        kh_hash h;
        char hex[33];
        kh_hash_bytes(c->canonical, c->canonical_len, &h);
        kh_hash_hex(&h, hex);
        snprintf(c->id, sizeof c->id, "candidate-%s", hex);
    }
    for (size_t i = 0; list && i < n; i++)
        json_decref(list[i]);
    free(list);
    json_decref(sorted);
    json_decref(canon);
    if (st)
        kh_candidate_free(c);
    return st;
}

void kh_candidate_free(kh_candidate *c)
{
    if (!c)
        return;
    free(c->canonical);
    free(c->entry_source);
    free(c->definition);
    json_decref(c->manifest);
    memset(c, 0, sizeof *c);
}

kh_status kh_candidate_put(kh_store_txn *tx, const kh_candidate *c, const char *task_id,
                           kh_err *err)
{
    json_t *have = NULL;
    kh_status st = kh_store_txn_get(tx, c->id, &have, err);
    json_decref(have);
    if (st != KH_ENOTFOUND)
        return st; /* there (one identity, one record), or the store failed */
    kh_hash sh, ch;
    if ((st = kh_store_txn_put_blob(tx, c->entry_source, c->entry_len, &sh, err)) ||
        (st = kh_store_txn_put_blob(tx, c->canonical, c->canonical_len, &ch, err)))
        return st;
    char shex[33], chex[33];
    kh_hash_hex(&sh, shex);
    kh_hash_hex(&ch, chex);
    json_t *rec = json_pack("{s:s, s:s, s:s, s:s, s:O, s:s, s:s, s:{s:s}}", "type", "candidate",
                            "id", c->id, "task", task_id, "definition", c->definition,
                            "manifest", c->manifest, "source_blob", shex, "solution_blob",
                            chex, "provenance", "source_hash", shex);
    if (!rec)
        return kh_err_set(err, KH_ENOMEM, "out of memory");
    char out[KH_STORE_ID_MAX];
    st = kh_store_txn_put(tx, rec, 0, out, err);
    json_decref(rec);
    return st;
}
