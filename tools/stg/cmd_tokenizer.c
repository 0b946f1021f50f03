// stg tokenizer (train, convert, info), stg tokenize, stg detokenize: the byte-level BPE tokenizer
// of runtime/tokenizer/ on the command line. Exit 0 on success, 2 on bad input (usage, files), 1 on
// other failures.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ops/base/file.h"
#include "runtime/data.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tools/stg/cli.h"

#define MAX_INPUTS 256
#define MAX_SPECIALS 256

static double wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double peak_rss_mib(void) {
    // The same number rt_tok_train reports through getrusage: ru_maxrss, kilobytes on Linux.
    FILE *f = fopen("/proc/self/status", "r");
    double v = 0;
    if (!f) return 0;
    char line[256];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) v = strtod(line + 6, NULL) / 1024.0;
    fclose(f);
    return v;
}

// ---- stg tokenizer train -------------------------------------------------------------------------

static const char *train_usage =
    "usage: stg tokenizer train CORPUS... --vocab N [--special TEXT]... -o TOK [--threads N] [--chunk-mb N]\n"
    "  byte-level BPE (GPT-2's pre-tokenisation, CS336's tie rule): the 256 bytes, then the special\n"
    "  tokens, then merges up to N tokens. TOK: a tokenizer.json, or a directory (ending in /) that gets\n"
    "  tokenizer.json, vocab.json and merges.txt.\n";

static int tok_train(int argc, char **argv) {
    const char *inputs[MAX_INPUTS], *specials[MAX_SPECIALS], *out = NULL;
    int ni = 0, ns = 0;
    int64_t vocab = -1, threads = 0, chunk_mb = 64;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) return fputs(train_usage, stdout), 0;
        if (strcmp(a, "--vocab") == 0) {
            // The range is checked by the library, with the specials counted; here only the syntax.
            if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 0, INT64_MAX, &vocab)) return 2;
        } else if (strcmp(a, "--special") == 0) {
            if (!(v = cli_value(argc, argv, &i))) return 2;
            if (ns == MAX_SPECIALS) return fprintf(stderr, "stg tokenizer train: at most %d --special\n", MAX_SPECIALS), 2;
            specials[ns++] = v;
        } else if (strcmp(a, "-o") == 0) {
            if (!(out = cli_value(argc, argv, &i))) return 2;
        } else if (strcmp(a, "--threads") == 0) {
            if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 1, 256, &threads)) return 2;
        } else if (strcmp(a, "--chunk-mb") == 0) {
            if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 1, 1 << 16, &chunk_mb)) return 2;
        } else if (a[0] == '-' && a[1]) {
            return fprintf(stderr, "stg tokenizer train: unknown option '%s'\n%s", a, train_usage), 2;
        } else {
            if (ni == MAX_INPUTS) return fprintf(stderr, "stg tokenizer train: at most %d corpus files\n", MAX_INPUTS), 2;
            inputs[ni++] = a;
        }
    }
    if (!ni || vocab < 0 || !out) return fputs(train_usage, stderr), 2;
    stg_err err;
    if (stg_check_output(out, "output", inputs, NULL, ni, &err)) return fprintf(stderr, "stg tokenizer train: %s\n", err.msg), 2;
    rt_tok_train_opts o = {.vocab = (uint64_t)vocab, .specials = specials, .n_specials = ns, .threads = (int)threads,
                           .chunk_bytes = (size_t)chunk_mb << 20};
    rt_tok_train_stats st;
    rt_tok *t = NULL;
    double t0 = wall();
    if (rt_tok_train_files(inputs, ni, &o, &t, &st, &err)) return fprintf(stderr, "stg tokenizer train: %s\n", err.msg), 2;
    double dt = wall() - t0;
    if (rt_tok_save(t, out, inputs, ni, &err)) {
        fprintf(stderr, "stg tokenizer train: %s\n", err.msg);
        rt_tok_free(t);
        return 2;
    }
    printf("%s: vocabulary %u (%u merges, %d special)%s\n", out, rt_tok_vocab_size(t), rt_tok_merge_count(t), ns,
           (uint64_t)rt_tok_vocab_size(t) < (uint64_t)vocab ? "; fewer than asked: the corpus ran out of pairs" : "");
    printf("corpus %.1f MB, %llu pre-tokens (%llu distinct); counting %.2f s, merges %.2f s, total %.2f s wall; peak memory %.0f MiB\n",
           (double)st.bytes / 1e6, (unsigned long long)st.pretokens, (unsigned long long)st.unique, st.count_s, st.merge_s, dt,
           peak_rss_mib());
    rt_tok_free(t);
    return fflush(stdout) ? 1 : 0;
}

// ---- stg tokenizer convert / info -------------------------------------------------------------------

static int tok_convert(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    static const char *usage = "usage: stg tokenizer convert TOK -o OUT   (OUT: tokenizer.json, or DIR/ for tokenizer.json + vocab.json + merges.txt)\n";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return fputs(usage, stdout), 0;
        if (strcmp(argv[i], "-o") == 0) {
            if (!(out = cli_value(argc, argv, &i))) return 2;
        } else if (argv[i][0] == '-' || in) {
            return fprintf(stderr, "stg tokenizer convert: unexpected argument '%s'\n%s", argv[i], usage), 2;
        } else {
            in = argv[i];
        }
    }
    if (!in || !out) return fputs(usage, stderr), 2;
    stg_err err;
    rt_tok *t;
    if (rt_tok_load(in, &t, &err)) return fprintf(stderr, "stg tokenizer convert: %s\n", err.msg), 2;
    const char *inputs[1] = {in};
    int rc = rt_tok_save(t, out, inputs, 1, &err);
    if (rc) fprintf(stderr, "stg tokenizer convert: %s\n", err.msg);
    else printf("%s: vocabulary %u, %u merges, %d special\n", out, rt_tok_vocab_size(t), rt_tok_merge_count(t), rt_tok_special_count(t));
    rt_tok_free(t);
    return rc ? 2 : 0;
}

static int tok_info(int argc, char **argv) {
    if (argc != 2 || argv[1][0] == '-') {
        int help = argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0);
        fputs("usage: stg tokenizer info TOK\n", help ? stdout : stderr);
        return help ? 0 : 2;
    }
    stg_err err;
    rt_tok *t;
    if (rt_tok_load(argv[1], &t, &err)) return fprintf(stderr, "stg tokenizer info: %s\n", err.msg), 2;
    printf("%s: vocabulary %u, %u merges, %d special tokens\n", argv[1], rt_tok_vocab_size(t), rt_tok_merge_count(t),
           rt_tok_special_count(t));
    for (int i = 0; i < rt_tok_special_count(t); i++) {
        const uint8_t *s;
        size_t l;
        uint32_t id = rt_tok_special_at(t, i, &s, &l);
        printf("  special %u: %.*s\n", id, (int)l, (const char *)s);
    }
    rt_tok_free(t);
    return fflush(stdout) ? 1 : 0;
}

int cmd_tokenizer(int argc, char **argv) {
    static const char *usage = "usage: stg tokenizer train|convert|info ...   (stg tokenizer SUBCOMMAND --help)\n";
    if (argc < 2) return fputs(usage, stderr), 2;
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) return fputs(usage, stdout), fputs(train_usage, stdout), 0;
    if (strcmp(argv[1], "train") == 0) return tok_train(argc - 1, argv + 1);
    if (strcmp(argv[1], "convert") == 0) return tok_convert(argc - 1, argv + 1);
    if (strcmp(argv[1], "info") == 0) return tok_info(argc - 1, argv + 1);
    fprintf(stderr, "stg tokenizer: unknown subcommand '%s'\n%s", argv[1], usage);
    return 2;
}

// ---- stg tokenize ---------------------------------------------------------------------------------

typedef struct {
    double t0, last;
    int tty, shown;
} progress_state;

// A progress line on stderr for long inputs: at most once a second on a terminal (rewritten in
// place), every 10 s otherwise; nothing during the first second.
static void progress(void *ctx, uint64_t done, uint64_t total) {
    progress_state *p = ctx;
    double t = wall();
    if (t - p->t0 < 1.0 || t - p->last < (p->tty ? 1.0 : 10.0)) return;
    p->last = t;
    p->shown = 1;
    double mb = (double)done / 1e6;
    if (total) fprintf(stderr, "%sstg tokenize: %.0f / %.0f MB (%.0f%%), %.1f MB/s%s", p->tty ? "\r" : "", mb, (double)total / 1e6,
                       100.0 * (double)done / (double)total, mb / (t - p->t0), p->tty ? "   " : "\n");
    else fprintf(stderr, "%sstg tokenize: %.0f MB, %.1f MB/s%s", p->tty ? "\r" : "", mb, mb / (t - p->t0), p->tty ? "   " : "\n");
}

static const char *tokenize_usage =
    "usage: stg tokenize --tokenizer TOK [FILE...] -o OUT.bin|OUT.npy [--doc-sep SPECIAL] [--threads N]\n"
    "  each FILE is a document (standard input when none, or '-'); --doc-sep puts that special token\n"
    "  between documents. OUT.bin: uint16 when the vocabulary has at most 65536 tokens, else uint32\n"
    "  behind a 16-byte header (docs/TOKENIZER.md); OUT.npy: <u2 or <i4.\n";

int cmd_tokenize(int argc, char **argv) {
    const char *inputs[MAX_INPUTS], *tokp = NULL, *out = NULL, *sep = NULL;
    int ni = 0;
    int64_t threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) return fputs(tokenize_usage, stdout), 0;
        if (strcmp(a, "--tokenizer") == 0) {
            if (!(tokp = cli_value(argc, argv, &i))) return 2;
        } else if (strcmp(a, "-o") == 0) {
            if (!(out = cli_value(argc, argv, &i))) return 2;
        } else if (strcmp(a, "--doc-sep") == 0) {
            if (!(sep = cli_value(argc, argv, &i))) return 2;
        } else if (strcmp(a, "--threads") == 0) {
            if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 1, 256, &threads)) return 2;
        } else if (a[0] == '-' && a[1]) {
            return fprintf(stderr, "stg tokenize: unknown option '%s'\n%s", a, tokenize_usage), 2;
        } else {
            if (ni == MAX_INPUTS) return fprintf(stderr, "stg tokenize: at most %d input files\n", MAX_INPUTS), 2;
            inputs[ni++] = a;
        }
    }
    if (!tokp || !out || strcmp(out, "-") == 0) return fputs(tokenize_usage, stderr), 2;
    if (ni == 0) inputs[ni++] = "-";
    stg_err err;
    const char *tk_in[1] = {tokp};
    if (stg_check_output(out, "output", tk_in, (const char *const[]){"tokenizer"}, 1, &err))
        return fprintf(stderr, "stg tokenize: %s\n", err.msg), 2;
    rt_tok *t;
    if (rt_tok_load(tokp, &t, &err)) return fprintf(stderr, "stg tokenize: %s\n", err.msg), 2;
    size_t ol = strlen(out);
    progress_state ps = {wall(), 0, isatty(fileno(stderr)), 0};
    rt_tok_encode_opts o = {.doc_sep = sep, .threads = (int)threads,
                            .format = ol >= 4 && strcmp(out + ol - 4, ".npy") == 0 ? RT_TOK_OUT_NPY : RT_TOK_OUT_BIN,
                            .progress = progress, .progress_ctx = &ps};
    int64_t n = rt_tok_encode_files(t, inputs, ni, out, &o, &err);
    if (ps.shown && ps.tty) fputc('\n', stderr);
    if (n < 0) {
        fprintf(stderr, "stg tokenize: %s\n", err.msg);
        rt_tok_free(t);
        return 2;
    }
    double dt = wall() - ps.t0;
    printf("%s: %lld tokens (%s, vocabulary %u) in %.2f s\n", out, (long long)n,
           o.format == RT_TOK_OUT_NPY ? (rt_tok_vocab_size(t) > 65536 ? "int32 .npy" : "uint16 .npy")
                                      : (rt_tok_vocab_size(t) > 65536 ? "uint32 .bin" : "uint16 .bin"),
           rt_tok_vocab_size(t), dt);
    rt_tok_free(t);
    return fflush(stdout) ? 1 : 0;
}

// ---- stg detokenize -------------------------------------------------------------------------------

static const char *detok_usage =
    "usage: stg detokenize --tokenizer TOK IN.bin|IN.npy [-o OUT] [--bytes]\n"
    "  the text of the ids (standard output when no -o). Ill-formed UTF-8 (a sequence cut by the ids'\n"
    "  ends, or bytes that were never text) is written as U+FFFD, one per maximal ill-formed subpart;\n"
    "  --bytes writes the decoded bytes exactly as they are.\n";

int cmd_detokenize(int argc, char **argv) {
    const char *tokp = NULL, *in = NULL, *out = NULL;
    int raw = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) return fputs(detok_usage, stdout), 0;
        if (strcmp(a, "--tokenizer") == 0) {
            if (!(tokp = cli_value(argc, argv, &i))) return 2;
        } else if (strcmp(a, "-o") == 0) {
            if (!(out = cli_value(argc, argv, &i))) return 2;
        } else if (strcmp(a, "--bytes") == 0) {
            raw = 1;
        } else if ((a[0] == '-' && a[1]) || in) {
            return fprintf(stderr, "stg detokenize: unexpected argument '%s'\n%s", a, detok_usage), 2;
        } else {
            in = a;
        }
    }
    if (!tokp || !in) return fputs(detok_usage, stderr), 2;
    stg_err err;
    const char *ins[2] = {tokp, in};
    if (out && strcmp(out, "-") && stg_check_output(out, "output", ins, (const char *const[]){"tokenizer", "input"}, 2, &err))
        return fprintf(stderr, "stg detokenize: %s\n", err.msg), 2;
    rt_tok *t;
    if (rt_tok_load(tokp, &t, &err)) return fprintf(stderr, "stg detokenize: %s\n", err.msg), 2;
    rt_tokens *ids;
    // rt_tokens_open checks every id against the vocabulary, naming the first bad one's position.
    if (rt_tokens_open(in, rt_tok_vocab_size(t), &ids, &err)) {
        fprintf(stderr, "stg detokenize: %s\n", err.msg);
        rt_tok_free(t);
        return 2;
    }
    stg_afile *af = NULL;
    int rc = 0;
    int to_stdout = !out || strcmp(out, "-") == 0;
    if (!to_stdout && stg_afile_open(out, &af, &err)) rc = 2;
    int64_t n = rt_tokens_count(ids);
    uint32_t block[65536];
    uint8_t *bytes = NULL, *clean = NULL;
    size_t cap = 0, ccap = 0;
    size_t held = 0; // bytes of an incomplete UTF-8 sequence carried to the next block
    for (int64_t at = 0; at < n && rc == 0;) {
        size_t k = 0;
        while (k < 65536 && at < n) block[k++] = (uint32_t)rt_tokens_at(ids, at++);
        size_t len = held;
        if (rt_tok_decode(t, block, k, &bytes, &len, &cap, &err)) {
            rc = 2;
            break;
        }
        const uint8_t *w = bytes;
        size_t wl = len;
        if (!raw) {
            if (3 * len > ccap) {
                uint8_t *nc = realloc(clean, 3 * len);
                if (!nc) {
                    stg_errf(&err, "out of memory");
                    rc = 1;
                    break;
                }
                clean = nc;
                ccap = 3 * len;
            }
            wl = rt_tok_utf8_sanitize(bytes, len, at == n, clean, &held);
            w = clean;
        }
        if (to_stdout ? fwrite(w, 1, wl, stdout) != wl : stg_afile_write(af, w, wl, &err) != 0) {
            if (to_stdout) stg_errf(&err, "writing to standard output failed: %s", strerror(errno));
            rc = 1;
            break;
        }
        if (!raw && held) memmove(bytes, bytes + len - held, held);
    }
    if (rc == 0 && af) {
        rc = stg_afile_commit(af, &err) ? 1 : 0;
        af = NULL;
    }
    if (rc == 0 && to_stdout && fflush(stdout)) rc = 1, stg_errf(&err, "writing to standard output failed");
    if (rc) fprintf(stderr, "stg detokenize: %s\n", err.msg);
    stg_afile_abort(af);
    free(bytes);
    free(clean);
    rt_tokens_free(ids);
    rt_tok_free(t);
    return rc;
}
