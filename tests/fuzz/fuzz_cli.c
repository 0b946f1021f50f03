// libFuzzer target: the command line of `stg train` (tests/fuzz/README.md). The input is argv,
// its arguments separated by NUL bytes; it goes through the same parsers `stg train` uses
// (cli_model_arg, the optimizer and training options, the checks made before anything is opened)
// and through the --help table. Every bad argument must end in a message and a refusal, never in a
// crash, a leak or an out-of-bounds read. The program's file is included for its static parsers;
// cmd_train itself is never called (it would train).
#include "tools/stg/cmd_train.c"

#define FUZZ_MAX_ARGS 64

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    // the schedule and usage text go to stdout: millions of lines otherwise. The refusals go to stderr,
    // which run.sh closes for this target with libFuzzer's -close_fd_mask=2 (libFuzzer and the
    // sanitizers keep reporting on a descriptor of their own).
    if (!freopen("/dev/null", "w", stdout)) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    char *argv[FUZZ_MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = "train";
    for (size_t i = 0; i <= size && argc <= FUZZ_MAX_ARGS;) { // NUL-separated arguments
        argv[argc++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    argv[argc] = NULL;
    cli_model_opts m;
    cli_model_opts_init(&m);
    train_ctx c;
    memset(&c, 0, sizeof c);
    c.cfg = rt_train_defaults();
    int bad = 0;
    for (int i = 1; i < argc && !bad; i++) {
        int r = cli_model_arg(&m, argc, argv, &i);
        if (!r) r = schedule_arg(&m, &c, argc, argv, &i);
        if (!r) r = optim_arg(&m, &c.min_lr_given, argc, argv, &i);
        if (!r) r = train_arg(&c, argc, argv, &i);
        if (r < 0) bad = 1;
        else if (r == 0 && (argv[i][0] == '-' || m.model)) bad = 1;
        else if (r == 0) m.model = argv[i];
        // every parser leaves i on an argument it consumed
        if (i >= argc) abort();
    }
    if (!bad && m.model) {
        if (m.optim.cosine_steps == 0) m.optim.cosine_steps = c.cfg.steps;
        if (!train_checks(&m, &c)) {
            // what train_checks lets through is what the run is given: the schedule must be sane
            if (!(m.optim.min_lr <= m.optim.lr) || m.optim.lr < 0 || m.optim.min_lr < 0) abort();
            if (c.cfg.init_path && c.cfg.resume) abort();
            print_schedule(&m.optim, c.cfg.steps, !c.min_lr_given);
        }
    }
    if (cli_help_asked(argc, argv)) cli_usage(stdout, argc > 1 ? argv[1] : "train");
    free(buf);
    return 0;
}
