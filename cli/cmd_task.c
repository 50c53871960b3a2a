/* cmd_task.c: `khlua task check PATH [--strict] [--json]`: validates one
 * definition, solution or workload file, a task package or a whole
 * FlashInfer-Bench dataset (engine/task/task.h) and prints a summary, then every
 * problem as `file:line: field: message`.  Exit 0 clean (warnings allowed),
 * 1 on any error, 2 on usage errors. */
#include "cli.h"
#include "commands.h"

#include "task/task.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: khlua task check PATH [--strict] [--json]\n"
            "       khlua task new DIR [--from DEFINITION.json] [--name NAME]   a package "
            "skeleton\n"
            "\n"
            "Validates PATH against FlashInfer-Bench's formats and khlua's additions:\n"
            "  a Definition or Solution .json, a workload or trace .jsonl, a task package\n"
            "  (a folder with definition.json), or a dataset (definitions/ workloads/\n"
            "  solutions/ traces/).  Constraints are evaluated against every workload's\n"
            "  axes; candidates' launch manifests are resolved for every workload.\n"
            "  References and constraints are parsed by Python's ast as FlashInfer-Bench\n"
            "  does ($KHLUA_PYTHON, else python3; a warning where there is none).\n"
            "  A FlashInfer-Bench solution without a launch manifest (spec.khlua) is\n"
            "  valid, with a warning: khlua eval cannot run it.\n"
            "Prints a summary, then every problem as `file:line: field: message`.\n"
            "\n"
            "  --strict  an absent safetensors blob is an error, not a warning\n"
            "  --json    one JSON object {summary, problems} instead of lines\n"
            "\n"
            "Exit 0 when no errors were found (warnings allowed), 1 on errors, 2 on usage.\n");
}

static json_t *report_json(const kh_task_set *s, const char *path)
{
    const kh_task_summary *m = kh_task_set_summary(s);
    json_t *deferred = json_array();
    for (size_t i = 0; i < kh_task_ndeferred(s); i++)
        json_array_append_new(deferred, json_string(kh_task_deferred_at(s, i)));
    json_t *sum = json_pack(
        "{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o}",
        "path", path, "kind", m->kind ? m->kind : "?", "files", (json_int_t)m->files,
        "definitions", (json_int_t)m->definitions, "context_definitions",
        (json_int_t)m->context_definitions, "workload_files", (json_int_t)m->workload_files,
        "workloads", (json_int_t)m->workloads, "traces", (json_int_t)m->traces, "solutions",
        (json_int_t)m->solutions, "candidates", (json_int_t)m->candidates, "constraints",
        (json_int_t)m->constraints, "constraint_checks", (json_int_t)m->constraint_checks,
        "deferred", (json_int_t)m->deferred, "data_checks", (json_int_t)m->data_checks, "blobs_missing", (json_int_t)m->blobs_missing,
        "blobs_checked", (json_int_t)m->blobs_checked, "errors", (json_int_t)m->errors, "warnings",
        (json_int_t)m->warnings, "deferred_constraints", deferred);
    if (sum)
        json_object_set_new(sum, "python_checked", json_integer((json_int_t)m->python_checked));
    if (sum && m->python)
        json_object_set_new(sum, "python", json_string(m->python));
    json_t *probs = json_array();
    for (size_t i = 0; i < kh_task_nproblems(s); i++) {
        const kh_task_problem *p = kh_task_problem_at(s, i);
        json_array_append_new(
            probs, json_pack("{s:s, s:s, s:i, s:s, s:s}", "severity",
                             p->severity == KH_TASK_ERROR ? "error" : "warning", "file", p->file,
                             "line", p->line, "field", p->field, "message", p->msg));
    }
    return json_pack("{s:o, s:o}", "summary", sum, "problems", probs);
}

static void print_text(const kh_task_set *s, const char *path)
{
    const kh_task_summary *m = kh_task_set_summary(s);
    printf("%s: %s: %zu definition%s, %zu workload%s in %zu file%s, %zu trace%s, %zu solution%s "
           "(%zu candidate%s)\n",
           path, m->kind, m->definitions, m->definitions == 1 ? "" : "s", m->workloads,
           m->workloads == 1 ? "" : "s", m->workload_files, m->workload_files == 1 ? "" : "s",
           m->traces, m->traces == 1 ? "" : "s", m->solutions, m->solutions == 1 ? "" : "s",
           m->candidates, m->candidates == 1 ? "" : "s");
    if (m->context_definitions)
        printf("  (%zu definition%s loaded from the dataset or package around it, not checked)\n",
               m->context_definitions, m->context_definitions == 1 ? "" : "s");
    printf("  constraints: %zu; %zu from axes and shapes, evaluated %zu times over workloads; "
           "%zu read tensor data, evaluated %zu times where the blobs are here, deferred "
           "elsewhere\n",
           m->constraints, m->constraints - m->deferred, m->constraint_checks, m->deferred,
           m->data_checks);
    for (size_t i = 0; i < kh_task_ndeferred(s); i++)
        printf("    deferred: %s\n", kh_task_deferred_at(s, i));
    printf("  safetensors blobs: %zu checked, %zu absent\n", m->blobs_checked, m->blobs_missing);
    if (m->python)
        printf("  references and constraints of %zu definition%s parsed by Python %s (ast.parse, "
               "as FlashInfer-Bench does)\n", m->python_checked, m->python_checked == 1 ? "" : "s",
               m->python);
    printf("  %zu error%s, %zu warning%s\n", m->errors, m->errors == 1 ? "" : "s", m->warnings,
           m->warnings == 1 ? "" : "s");
    char buf[2048];
    for (size_t i = 0; i < kh_task_nproblems(s); i++) {
        const kh_task_problem *p = kh_task_problem_at(s, i);
        printf("%s: %s\n", p->severity == KH_TASK_ERROR ? "error" : "warning",
               kh_task_problem_format(p, buf, sizeof buf));
    }
}

static int check(int argc, char **argv)
{
    const char *path = NULL;
    int json = 0;
    kh_task_opts opts = {.python = 1};
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--strict")) {
            opts.strict = 1;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "khlua task check: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (path) {
            fprintf(stderr, "khlua task check: one PATH only (got '%s' and '%s')\n", path, argv[i]);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        fprintf(stderr, "khlua task check: missing PATH\n");
        usage(stderr);
        return 2;
    }
    kh_task_set *s;
    kh_err err;
    if (kh_task_load(path, &opts, &s, &err)) {
        fprintf(stderr, "khlua task check: %s\n", err.msg);
        return 1;
    }
    if (json) {
        json_t *r = report_json(s, path);
        char *txt = r ? json_dumps(r, JSON_INDENT(2)) : NULL;
        if (txt)
            puts(txt);
        free(txt);
        json_decref(r);
    } else {
        print_text(s, path);
    }
    int rc = kh_task_set_summary(s)->errors ? 1 : 0;
    kh_task_set_free(s);
    return rc;
}

int kh_cmd_task(kh_engine *e, int argc, char **argv)
{
    (void)e;
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "check")) {
        if (kh_cli_wants_help(argc, argv)) {
            usage(stdout);
            return 0;
        }
        return check(argc, argv);
    }
    if (!strcmp(argv[1], "new"))
        return kh_cmd_task_new(argc, argv);
    fprintf(stderr, "khlua task: unknown subcommand '%s' (known: check, new)\n", argv[1]);
    usage(stderr);
    return 2;
}
