/* cmd_best.c: `khlua best RUN [--out DIR] [--json]`: a run's best kernel out
 * of the store in one command.  The run's incumbent (the last promoted
 * candidate, else the seed it started from) becomes a Solution JSON in
 * FlashInfer-Bench's form with khlua's launch manifest (spec.khlua), its
 * source file, and figures.json (the run's score, the promotion that made it
 * the incumbent: gate figures and evidence ids); engine/store/best.h finds and
 * shapes them.  Without --out it prints
 * what it would write.  Reads the store read-only.  Exit 0 ok, 1 failure,
 * 2 usage. */
#include "commands.h"

#include "store/best.h"
#include "store/store.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define P "khlua best"

static void usage(FILE *f)
{
    fprintf(f, "usage: khlua [--store PATH] best RUN [--out DIR] [--json]\n"
               "  The run's best kernel: the candidate it promoted last (else the seed it\n"
               "  started from), as a Solution JSON (spec.khlua: its launch manifest), its\n"
               "  source and figures.json (score, gate figures, evidence ids).\n"
               "  --out DIR   write them there (created); without it, print the source\n"
               "  --json      print a JSON summary (paths, candidate, score) on stdout\n"
               "  RUN may be 'last': the newest run in the store.\n"
               "exit codes: 0 ok, 1 failure, 2 usage\n");
}

static int fail(const char *what, const char *msg)
{
    fprintf(stderr, P ": %s: %s\n", what, msg);
    return 1;
}

static kh_status write_file(const char *path, const void *data, size_t n, kh_err *err)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return kh_err_set(err, KH_EIO, "%s: %s", path, strerror(errno));
    int ok = fwrite(data, 1, n, f) == n;
    ok &= fclose(f) == 0;
    return ok ? KH_OK : kh_err_set(err, KH_EIO, "writing %s: %s", path, strerror(errno));
}

int kh_cmd_best(kh_engine *e, int argc, char **argv)
{
    const char *run_id = NULL, *out = NULL, *store_path = kh_engine_store_path(e);
    int as_json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            as_json = 1;
        } else if (!strcmp(argv[i], "--out") && i + 1 < argc) {
            out = argv[++i];
        } else if (argv[i][0] == '-' || run_id) {
            fprintf(stderr, P ": unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        } else {
            run_id = argv[i];
        }
    }
    if (!run_id) {
        fprintf(stderr, P ": which run? (khlua store ls --type run lists them)\n");
        usage(stderr);
        return 2;
    }
    kh_store_opts so = {.readonly = 1};
    kh_store *s = NULL;
    kh_err err;
    if (kh_store_open(store_path, &so, &s, &err))
        return fail("store", err.msg);
    int rc = 1;
    kh_best b;
    if (kh_best_of_run(s, run_id, &b, &err)) {
        fprintf(stderr, P ": %s\n", err.msg);
        kh_store_close(s);
        return 1;
    }
    const char *rid = b.run, *cid = b.candidate;
    json_t *sol = b.solution, *fig = b.figures;
    const char *name = json_string_value(json_object_get(sol, "name"));
    const json_t *src0 = json_array_get(json_object_get(sol, "sources"), 0);
    const char *file = json_string_value(json_object_get(src0, "path"));
    const char *src = json_string_value(json_object_get(src0, "content"));
    size_t src_len = json_string_length(json_object_get(src0, "content"));
    if (!out) {
        if (as_json) {
            json_t *sum = json_pack("{s:O, s:O}", "solution", sol, "figures", fig);
            char *t = json_dumps(sum, JSON_SORT_KEYS);
            printf("%s\n", t ? t : "{}");
            free(t);
            json_decref(sum);
        } else {
            fwrite(src, 1, src_len, stdout);
            fprintf(stderr, "%s: %s, %s (score %s); --out DIR writes the Solution JSON, %s and "
                    "figures.json\n", rid, cid, name,
                    json_is_number(json_object_get(fig, "score")) ? "recorded" : "none", file);
        }
        rc = 0;
        goto done;
    }
    if (mkdir(out, 0777) && errno != EEXIST) {
        char m[600];
        snprintf(m, sizeof m, "cannot create it: %s", strerror(errno));
        fail(out, m);
        goto done;
    }
    char p_sol[4200], p_src[4200], p_fig[4200];
    snprintf(p_sol, sizeof p_sol, "%s/%s.json", out, name);
    snprintf(p_src, sizeof p_src, "%s/%s", out, file);
    snprintf(p_fig, sizeof p_fig, "%s/figures.json", out);
    char *tsol = json_dumps(sol, JSON_INDENT(2) | JSON_SORT_KEYS);
    char *tfig = json_dumps(fig, JSON_INDENT(2) | JSON_SORT_KEYS);
    kh_status st = !tsol || !tfig ? kh_err_set(&err, KH_ENOMEM, "out of memory") : KH_OK;
    if (!st)
        st = write_file(p_sol, tsol, strlen(tsol), &err);
    if (!st)
        st = write_file(p_src, src, src_len, &err);
    if (!st)
        st = write_file(p_fig, tfig, strlen(tfig), &err);
    free(tsol);
    free(tfig);
    if (st) {
        fail(out, err.msg);
        goto done;
    }
    if (as_json) {
        json_t *sum = json_pack("{s:s, s:s, s:s, s:s, s:s, s:O}", "run", rid, "candidate", cid,
                                "solution", p_sol, "source", p_src, "figures", p_fig, "score",
                                json_object_get(fig, "score"));
        char *t = json_dumps(sum, JSON_SORT_KEYS);
        printf("%s\n", t ? t : "{}");
        free(t);
        json_decref(sum);
    } else {
        printf("%s\n%s\n%s\n", p_sol, p_src, p_fig);
        fprintf(stderr, "%s: %s (%s) written to %s\n", rid, name, cid, out);
    }
    rc = 0;
done:
    kh_best_free(&b);
    kh_store_close(s);
    return rc;
}
