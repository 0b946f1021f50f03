// stg export --hf DIR and stg import --hf DIR: Hugging Face model directories from stg parameters
// and back (runtime/hf.h).
#include <stdio.h>
#include <string.h>

#include "ops/base/file.h"
#include "runtime/hf.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tools/stg/cli.h"

// The command line both share: MODEL, the model options, --hf DIR and the named values.
typedef struct {
    cli_model_opts m;
    const char *hf, *init, *out, *tok;
} hf_args;

static int hf_parse(const char *cmd, int argc, char **argv, hf_args *a) {
    memset(a, 0, sizeof *a);
    cli_model_opts_init(&a->m);
    a->m.train = false;
    bool exp = strcmp(cmd, "export") == 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tokenizer") == 0 && i + 1 < argc) a->tok = argv[i + 1];
        int r = cli_model_arg(&a->m, argc, argv, &i);
        if (r < 0) return -1;
        if (r > 0) continue;
        const char *o = argv[i];
        const char **slot = strcmp(o, "--hf") == 0 ? &a->hf : exp && strcmp(o, "--init") == 0 ? &a->init : !exp && strcmp(o, "-o") == 0 ? &a->out : NULL;
        if (slot) {
            if (!(*slot = cli_value(argc, argv, &i))) return -1;
            continue;
        }
        if (o[0] == '-' || a->m.model) {
            fprintf(stderr, "stg %s: unexpected argument '%s'\n", cmd, o);
            cli_usage(stderr, cmd);
            return -1;
        }
        a->m.model = o;
    }
    const char *missing = !a->m.model ? "MODEL (the model file)" : !a->hf ? "--hf DIR" : exp && !a->init ? "--init CKPT (the parameters)"
                        : !exp && !a->out ? "-o FILE.safetensors" : NULL;
    if (missing) {
        fprintf(stderr, "stg %s: %s is needed\n", cmd, missing);
        cli_usage(stderr, cmd);
        return -1;
    }
    if (cli_resolve_accum(&a->m, 1, cmd)) return -1;
    if (a->m.precision != STG_PREC_FP32) {
        fprintf(stderr, "stg %s: --precision: the parameters are read and written as float32 whatever the step's precision; drop it\n", cmd);
        return -1;
    }
    if (a->m.optim.in_backward || a->m.budget) {
        fprintf(stderr, "stg %s: %s is for training steps\n", cmd, a->m.optim.in_backward ? "--optimizer-in-backward" : "--memory-budget");
        return -1;
    }
    if (!exp && a->tok) {
        fprintf(stderr, "stg import: --tokenizer sets the model's vocab only; the directory's tokenizer.json is a tokenizer as it is (--tokenizer DIR/tokenizer.json elsewhere)\n");
    }
    return 0;
}

int cmd_export(int argc, char **argv) {
    hf_args a;
    if (hf_parse("export", argc, argv, &a)) return 2;
    stg_err err;
    const char *in[] = {a.m.model, a.init, a.tok};
    const char *inw[] = {"model file", "--init file", "--tokenizer file"};
    if (stg_check_output(a.hf, "--hf", in, inw, 3, &err)) {
        fprintf(stderr, "stg export: %s\n", err.msg);
        return 2;
    }
    rt_tok *tok = NULL;
    if (a.tok && rt_tok_load(a.tok, &tok, &err)) {
        fprintf(stderr, "stg export: --tokenizer: %s\n", err.msg);
        return 2;
    }
    stg_graph *g = cli_build(&a.m);
    if (!g) {
        rt_tok_free(tok);
        return 2;
    }
    rt_hf_report rep;
    int r = rt_hf_export(g, a.init, tok, a.hf, &rep, &err);
    if (r) fprintf(stderr, "stg export: %s%s\n", err.msg, r == RT_HF_BAD ? "; nothing written" : "");
    else
        printf("stg export: %s as %s (the %s table): %d tensors (%d with their rows permuted per head for Hugging Face's RoPE pairing), "
               "%.1f MiB of float32; %s/config.json, %s/model.safetensors%s%s%s\n",
               g->name, rep.architecture, rep.family, rep.tensors, rep.permuted, rep.bytes / (1 << 20), a.hf, a.hf, tok ? ", " : "",
               tok ? a.hf : "", tok ? "/tokenizer.json, tokenizer_config.json" : "");
    graph_free(g);
    rt_tok_free(tok);
    return r == 0 ? (fflush(stdout) ? 1 : 0) : r == RT_HF_BAD ? 2 : 1;
}

int cmd_import(int argc, char **argv) {
    hf_args a;
    if (hf_parse("import", argc, argv, &a)) return 2;
    stg_graph *g = cli_build(&a.m);
    if (!g) return 2;
    stg_err err;
    rt_hf_report rep;
    const char *in[] = {a.m.model, a.tok};
    const char *inw[] = {"model file", "--tokenizer file"};
    int r = rt_hf_import(g, a.hf, a.out, in, inw, a.tok ? 2 : 1, &rep, &err);
    if (r) fprintf(stderr, "stg import: %s%s\n", err.msg, r == RT_HF_BAD ? "; nothing written" : "");
    else
        printf("stg import: %s's %s (the %s table) into %s: %d tensors (%d with their rows permuted back to stg's RoPE pairing), "
               "%.1f MiB of float32 from %d weight file%s; use it with --init %s\n",
               a.hf, rep.architecture, rep.family, a.out, rep.tensors, rep.permuted, rep.bytes / (1 << 20), rep.shards,
               rep.shards == 1 ? "" : "s", a.out);
    graph_free(g);
    return r == 0 ? (fflush(stdout) ? 1 : 0) : r == RT_HF_BAD ? 2 : 1;
}
