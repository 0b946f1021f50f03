// Every command's usage, from one table: `stg CMD --help` prints it, bad command lines print it,
// and the README's "Options" section is this output (tests/test_readme.c compares them), so the
// documentation cannot drift from the program.
#include <stdio.h>
#include <string.h>

#include "tools/stg/cli.h"

enum {
    C_CHECK = 1u << 0, C_GRAPH = 1u << 1, C_MEMREPORT = 1u << 2, C_TRAIN = 1u << 3, C_STEP = 1u << 4, C_BENCH = 1u << 5,
    C_ATTN = 1u << 6, C_COMM = 1u << 7, C_LAUNCH = 1u << 8, C_TOKENS = 1u << 9, C_SAMPLE = 1u << 10,
    C_EVAL = 1u << 16, C_EXPORT = 1u << 17, C_IMPORT = 1u << 18, C_PLOT = 1u << 19,
    C_MODEL = C_CHECK | C_GRAPH | C_MEMREPORT | C_TRAIN | C_STEP | C_BENCH | C_SAMPLE | C_EVAL | C_EXPORT | C_IMPORT, // commands that read a model
    C_PLAN = C_MEMREPORT | C_TRAIN | C_BENCH,                             // commands that plan a step
};

typedef struct {
    const char *name;
    unsigned bit;
    const char *synopsis; // after "usage: stg NAME "
    const char *about;
} cmd_usage;

static const cmd_usage cmds[] = {
    {"check", C_CHECK, "MODEL [options]", "load, differentiate and validate; print ops, tensors, FLOPs and every parameter"},
    {"graph", C_GRAPH, "MODEL --dot [-o FILE.dot] [options]", "the step's graph (forward, backward, optimizer) as Graphviz"},
    {"memreport", C_MEMREPORT, "MODEL [options]", "the memory plan against the analytical formula and the lower bound"},
    {"train", C_TRAIN, "MODEL [options]", "train (the synthetic Markov source when no --data is given); checkpoints, logs"},
    {"step", C_STEP, "MODEL --init PARAMS.safetensors --batch BATCH.npy --dump OUT.safetensors [options]",
     "one forward and backward on a given batch; writes the loss, the logits (none with a fused head) and every gradient"},
    {"bench", C_BENCH, "MODEL [options]", "timed forward, forward+backward or whole steps (graph or eager)"},
    {"export", C_EXPORT, "MODEL --init CKPT --hf DIR [options]",
     "a Hugging Face model directory: config.json, model.safetensors with its tensor names, the tokenizer when given"},
    {"import", C_IMPORT, "MODEL --hf DIR -o FILE.safetensors [options]", "a Hugging Face model directory back into stg's names, for --init"},
    {"eval", C_EVAL, "MODEL --init CKPT --data FILE [options]",
     "the exact mean loss over every non-overlapping ctx-window of a token file: loss, perplexity, bits per byte"},
    {"attn-bench", C_ATTN, "[options]", "CS336's attention study: naive vs flash, time and memory by d_head and seq"},
    {"comm-bench", C_COMM, "[options]  (under stg launch -n N)", "NCCL all-reduce time and bandwidth, 1 MB to 1 GB"},
    {"launch", C_LAUNCH, "-n N [options] -- COMMAND [ARGS...]",
     "N local processes of COMMAND with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT set"},
    {"plot", C_PLOT, "LOG.jsonl... -o FILE.svg [options]",
     "the runs' loss and validation loss against steps and wall-clock time, learning rate and tokens/s beneath, as one SVG"},
    {"tokens", C_TOKENS, "TEXT -o FILE.bin", "byte-level tokens (vocab 256, uint16 little-endian) of any file"},
    {"sample", C_SAMPLE, "MODEL --init CKPT (--prompt TEXT | --prompt-ids FILE) [options]",
     "text from a model: the prompt prefilled, then one token per decode step (a captured CUDA Graph on the GPU), streamed"},
};

typedef struct {
    unsigned cmds;
    const char *opt; // the option and its value, as typed
    const char *help;
} opt_usage;

// One row per option; a row may serve several commands. Order: as printed.
static const opt_usage opts[] = {
    {C_MODEL, "--set name=value", "override a dim (an integer expression, e.g. ctx=1024) or a model option"},
    {C_MODEL & ~C_SAMPLE, "--attention naive|flash", "attention written out or fused (default flash)"},
    {C_MODEL & ~(C_STEP | C_EXPORT | C_IMPORT), "--precision fp32|bf16|fp64", "bf16: bf16 weights and activations, fp32 master weights, gradients and AdamW state; fp64: cpu only"},
    {C_STEP, "--precision fp32|fp64", "the step's precision (cpu)"},
    {C_PLAN, "--memory-budget BYTES|auto", "recompute activations or make the fused head's weight gradient late, whichever adds fewer FLOPs, so the step fits (e.g. 60G; auto: the device's free memory)"},
    {C_PLAN, "--optimizer-in-backward", "each AdamW update as soon as its gradient is final (clipping by the previous step's norm)"},
    {C_PLAN, "--grad-dtype fp32|bf16", "with --precision bf16: bf16 keeps the products' weight gradients in bf16 (autocast's rounding; 2 bytes a parameter less to write, norm and update) (default fp32)"},
    {C_PLAN, "--group-matmuls on|off", "products of equal shapes sharing an operand as one batched call (default on)"},
    {C_PLAN, "--grad-accum N", "micro-batches per optimizer step: gradients summed over N forward-backward passes, mean loss, one AdamW (default 1)"},
    {C_PLAN, "--total-batch-tokens T", "tokens per optimizer step: --grad-accum T / (batch x ctx x ranks), refused unless it divides"},
    {C_TRAIN | C_BENCH | C_EVAL, "--device cpu|cuda", "the backend (default: cuda when a GPU is present, else cpu)"},
    {C_STEP, "--device cpu|cuda", "the backend (default: cuda when a GPU is present, else cpu)"},
    {C_TRAIN | C_BENCH, "--exec graph|eager", "cuda: capture the step once and replay it (graph, the default) or launch every op; not on the cpu"},
    {C_TRAIN | C_BENCH, "--tf32", "cuda: TF32 tensor cores for fp32 matmuls"},
    {C_TRAIN | C_BENCH | C_SAMPLE, "--gemm-tune on|off", "cuda: time each matmul shape's cuBLASLt algorithms among the heuristic's first 8 (default off)"},
    {C_TRAIN | C_BENCH, "--bucket-mb X", "under stg launch: gradient all-reduce buckets of X MiB (default 25)"},
    {C_TRAIN | C_BENCH | C_MEMREPORT, "--zero 0|1", "under stg launch: 1 shards the AdamW state over the ranks (memreport: 0 to 3 with --world)"},
    {C_TRAIN, "--data FILE.bin|.npy", "training tokens (uint16 .bin, or int32/uint16 .npy); default: the synthetic Markov source"},
    {C_TRAIN, "--val FILE", "validation tokens; validation every 100 steps and at the end unless --val-every says otherwise"},
    {C_TRAIN, "--val-every N", "steps between validation losses (on --val, else on held-out batches of the training source)"},
    {C_TRAIN, "--val-batches N", "batches per validation loss (default 4)"},
    {C_TRAIN, "--val-full", "validation is exact: the mean loss over every ctx-window of --val (as stg eval), not --val-batches sampled batches"},
    {C_TRAIN, "--markov-k K", "successors per symbol of the synthetic source (default 4; at most vocab)"},
    {C_TRAIN, "--steps N", "total steps of the run (default 200; a resumed run continues up to N)"},
    {C_TRAIN, "--lr X", "peak learning rate (default 0.001)"},
    {C_TRAIN, "--min-lr X", "learning rate at the end of the decay (default 0.1 x --lr; at most --lr)"},
    {C_TRAIN, "--warmup N", "steps of linear warm-up from 0 (default 0)"},
    {C_TRAIN, "--cosine-steps N", "the step where the decay (cosine, linear, wsd) reaches --min-lr (default --steps)"},
    {C_TRAIN, "--schedule constant|linear|cosine|wsd", "the learning rate after the warm-up (default cosine); wsd: warm-up, stable, decay"},
    {C_TRAIN, "--wsd-decay-frac F", "wsd: the share of the steps (to --cosine-steps) in the final decay, in [0, 1] (default 0.2)"},
    {C_TRAIN, "--wsd-shape linear|cosine|sqrt", "wsd: lr falls as 1-p, (1+cos(pi p))/2 or 1-sqrt(p) over the decay's share p (default linear)"},
    {C_TRAIN, "--weight-decay X", "AdamW weight decay (default 0.1)"},
    {C_TRAIN, "--no-decay-norms-embeddings", "no weight decay on norms and embeddings"},
    {C_TRAIN, "--beta1 X", "AdamW beta1 (default 0.9)"},
    {C_TRAIN, "--beta2 X", "AdamW beta2 (default 0.95)"},
    {C_TRAIN, "--clip X", "clip the global gradient norm to X (default 1; 0: no clipping)"},
    {C_TRAIN, "--seed N", "parameters and data order (default 0)"},
    {C_TRAIN, "--doc-sep ID", "packed documents: token ID ends a document; attention never crosses a boundary (sets docs=on)"},
    {C_TRAIN, "--doc-loss-mask on|off", "with --doc-sep: on drops the targets that cross a boundary from the loss (default off)"},
    {C_TRAIN, "--init FILE.safetensors", "start from these parameters (not with --resume)"},
    {C_TRAIN, "--log FILE.jsonl", "one JSON line per step; never an input file"},
    {C_TRAIN, "--log-mode new|overwrite|append", "an existing non-empty log: refused (new, the default), overwritten or appended to; --resume appends"},
    {C_TRAIN, "--ckpt DIR", "checkpoints DIR/ckpt-STEP.safetensors, each verified (finite, CRC-32C) before DIR/latest and DIR/ckpt.safetensors point at it"},
    {C_TRAIN, "--ckpt-every N", "steps between checkpoints (default 0: at the end only)"},
    {C_TRAIN, "--keep K", "checkpoints kept in DIR, newest first (default 2; 0: all)"},
    {C_TRAIN, "--resume", "continue from the newest checkpoint in --ckpt DIR that verifies"},
    {C_TRAIN, "--sample-every N", "every N steps, print a sample of up to 64 tokens (temperature 1) and log it as the step's \"sample\""},
    {C_TRAIN, "--sample-prompt TEXT", "the samples' prompt (default a newline; encoded by --tokenizer, else its bytes are the ids)"},
    {C_GRAPH, "--dot", "write Graphviz (the only format)"},
    {C_GRAPH, "-o FILE.dot", "the output (default: standard output); never an input file"},
    {C_MEMREPORT, "--mode train|forward|sample", "the training step (default), the forward alone, or stg sample's prefill and decode (KV cache at batch x ctx)"},
    {C_MEMREPORT, "--prompt N", "--mode sample: prompt tokens per sequence (default: ctx)"},
    {C_MEMREPORT, "--format text|md|json|svg", "the report's format (svg: live bytes over the schedule)"},
    {C_MEMREPORT, "-o FILE", "the output (default: standard output); never an input file"},
    {C_MEMREPORT, "--device cpu|cuda", "also allocate the plan there and measure what the device holds"},
    {C_MEMREPORT, "--world N", "bytes per data-parallel device, and how many devices a configuration needs"},
    {C_MEMREPORT, "--device-memory GIB", "device capacity for --world and --mode sample's fit (default 80; --device cuda: its free memory)"},
    {C_STEP, "--init PARAMS.safetensors", "the parameters"},
    {C_STEP, "--batch BATCH.npy", "int32 [2, batch, ctx]: the tokens, then the targets"},
    {C_STEP, "--dump OUT.safetensors", "the loss, the logits (unless the head is fused) and every gradient by parameter name; never an input file"},
    {C_EVAL, "--init CKPT", "the parameters: a checkpoint or any safetensors file with the model's names (stg import)"},
    {C_EVAL, "--data FILE.bin|.npy", "the tokens (as --data of train); window w: inputs [w ctx, (w+1) ctx), targets one further"},
    {C_EVAL, "--tokens N", "only the first N tokens of the file (default all); targets after the last whole window are not scored"},
    {C_EVAL, "--tokenizer TOK", "the model's vocab from a tokenizer, and bits per byte (the targets' detokenized bytes)"},
    {C_EVAL, "--json", "one JSON object"},
    {C_EXPORT, "--init CKPT", "the parameters: a checkpoint or any safetensors file with the model's names (checksums verified when present)"},
    {C_EXPORT, "--hf DIR", "the directory to write, whole or not at all; it must not exist or be empty"},
    {C_EXPORT, "--tokenizer TOK", "the model's vocab from a tokenizer, written as DIR/tokenizer.json and tokenizer_config.json"},
    {C_IMPORT, "--hf DIR", "config.json (checked against the model) and model.safetensors or its index and shards (F32, F64, BF16, F16)"},
    {C_IMPORT, "-o FILE.safetensors", "the parameters by stg's names, float32 (written atomically); never an input file"},
    {C_BENCH, "--what forward|forward-backward|step[,...]", "what to time, several in one process in the order given (default step)"},
    {C_BENCH | C_COMM, "--warmup N", "untimed iterations first (default 5)"},
    {C_BENCH, "--iters N", "timed iterations (default 10)"},
    {C_BENCH, "--streams N", "cuda graph mode: spread independent ops over at most N streams (default all; 1: one)"},
    {C_BENCH, "--profile", "device time per op kind and name, and the critical path (cuda)"},
    {C_BENCH, "--real-init", "initialise parameters as for training (default: a constant fill)"},
    {C_BENCH | C_ATTN | C_COMM, "--json", "one JSON object per result"},
    {C_ATTN, "--device cpu|cuda", "the backend (default: cuda when a GPU is present)"},
    {C_ATTN, "--precision bf16|fp32", "default bf16"},
    {C_ATTN, "--batch N", "default 8"},
    {C_ATTN, "--heads N", "default 1"},
    {C_ATTN, "--kv-heads N", "grouped-query attention: k and v heads (default --heads)"},
    {C_ATTN, "--docs N", "rows packed with N documents of seq / N tokens: flash with and without docs"},
    {C_ATTN, "--attention naive|flash|both", "the paths timed (default both; naive: written out, without --docs)"},
    {C_ATTN, "--dims A,B,...", "head dims (default 16,32,64,128)"},
    {C_ATTN, "--seqs A,B,...", "sequence lengths (default 256,1024,4096,8192,16384)"},
    {C_ATTN, "--iters N", "timed iterations (default 10)"},
    {C_ATTN, "--order alternate|phases", "forward and backward iterations alternating (default), or all forwards first"},
    {C_COMM, "--iters N", "timed iterations (default 20)"},
    {C_LAUNCH, "-n N", "processes on this node"},
    {C_LAUNCH, "--nnodes M --node-rank K", "node K of M (RANK = K x N + LOCAL_RANK, WORLD_SIZE = M x N)"},
    {C_LAUNCH, "--port P", "MASTER_PORT (default: a free port; give it with --nnodes)"},
    {C_LAUNCH, "--addr A", "MASTER_ADDR (default 127.0.0.1)"},
    {C_TOKENS, "-o FILE.bin", "the output; never the input file"},
    {C_SAMPLE, "--init FILE|random|fill", "the parameters: a checkpoint or safetensors file; random: CS336's initialisation from --seed; fill: a constant (timing)"},
    {C_SAMPLE, "--tokenizer TOK", "encode the prompt and decode the output (and set the vocab); without it, bytes are ids"},
    {C_SAMPLE, "--prompt TEXT", "the prompt, the same for every sequence"},
    {C_SAMPLE, "--prompt-ids FILE", "the prompt as token ids (.bin uint16 or .npy)"},
    {C_SAMPLE, "-n N", "new tokens per sequence (default 64); prompt + N must fit the model's ctx"},
    {C_SAMPLE, "--batch B", "sequences sampled together (default 1; one streams, more print at the end)"},
    {C_SAMPLE, "--temperature T", "0: greedy; else logits / T (default 1)"},
    {C_SAMPLE, "--top-k K", "sample among the K most likely tokens (1 to vocab; default: all)"},
    {C_SAMPLE, "--top-p P", "sample among the most likely tokens of total probability P, in (0, 1] (default 1)"},
    {C_SAMPLE, "--seed N", "the sampler's random numbers (and --init random's parameters; default 0)"},
    {C_SAMPLE, "--stop TEXT|ID", "stop a sequence at this token id (a number or a special token) or once its text ends with TEXT"},
    {C_SAMPLE, "--json", "ids, text, timings and tokens/s as one JSON object (no streaming)"},
    {C_SAMPLE, "--device cpu|cuda", "the backend (default: cuda when a GPU is present, else cpu)"},
    {C_SAMPLE, "--profile", "after sampling, a decode step timed op by op: device time per op kind and name (to standard error; needs 2 positions left)"},
    {C_SAMPLE, "--exec graph|eager", "cuda: capture the decode step once and replay it (graph, the default) or launch every op"},
    {C_PLOT, "-o FILE.svg", "the picture (- for standard output), written atomically; never an input file"},
    {C_PLOT, "--label NAME", "one per log, in order: the runs' names in the legend (default: the file names)"},
    {C_PLOT, "--title TEXT", "the picture's title (default stg train)"},
    {C_MODEL | C_ATTN | C_COMM | C_LAUNCH | C_TOKENS | C_PLOT, "-h, --help", "this text"},
};

int cli_usage(FILE *f, const char *cmd) {
    const cmd_usage *c = NULL;
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
        if (strcmp(cmds[i].name, cmd) == 0) c = &cmds[i];
    if (!c) return -1;
    if (!f) return 0; // asked only whether cmd is in the table
    fprintf(f, "usage: stg %s %s\n%s\n\noptions:\n", c->name, c->synopsis, c->about);
    for (size_t i = 0; i < sizeof opts / sizeof *opts; i++) {
        if (!(opts[i].cmds & c->bit)) continue;
        if (strlen(opts[i].opt) <= 30) fprintf(f, "  %-30s %s\n", opts[i].opt, opts[i].help);
        else fprintf(f, "  %s\n  %-30s %s\n", opts[i].opt, "", opts[i].help);
    }
    return 0;
}

int cli_help_asked(int argc, char **argv) {
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 1;
    return 0;
}
