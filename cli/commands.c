/* commands.c: the table of built-in commands: each one's name, the line the
 * usage text shows for it, and its entry point (cmd_<name>.c). */
#include "commands.h"

#include <string.h>

static const kh_command commands[] = {
    {"doctor", "what this machine offers and what is missing", kh_cmd_doctor},
    {"llm", "ask a model (OpenAI, Anthropic, compatible servers, agent CLIs, replay)", kh_cmd_llm},
    {"worker", "a worker process (started by khlua itself)", kh_cmd_worker},
    {"task", "check task files, packages and FlashInfer-Bench datasets", kh_cmd_task},
    {"compile", "compile a CUDA file with NVRTC and show its kernels' resources", kh_cmd_compile},
    {"store", "the artifact store: ls, show, cat, stats, verify, export, import, gc, backup",
     kh_cmd_store},
    {"profile", "profiler metrics and the bottleneck state of a launch list", kh_cmd_profile},
    {"eval", "evaluate a solution on a task's workloads: verdicts, checks, timing", kh_cmd_eval},
    {"compare", "compare recorded runs: tables (markdown, CSV, JSON), SVG chart, HTML", kh_cmd_compare},
    {"best", "a run's best kernel out of the store: Solution JSON, source, figures", kh_cmd_best},
    {"export", "a solution as FlashInfer-Bench runs it: Solution JSON, kernels, TVM-FFI entry",
     kh_cmd_export},
};

const kh_command *kh_cli_command(const char *name)
{
    for (size_t k = 0; k < KH_ARRAY_LEN(commands); k++)
        if (!strcmp(name, commands[k].name))
            return &commands[k];
    return NULL;
}

void kh_cli_print_commands(FILE *f)
{
    for (size_t i = 0; i < KH_ARRAY_LEN(commands); i++)
        fprintf(f, "  %-14s  %s\n", commands[i].name, commands[i].summary);
}
