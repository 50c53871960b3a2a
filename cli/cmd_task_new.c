/* cmd_task_new.c: `khlua task new DIR [--from DEFINITION.json] [--name NAME]`:
 * a task package skeleton a person fills in (docs/candidate-format.md).
 *
 * Without --from: a working host package to edit (y = relu(x) over n float32
 * values): definition.json with a Python reference, three workloads with
 * fresh uuids, a trusted C reference named by khlua.reference, so `khlua
 * eval` passes at once and a policy can run.  With --from: the definition as
 * given, the workloads of its FlashInfer-Bench dataset when they sit beside
 * it (workloads/<op_type>/<name>.jsonl) or one workload to edit, and a C
 * reference stub with the definition's arguments whose body is to be written
 * (khlua.reference is set only once it exists: until then khlua eval checks
 * against the definition's Python reference).  Refuses to write into a
 * folder that already has a definition.json.  Exit 0 ok, 1 failure, 2 usage. */
#include "commands.h"

#include "task/task.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define P "khlua task new"

static void usage_new(FILE *f)
{
    fprintf(f, "usage: khlua task new DIR [--from DEFINITION.json] [--name NAME]\n"
               "  A task package skeleton in DIR (created; refused if it holds a\n"
               "  definition.json): definition.json, workloads.jsonl with fresh uuids and\n"
               "  solutions/NAME_ref_c.json, a C reference.\n"
               "  Without --from: a host task that works as it is (y = relu(x)), to edit.\n"
               "  --from FILE  start from a FlashInfer-Bench definition: its workloads come\n"
               "               from the dataset beside it when there, and the C reference is\n"
               "               a stub with the definition's arguments for you to write\n"
               "  --name NAME  the definition's name (default: DIR's last part, or the\n"
               "               definition's own with --from)\n"
               "Then: khlua task check DIR; khlua eval --task DIR --solution NAME_ref_c.\n"
               "exit codes: 0 ok, 1 failure, 2 usage\n");
}

/* A random (version 4) UUID from the OS. */
static int uuid4(char out[37], kh_err *err)
{
    uint64_t a, b;
    if (kh_secure_seed(&a, err) || kh_secure_seed(&b, err))
        return 0;
    unsigned char x[16];
    for (int i = 0; i < 8; i++) {
        x[i] = (unsigned char)(a >> (8 * i));
        x[8 + i] = (unsigned char)(b >> (8 * i));
    }
    x[6] = (unsigned char)((x[6] & 0x0f) | 0x40);
    x[8] = (unsigned char)((x[8] & 0x3f) | 0x80);
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], x[9], x[10], x[11], x[12],
             x[13], x[14], x[15]);
    return 1;
}

static int write_json(const char *path, const json_t *j, int indent)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, P ": %s: %s\n", path, strerror(errno));
        return 0;
    }
    int ok = json_dumpf(j, f, indent ? JSON_INDENT(2) | JSON_PRESERVE_ORDER
                                     : JSON_COMPACT | JSON_PRESERVE_ORDER) == 0;
    ok &= fputc('\n', f) != EOF;
    ok &= fclose(f) == 0;
    if (!ok)
        fprintf(stderr, P ": writing %s failed\n", path);
    return ok;
}

/* The C type a host function takes for a tensor of dtype. */
static const char *c_type(const char *dtype)
{
    if (!dtype)
        return "void";
    if (!strcmp(dtype, "float32"))
        return "float";
    if (!strcmp(dtype, "float64"))
        return "double";
    if (!strcmp(dtype, "int64"))
        return "int64_t";
    if (!strcmp(dtype, "int32"))
        return "int32_t";
    if (!strcmp(dtype, "int16") || !strcmp(dtype, "float16") || !strcmp(dtype, "bfloat16"))
        return "uint16_t"; /* 16-bit floats as their bits */
    if (!strcmp(dtype, "int8"))
        return "int8_t";
    return "uint8_t"; /* bool, uint8, float8 formats */
}

static const char *str_or(const json_t *o, const char *k, const char *dflt)
{
    const char *v = json_string_value(json_object_get(o, k));
    return v ? v : dflt;
}

static int is_scalar(const json_t *t) { return json_is_null(json_object_get(t, "shape")); }

/* The stub's C source and its manifest (args in the definition's order:
 * inputs, outputs, then every var axis as int64). */
static void stub_for(const json_t *def, const char *fn, char **src, json_t **manifest)
{
    size_t cap = 8192, n = 0;
    char *s = malloc(cap);
    json_t *args = json_array();
    n += (size_t)snprintf(s + n, cap - n,
                          "#include <stdint.h>\n\n/* The trusted reference of %s, written by "
                          "hand: the definition's\n * Python reference says what it computes. "
                          "16-bit floats come as their\n * bits (uint16_t). */\nvoid %s(",
                          json_string_value(json_object_get(def, "name")), fn);
    const char *roles[] = {"inputs", "outputs"};
    int first = 1;
    for (int r = 0; r < 2; r++) {
        const char *k;
        json_t *t;
        json_object_foreach(json_object_get(def, roles[r]), k, t) {
            const char *dt = json_string_value(json_object_get(t, "dtype"));
            int sc = r == 0 && is_scalar(t);
            n += (size_t)snprintf(s + n, cap - n, "%s%s%s %s%s", first ? "" : ", ",
                                  r == 0 && !sc ? "const " : "", c_type(dt), sc ? "" : "*", k);
            first = 0;
            json_array_append_new(args, json_pack("{s:s}", sc ? "scalar" : r ? "output" : "input",
                                                  k));
            if (n > cap - 512)
                break;
        }
    }
    const char *k;
    json_t *a;
    json_object_foreach(json_object_get(def, "axes"), k, a) {
        if (strcmp(str_or(a, "type", ""), "var"))
            continue;
        n += (size_t)snprintf(s + n, cap - n, "%sint64_t %s", first ? "" : ", ", k);
        first = 0;
        json_array_append_new(args, json_pack("{s:s, s:s}", "axis", k, "type", "int64"));
        if (n > cap - 512)
            break;
    }
    snprintf(s + n, cap - n, ")\n{\n    /* TODO: write the outputs from the inputs */\n}\n");
    *src = s;
    *manifest = json_pack("{s:s, s:s, s:o}", "backend", "host", "function", fn, "args", args);
}

static json_t *solution_json(const char *name, const char *def_name, const char *fn,
                             const char *src, json_t *manifest, const char *desc)
{
    char entry[300];
    snprintf(entry, sizeof entry, "%s.c::%s", fn, fn);
    char file[300];
    snprintf(file, sizeof file, "%s.c", fn);
    return json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:[s], s:s, s:b, s:o}, s:[{s:s, s:s}]}",
                     "name", name, "definition", def_name, "author", "you", "description", desc,
                     "spec", "language", "cpp", "target_hardware", "cpu", "entry_point", entry,
                     "destination_passing_style", 1, "khlua", manifest, "sources", "path", file,
                     "content", src);
}

/* The workloads of a FlashInfer-Bench dataset beside def_path
 * (<root>/definitions/<op>/<name>.json -> <root>/workloads/<op>/<name>.jsonl). */
static char *dataset_workloads(const char *def_path, const char *name)
{
    const char *d = strstr(def_path, "definitions/");
    if (!d || (d != def_path && d[-1] != '/'))
        return NULL;
    const char *op = d + strlen("definitions/");
    const char *slash = strchr(op, '/');
    if (!slash)
        return NULL;
    char path[4300];
    snprintf(path, sizeof path, "%.*sworkloads/%.*s/%s.jsonl", (int)(d - def_path), def_path,
             (int)(slash - op), op, name);
    return access(path, R_OK) ? NULL : kh_strdup(path);
}

/* The reference solution, solutions/<ref_name>.json under dir: the relu one
 * without from, else a stub with def's arguments.  1 when written. */
static int write_reference(const char *sdir, const json_t *def, const char *def_name,
                           const char *fn, const char *ref_name, const char *from)
{
    char *src = NULL;
    json_t *man = NULL;
    if (!from) {
        src = kh_strdup("#include <stdint.h>\n\n/* The trusted reference: y = relu(x). */\n"
                        "void REF(const float *x, float *y, int64_t n)\n{\n"
                        "    for (int64_t i = 0; i < n; i++)\n"
                        "        y[i] = x[i] > 0.0f ? x[i] : 0.0f;\n}\n");
        char *at = strstr(src, "REF");
        char *full = malloc(strlen(src) + strlen(fn) + 1);
        snprintf(full, strlen(src) + strlen(fn) + 1, "%.*s%s%s", (int)(at - src), src, fn, at + 3);
        free(src);
        src = full;
        man = json_pack("{s:s, s:s, s:[{s:s}, {s:s}, {s:s, s:s}]}", "backend", "host",
                        "function", fn, "args", "input", "x", "output", "y", "axis", "n", "type",
                        "int64");
    } else {
        stub_for(def, fn, &src, &man);
    }
    json_t *sol = solution_json(ref_name, def_name, fn, src, man,
                                from ? "the trusted reference: a stub to write (see the "
                                       "definition's Python reference)"
                                     : "the trusted reference");
    free(src);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.json", sdir, ref_name);
    int ok = write_json(path, sol, 1);
    json_decref(sol);
    return ok;
}

/* The dataset's workloads file ds copied to path, each line under this
 * package's definition name; *nw counts them, *blobs is set when one reads
 * safetensors files.  1 when written. */
static int copy_workloads(const char *ds, const char *path, const char *def_name, int *nw,
                          int *blobs)
{
    int ok = 1;
    FILE *in = fopen(ds, "r"), *out = fopen(path, "w");
    char *line = NULL;
    size_t lcap = 0;
    while (in && out && getline(&line, &lcap, in) > 0) {
        json_t *w = json_loads(line, JSON_PRESERVE_ORDER, NULL);
        if (!json_is_object(w)) {
            json_decref(w);
            continue;
        }
        json_object_set_new(w, "definition", json_string(def_name));
        char *t = json_dumps(w, JSON_COMPACT | JSON_PRESERVE_ORDER);
        *blobs |= t && strstr(t, "safetensors") != NULL;
        ok &= t && fprintf(out, "%s\n", t) > 0;
        free(t);
        json_decref(w);
        (*nw)++;
    }
    free(line);
    if (in)
        fclose(in);
    ok &= out && fclose(out) == 0;
    return ok;
}

/* Workloads to edit written to path, random inputs and fresh uuids: three
 * of growing size for the relu template, one with every var axis 1 with
 * from; *nw counts them.  1 when written. */
static int make_workloads(const char *path, const json_t *def, const char *def_name,
                          const char *from, int *nw)
{
    kh_err err;
    FILE *out = fopen(path, "w");
    int ok = out != NULL;
    const long sizes[] = {1000, 65536, 1 << 20};
    for (int i = 0; out && i < (from ? 1 : 3); i++) {
        char u[37];
        if (!uuid4(u, &err)) {
            fprintf(stderr, P ": %s\n", err.msg);
            ok = 0;
            break;
        }
        json_t *axes = json_object(), *inputs = json_object();
        const char *k;
        json_t *a;
        json_object_foreach(json_object_get(def, "axes"), k, a) {
            if (!strcmp(str_or(a, "type", ""), "var"))
                json_object_set_new(axes, k, json_integer(from ? 1 : sizes[i]));
        }
        json_object_foreach(json_object_get(def, "inputs"), k, a)
            json_object_set_new(inputs, k, json_pack("{s:s}", "type", "random"));
        json_t *w = json_pack("{s:s, s:n, s:n, s:{s:s, s:o, s:o}}", "definition", def_name,
                              "solution", "evaluation", "workload", "uuid", u, "axes", axes,
                              "inputs", inputs);
        char *t = json_dumps(w, JSON_COMPACT | JSON_PRESERVE_ORDER);
        ok &= t && fprintf(out, "%s\n", t) > 0;
        free(t);
        json_decref(w);
        (*nw)++;
    }
    if (out)
        ok &= fclose(out) == 0;
    return ok;
}

/* What was written, and what to do next, on stdout. */
static void print_made(const char *dir, const char *def_name, int nw, const char *ds, int blobs,
                       const char *ref_name, const char *from)
{
    printf("%s: definition.json (%s), workloads.jsonl (%d workload%s%s%s), "
           "solutions/%s.json\n",
           dir, def_name, nw, nw == 1 ? "" : "s", ds ? " from " : "", ds ? ds : "", ref_name);
    if (blobs)
        printf("note: some workloads read safetensors blobs by paths relative to the dataset; "
               "copy those files into %s or drop those workloads\n", dir);
    if (from)
        printf("next: write the reference in solutions/%s.json (the definition's Python "
               "reference says what it computes), set its var axes in workloads.jsonl if they "
               "are 1, add \"khlua\": {\"reference\": \"%s\"} to definition.json, then:\n",
               ref_name, ref_name);
    else
        printf("next: edit definition.json, the reference and workloads.jsonl (it works as it "
               "is), then:\n");
    printf("  khlua task check %s\n  khlua eval --task %s --solution %s\n", dir, dir, ref_name);
}

/* argv (after "task new") into *dir, *from and *name: -1 to go on, else
 * the exit code (0 after --help, 2 on a usage error, said on stderr). */
static int parse_new(int argc, char **argv, const char **dir, const char **from,
                     const char **name)
{
    *dir = *from = *name = NULL;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage_new(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--from") && i + 1 < argc) {
            *from = argv[++i];
        } else if (!strcmp(argv[i], "--name") && i + 1 < argc) {
            *name = argv[++i];
        } else if (argv[i][0] == '-' || *dir) {
            fprintf(stderr, P ": unexpected argument '%s'\n", argv[i]);
            usage_new(stderr);
            return 2;
        } else {
            *dir = argv[i];
        }
    }
    if (!*dir) {
        fprintf(stderr, P ": which folder?\n");
        usage_new(stderr);
        return 2;
    }
    return -1;
}

int kh_cmd_task_new(int argc, char **argv)
{
    const char *dir, *from, *name;
    int prc = parse_new(argc, argv, &dir, &from, &name);
    if (prc >= 0)
        return prc;
    char path[4200];
    snprintf(path, sizeof path, "%s/definition.json", dir);
    if (!access(path, F_OK)) {
        fprintf(stderr, P ": %s already holds a definition.json; nothing written\n", dir);
        return 1;
    }
    json_t *def = NULL;
    if (from) {
        json_error_t je;
        def = json_load_file(from, JSON_PRESERVE_ORDER, &je);
        if (!json_is_object(def) || !json_is_string(json_object_get(def, "name"))) {
            fprintf(stderr, P ": %s:%d: %s\n", from, je.line,
                    def ? "not a definition (no \"name\")" : je.text);
            json_decref(def);
            return 1;
        }
    }
    const char *base = strrchr(dir, '/');
    base = base && base[1] ? base + 1 : dir;
    char nm[128];
    snprintf(nm, sizeof nm, "%s", name ? name
                                       : from ? json_string_value(json_object_get(def, "name"))
                                              : base);
    for (char *c = nm; *c; c++) /* a C identifier for the function name */
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9')))
            *c = '_';
    char fn[160], ref_name[200];
    snprintf(fn, sizeof fn, "%s_ref", nm);
    snprintf(ref_name, sizeof ref_name, "%s_ref_c", nm);
    if (!from) {
        def = json_pack(
            "{s:s, s:s, s:s, s:[s], s:{s:{s:s, s:s}}, s:[s], s:{s:{s:[s], s:s}}, "
            "s:{s:{s:[s], s:s}}, s:s, s:{s:s, s:{s:f, s:f}}}",
            "name", nm, "op_type", "elementwise", "description",
            "TODO: what this computes. Template: y = relu(x) over n float32 values.", "tags",
            "status:draft", "axes", "n", "type", "var", "description", "Elements.",
            "constraints", "n >= 1", "inputs", "x", "shape", "n", "dtype", "float32", "outputs",
            "y", "shape", "n", "dtype", "float32", "reference",
            "import torch\n\ndef run(x):\n    return torch.relu(x)\n", "khlua", "reference",
            ref_name, "tolerance", "atol", 1e-6, "rtol", 1e-6);
    }
    char orig[256]; /* the dataset names the workloads file after the original */
    snprintf(orig, sizeof orig, "%s", str_or(def, "name", nm));
    if (from && name)
        json_object_set_new(def, "name", json_string(nm));
    if (from) /* khlua's fields name another package's solutions */
        json_object_del(def, "khlua");
    char def_name[256];
    snprintf(def_name, sizeof def_name, "%s", str_or(def, "name", nm));
    if ((mkdir(dir, 0777) && errno != EEXIST)) {
        fprintf(stderr, P ": %s: %s\n", dir, strerror(errno));
        json_decref(def);
        return 1;
    }
    char sdir[4200];
    snprintf(sdir, sizeof sdir, "%s/solutions", dir);
    if (mkdir(sdir, 0777) && errno != EEXIST) {
        fprintf(stderr, P ": %s: %s\n", sdir, strerror(errno));
        json_decref(def);
        return 1;
    }
    int ok = write_reference(sdir, def, def_name, fn, ref_name, from);
    /* the definition */
    snprintf(path, sizeof path, "%s/definition.json", dir);
    ok &= write_json(path, def, 1);
    /* the workloads */
    snprintf(path, sizeof path, "%s/workloads.jsonl", dir);
    char *ds = from ? dataset_workloads(from, orig) : NULL;
    int nw = 0, blobs = 0;
    if (ds)
        ok &= copy_workloads(ds, path, def_name, &nw, &blobs);
    else
        ok &= make_workloads(path, def, def_name, from, &nw);
    json_decref(def);
    if (ok)
        print_made(dir, def_name, nw, ds, blobs, ref_name, from);
    free(ds);
    return ok ? 0 : 1;
}
