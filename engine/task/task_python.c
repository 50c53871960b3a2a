/* task_python.c: for a check, every definition's reference and constraints
 * parsed by one Python child's ast (FlashInfer-Bench's own rule); without
 * Python, a warning says so and a `def run(` line is looked for. */
#include "task/task_int.h"

#include "core/proc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* ---- references and constraints as Python ------------------------------------------
 * FlashInfer-Bench's Definition validators parse the reference with
 * ast.parse and require a top-level function run (an ast.FunctionDef in the
 * module body: not async, not nested, not inside a string), and parse every
 * constraint with ast.parse(mode="eval").  C cannot parse Python, so a check
 * hands the references and constraints of every checked definition to one
 * Python process (the interpreter of Python references: kh_which_python)
 * that only parses them, never runs them.  Without one, a warning says so
 * and a line starting `def run(` is all that is looked for. */
static const char AST_CHECK[] =
    "import ast, json, sys, warnings\n"
    "warnings.simplefilter('ignore')\n"
    "def err(e):\n"
    "    return [getattr(e, 'msg', None) or str(e), getattr(e, 'lineno', 0) or 0,"
    " getattr(e, 'offset', 0) or 0]\n"
    "out = []\n"
    "for item in json.load(open(sys.argv[1], encoding='utf-8')):\n"
    "    r = {'constraints': []}\n"
    "    if item['reference'] is not None:\n"
    "        try:\n"
    "            mod = ast.parse(item['reference'], mode='exec')\n"
    "            r['run'] = any(isinstance(n, ast.FunctionDef) and n.name == 'run'"
    " for n in mod.body)\n"
    "        except (SyntaxError, ValueError) as e:\n"
    "            r['syntax'] = err(e)\n"
    "    for i, c in enumerate(item['constraints']):\n"
    "        if c is None:\n"
    "            continue\n"
    "        try:\n"
    "            ast.parse(c, mode='eval')\n"
    "        except (SyntaxError, ValueError) as e:\n"
    "            r['constraints'].append([i] + err(e))\n"
    "    out.append(r)\n"
    "print('KHLUA-AST ' + json.dumps({'python': sys.version.split()[0], 'results': out}))\n";

/* The task_has_run look, for when Python could not parse the references. */
static void check_run_lines(kh_task_set *s, kh_task_def **defs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *ref = json_string_value(json_object_get(defs[i]->json, "reference"));
        if (!ref || !*ref || task_has_run(ref))
            continue;
        size_t len;
        kh_err err;
        char *text = task_read_file(defs[i]->file, &len, &err);
        vctx v = {.s = s, .file = defs[i]->file, .text = text, .len = text ? len : 0,
                  .base_line = 1};
        VERR(&v, "reference", "expected Python source with a top-level 'def run(...)'");
        free(text);
    }
}

static void report_python(kh_task_set *s, const kh_task_def *d, json_t *r)
{
    json_t *syn = json_object_get(r, "syntax"), *cons = json_object_get(r, "constraints");
    int no_run = json_is_false(json_object_get(r, "run"));
    if (!syn && !no_run && !json_array_size(cons))
        return;
    size_t len;
    kh_err err;
    char *text = task_read_file(d->file, &len, &err);
    vctx v = {.s = s, .file = d->file, .text = text, .len = text ? len : 0, .base_line = 1};
    if (syn)
        VERR(&v, "reference", "expected Python source (FlashInfer-Bench parses it with "
             "ast.parse), got a syntax error at line %lld, column %lld of the reference: %s",
             (long long)json_integer_value(json_array_get(syn, 1)),
             (long long)json_integer_value(json_array_get(syn, 2)),
             json_string_value(json_array_get(syn, 0)));
    else if (no_run)
        VERR(&v, "reference", "expected Python source with a top-level 'def run(...)'; Python's "
             "ast finds no top-level function run (FlashInfer-Bench requires one)");
    json_t *all = json_object_get(d->json, "constraints");
    size_t i;
    json_t *c;
    vpush(&v, "constraints");
    json_array_foreach(cons, i, c) {
        size_t at = (size_t)json_integer_value(json_array_get(c, 0)), k = 0;
        for (size_t j = 0; j < at; j++) /* its place among d->constraints */
            k += json_is_string(json_array_get(all, j));
        if (k >= d->nconstraints || !d->constraints[k].expr)
            continue; /* khlua's own parser already named the problem */
        vpush_i(&v, (long)at);
        VERR(&v, NULL, "'%s' is not a Python expression (FlashInfer-Bench parses constraints with "
             "ast.parse): %s at column %lld", d->constraints[k].text,
             json_string_value(json_array_get(c, 1)),
             (long long)json_integer_value(json_array_get(c, 3)));
        vpop(&v);
    }
    vpop(&v);
    free(text);
}

void task_check_python(kh_task_set *s, const char *path)
{
    kh_task_def **defs = s->ndefs ? calloc(s->ndefs, sizeof *defs) : NULL;
    json_t *items = json_array();
    size_t n = 0;
    for (size_t i = 0; defs && items && i < s->ndefs; i++) {
        kh_task_def *d = s->defs[i];
        if (d->context)
            continue;
        json_t *cons = json_object_get(d->json, "constraints"), *texts = json_array();
        for (size_t k = 0; texts && k < json_array_size(cons); k++) {
            json_t *c = json_array_get(cons, k);
            json_array_append_new(texts, json_is_string(c) ? json_incref(c) : json_null());
        }
        json_t *ref = json_object_get(d->json, "reference");
        /* [texts] stolen by the pack, the item by the append, even when they fail */
        json_t *item = json_pack("{s:O, s:o}", "reference", json_is_string(ref) ? ref : json_null(),
                                 "constraints", texts);
        if (item && !json_array_append_new(items, item))
            defs[n++] = d;
    }
    const char *asked = NULL;
    char *py = n ? kh_which_python(&asked) : NULL;
    char why[600] = "";
    char tmp[4096] = "";
    kh_child_result res = {0};
    json_t *answer = NULL;
    if (!n) {
        goto out;
    } else if (!py) {
        snprintf(why, sizeof why, "no interpreter (%s not found; $KHLUA_PYTHON names another)",
                 asked ? asked : "python3");
        goto out;
    }
    const char *tdir = getenv("TMPDIR");
    snprintf(tmp, sizeof tmp, "%s/khlua-ast-XXXXXX", tdir && *tdir ? tdir : "/tmp");
    int fd = mkstemp(tmp);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
    if (!f) {
        snprintf(why, sizeof why, "cannot write a temporary file (%s): %s", tmp, strerror(errno));
        if (fd >= 0)
            close(fd);
        goto out;
    }
    int bad = json_dumpf(items, f, JSON_COMPACT);
    if (fclose(f) || bad) {
        snprintf(why, sizeof why, "cannot write %s", tmp);
        goto out;
    }
    char *argv[] = {py, "-I", "-c", (char *)AST_CHECK, tmp, NULL};
    kh_err err;
    if (kh_proc_run(argv, 120.0, 64u << 20, &res, &err)) {
        snprintf(why, sizeof why, "%s could not run: %s", py, err.msg);
        goto out;
    }
    const char *mark = res.out ? strstr(res.out, "KHLUA-AST ") : NULL;
    answer = mark ? json_loads(mark + 10, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    json_t *results = json_object_get(answer, "results");
    if (!res.exited || res.exit_code || json_array_size(results) != n) {
        char how[128];
        kh_child_describe(&res, how, sizeof how);
        snprintf(why, sizeof why, "%s did not answer (%s)%s%.200s", py, how,
                 res.out && *res.out ? ": " : "", res.out ? res.out : "");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        report_python(s, defs[i], json_array_get(results, i));
    s->sum.python_checked = n;
    const char *ver = json_string_value(json_object_get(answer, "python"));
    snprintf(s->python, sizeof s->python, "%s", ver ? ver : "?");
    s->sum.python = s->python;
out:
    if (*why) {
        task_add_problem(s, KH_TASK_WARNING, path, 0, "reference",
                         "not parsed as Python: %s; FlashInfer-Bench requires every reference to parse "
                         "(ast.parse) with a top-level function run, and every constraint to be a "
                         "Python expression: only a line starting 'def run(' was looked for", why);
        check_run_lines(s, defs, n);
    }
    if (*tmp)
        unlink(tmp);
    kh_child_result_free(&res);
    json_decref(answer);
    json_decref(items);
    free(py);
    free(defs);
}
