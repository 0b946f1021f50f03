// Shared pieces of the `stg` command line: option parsing helpers and model building.
#ifndef STG_CLI_H
#define STG_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "graph/graph.h"

struct rt_backend;
struct stg_plan;
struct stg_budget_report;

#define CLI_MAX_SETS 64

// Options every model-reading command takes.
typedef struct cli_model_opts {
    const char *model;
    const char *sets[CLI_MAX_SETS + 1];
    int nsets;
    char attention_set[64];
    char vocab_set[48]; // --tokenizer TOK: "vocab=N", the tokenizer's vocabulary size (for the vocab role's dim)
    stg_precision precision;
    bool train; // build backward and optimizer
    stg_optim_config optim;
    // --optimizer-in-backward sets optim.in_backward: each parameter's AdamW update runs as soon as
    // its gradient is final, clipping by the previous step's gradient norm.
    // --group-matmuls off: no matmul_group ops (graph_group_matmuls), every product its own op
    bool ungrouped;
    int64_t budget; // --memory-budget: bytes, 0 for none, -1 for auto (the device's free memory less a margin)
    // --grad-accum N sets optim.grad_accum; --total-batch-tokens T asks cli_resolve_accum for the N
    // that makes T tokens per optimizer step (0: not given)
    int64_t total_batch_tokens;
} cli_model_opts;

void cli_model_opts_init(cli_model_opts *m);

// Tries to consume argv[*i] (and its value) as a model option. Returns 1 when consumed, 0 when the
// argument is not a model option, -1 on a bad value (message printed).
int cli_model_arg(cli_model_opts *m, int argc, char **argv, int *i);

// The model file and every file it includes (loaded without --set; a model that does not load
// gives just its own name: the command's real load reports why), as inputs no output may replace:
// fills in[] and what[] (at most STG_MAX_MODEL_FILES) and returns how many. The strings live
// until the next call.
int cli_model_inputs(const char *model, const char **in, const char **what);

// Loads, differentiates (when m->train), schedules and validates. Prints the error and returns NULL.
stg_graph *cli_build(const cli_model_opts *m);

// --total-batch-tokens T: sets m->optim.grad_accum to T / (the tokens of one micro-batch: the
// model's batch x ctx, or its rows for a feature model, x `world` data-parallel ranks), refusing a T
// that is not a whole multiple of them. Checks --grad-accum against the rest of the command (a
// forward-only step, --optimizer-in-backward). Prints the error and returns -1 (bad input: exit 2).
int cli_resolve_accum(cli_model_opts *m, int world, const char *cmd);
// Tokens of one micro-batch of one rank (the model's tokens input, or its rows), 0 when the model
// has neither.
int64_t cli_micro_tokens(const stg_graph *g);

// Parsing numbers from the command line (prints a message and returns -1 on a bad value).
int cli_int(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out);
int cli_double(const char *opt, const char *s, double lo, double hi, double *out);
// The value after option argv[*i]; prints an error when missing.
const char *cli_value(int argc, char **argv, int *i);

// Writes through a temporary file renamed over `path` on success, so a failed write never
// destroys what was there. cli_out_open returns stdout when path is NULL or "-".
FILE *cli_out_open(const char *path, char *tmp, size_t tmpn);
int cli_out_close(FILE *f, const char *path, const char *tmp);

// A backend by name ("cpu" or "cuda"); NULL picks cuda when a GPU is present, else cpu. Prints
// the reason and returns NULL when it cannot. cuda: CLI_CUDA_* flags (ignored by the cpu backend).
#define CLI_CUDA_TF32 1u      // TF32 tensor cores for fp32 matmuls (--tf32)
#define CLI_CUDA_GEMM_TUNE 2u // matmul algorithms chosen by timing (--gemm-tune on)
struct rt_backend *cli_open_backend(const char *name, stg_precision prec, unsigned cuda);
struct rt_backend *cli_open_backend_at(const char *name, stg_precision prec, unsigned cuda, int device);
// --gemm-tune on|off at argv[*i] (advancing *i past the value): 1 when it was that option (*on
// set), 0 when it is another, -1 (printed) on a bad value.
int cli_gemm_tune_arg(int argc, char **argv, int *i, bool *on);

// Data parallelism from a launcher's environment (runtime/dist.h): cli_dist_env fills d (world 1
// when not launched) and sets m->optim.dp_world under a launcher; cli_dist_join connects the
// processes and joins backend b (NCCL on CUDA, sockets on the CPU). Print and return -1 on error.
struct rt_dist;
int cli_dist_env(cli_model_opts *m, struct rt_dist *d);
int cli_dist_join(struct rt_dist *d, struct rt_backend *b);

// Plans *g (cli_build's): within the memory budget when one was given (recomputing activations as
// needed in a step rebuilt from m, which then replaces *g; saying so on stderr; `rep` gets the
// details), plainly otherwise. b may be NULL (no device: then an `auto` budget is an error). Prints
// the error and returns -1 (*g is then unchanged).
int cli_plan(const cli_model_opts *m, stg_graph **g, struct rt_backend *b, struct stg_plan **p, struct stg_budget_report *rep);

// Before allocating: whether the plan fits the backend's free memory. When it does not, prints
// so with the largest batch (and ctx) that would fit, and returns -1.
int cli_check_fit(const cli_model_opts *m, const stg_graph *g, const struct stg_plan *p, struct rt_backend *b);

// Usage of command `cmd` from the options table (tools/stg/usage.c): -1 for an unknown command;
// f NULL: only whether cmd is in the table (0) or not (-1).
int cli_usage(FILE *f, const char *cmd);
// 1 when --help or -h comes before any "--".
int cli_help_asked(int argc, char **argv);

// A forward-only executor of the model m describes (m->train ignored), `rows` rows per run (0: the
// model's batch; else --set batch=rows after the others), parameters initialised as for training
// (rt_params_load or rt_eval_copy_params then sets them). Prints the error and returns -1.
// A CUDA backend holds one prepared graph at a time (its plans and tables), so on CUDA each
// forward executor gets a backend of its own on `device` (freed with it); the CPU backend is shared.
typedef struct cli_fwd {
    stg_graph *g;
    struct stg_plan *p;
    struct rt_exec *e;
    struct rt_backend *own; // NULL: the caller's backend
} cli_fwd;
int cli_fwd_open(const cli_model_opts *m, int64_t rows, struct rt_backend *b, int device, cli_fwd *x);
void cli_fwd_free(cli_fwd *x);

// --profile's tables (tools/stg/profile.c) from pm[s], the device ms of schedule position s
// (rt_exec_profile): by op kind (returns the total ms), and by op name with layer numbers folded,
// the `top` largest; with on_path (rt_dag_length's) the part on the critical path, and with dag the
// `whatif` largest names' effect on its length `len`. cli_profile_names returns -1 out of memory.
struct rt_dag;
double cli_profile_kinds(FILE *f, const stg_graph *g, const double *pm);
int cli_profile_names(FILE *f, const stg_graph *g, const double *pm, const bool *on_path, const struct rt_dag *dag, double len, int top,
                      int whatif);

int cmd_check(int argc, char **argv);
int cmd_graph(int argc, char **argv);
int cmd_memreport(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_step(int argc, char **argv);
int cmd_tokens(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_attnbench(int argc, char **argv);
int cmd_launch(int argc, char **argv);
int cmd_commbench(int argc, char **argv);
int cmd_tokenizer(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_sample(int argc, char **argv);

// stg train --sample-every (tools/stg/train_sample.c): a sampler reading the training executor's
// parameters; cli_train_sample is rt_train_cfg's sample_fn. Open prints its errors.
typedef struct cli_train_sampler cli_train_sampler;
struct rt_exec;
struct rt_text;
int cli_train_sampler_open(const cli_model_opts *m, const char *tok_path, const char *prompt, uint64_t seed, const char *backend, int device,
                           const struct rt_exec *train, cli_train_sampler **out);
int cli_train_sample(void *ctx, int64_t step, struct rt_text *text, stg_err *err);
void cli_train_sampler_free(cli_train_sampler *t);
int cmd_eval(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_plot(int argc, char **argv);

#endif
