// stg: a static-graph training runtime. One program, several commands.
#include <stdio.h>
#include <string.h>

#include "tools/stg/cli.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} command;

static const command commands[] = {
    {"check", cmd_check, "MODEL      load, differentiate and validate; print ops, tensors, parameters"},
    {"graph", cmd_graph, "MODEL --dot write the step's graph as Graphviz"},
    {"memreport", cmd_memreport, "MODEL  plan the step's memory and report it (text, md, json, svg)"},
    {"train", cmd_train, "MODEL      train (synthetic data when no --data is given); checkpoints, logs"},
    {"step", cmd_step, "MODEL       one forward and backward on a given batch; dump loss, logits, gradients"},
    {"eval", cmd_eval, "MODEL --init CKPT --data F.bin  the exact mean loss over every ctx-window of a token file"},
    {"export", cmd_export, "MODEL --init CKPT --hf DIR  a Hugging Face model directory (config.json, model.safetensors, tokenizer)"},
    {"import", cmd_import, "MODEL --hf DIR -o F  a Hugging Face model directory back into an --init file"},
    {"bench", cmd_bench, "MODEL      time forward, forward+backward or whole steps (graph or eager)"},
    {"attn-bench", cmd_attnbench, "     CS336's attention study: naive vs flash, time and memory by d_head and seq"},
    {"comm-bench", cmd_commbench, "     NCCL all-reduce time and bandwidth, 1 MB to 1 GB (under stg launch -n N)"},
    {"launch", cmd_launch, "-n N -- CMD  N local processes of CMD for data parallelism (RANK, WORLD_SIZE, ... set)"},
    {"plot", cmd_plot, "LOG.jsonl... -o F.svg  loss, validation loss, lr and tokens/s of runs, against steps and time"},
    {"tokens", cmd_tokens, "TEXT -o F  byte-level tokens of any file (vocab 256) as uint16 .bin"},
    {"tokenizer", cmd_tokenizer, "train|convert|info  byte-level BPE: train on text, convert GPT-2 / Hugging Face files"},
    {"tokenize", cmd_tokenize, "--tokenizer TOK FILE... -o OUT.bin  text to token ids (uint16, or uint32 past 65536)"},
    {"detokenize", cmd_detokenize, "--tokenizer TOK IN.bin  token ids back to text"},
    {"sample", cmd_sample, "MODEL --init CKPT --prompt TEXT  text from a model (KV cache, a captured decode step)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: stg COMMAND [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\nmodel options (every command that reads a model):\n"
               "  --set name=value          override a dim (an integer expression) or an option\n"
               "  --attention naive|flash   attention written out or fused (default flash)\n"
               "  --precision fp32|bf16     bf16: bf16 weights and activations, fp32 master weights,\n"
               "                            gradients and AdamW state\n"
               "  --tokenizer TOK           the model's vocab dim from a tokenizer (stg tokenizer train)\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (strcmp(argv[1], commands[i].name) == 0) {
            // usage on stdout, exit 0: asked for, not an error. Commands outside the options table
            // (the tokenizer's) print their own usage for --help.
            if (cli_help_asked(argc - 1, argv + 1) && cli_usage(NULL, argv[1]) == 0)
                return cli_usage(stdout, argv[1]) || fflush(stdout) ? 1 : 0;
            return commands[i].run(argc - 1, argv + 1);
        }
    fprintf(stderr, "stg: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
