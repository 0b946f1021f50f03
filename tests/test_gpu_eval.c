// stg eval and stg train --val-full on CUDA (graph mode, the forward pass captured): the exact mean
// loss of a checkpoint over every ctx-window equals the CPU backend's (fp32, relative 1e-5; the
// batches of 8 and the short last batch on its second plan), and bf16 is within 2e-2 of it; a
// --val-full run's last validation loss on CUDA equals `stg eval --device cuda` on its checkpoint.
// Exits 77 (skipped) without CUDA or without a GPU.
#include "tests/gpu.h"

#ifdef STG_HAVE_CUDA
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/cuda/backend_cuda.h"
#include "tests/testutil.h"

#define STG "'" STG_BINARY "'"
#define TINY "'" STG_SOURCE_DIR "/models/tiny.yaml' --set n_layers=2 --set ctx=64"

static double eval_loss(const char *opts, const char *ckpt, const char *data) {
    char cmd[4096], out[8192];
    snprintf(cmd, sizeof cmd, STG " eval " TINY " %s --init %s --data %s --json 2>&1", opts, ckpt, data);
    if (tu_run(cmd, out, sizeof out) != 0) fail_msg("%s\n%s", cmd, out);
    const char *p = strstr(out, "\"loss\": ");
    if (!p) fail_msg("%s", out);
    return strtod(p + 8, NULL);
}

static void test_cuda_equals_cpu(void **s) {
    char dir[] = "/tmp/stg_gpu_eval_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char cmd[4096], out[8192], data[128], ckpt[128], log[128];
    snprintf(data, sizeof data, "%s/docs.bin", dir);
    snprintf(ckpt, sizeof ckpt, "%s/ck/ckpt.safetensors", dir);
    snprintf(log, sizeof log, "%s/vf.jsonl", dir);
    // README.md's bytes (about 26,000: more than --tokens 20193 below); STG_GPU_TEST_SMALL=1 (under
    // compute-sanitizer, where every stg process below is checked): its first 6,000 bytes, 2 steps and
    // --tokens 1345 (21 windows of 64: 2 batches of 8 and one of 5, the second plan still)
    const bool small = getenv("STG_GPU_TEST_SMALL") != NULL;
    const int steps = small ? 2 : 20;
    const char *tokens = small ? "--tokens 1345" : "--tokens 20193";
    if (small)
        snprintf(cmd, sizeof cmd,
                 "head -c 6000 '" STG_SOURCE_DIR "/README.md' > %s/text.txt && " STG " tokens %s/text.txt -o %s && " STG " train " TINY
                 " --device cuda --data %s --val %s --val-full --val-every 2 --steps 2 --lr 1e-2 --ckpt %s/ck --log %s 2>&1",
                 dir, dir, data, data, data, dir, log);
    else
        snprintf(cmd, sizeof cmd,
                 STG " tokens '" STG_SOURCE_DIR "/README.md' -o %s && " STG " train " TINY " --device cuda --data %s --val %s --val-full --val-every 10 "
                     "--steps 20 --lr 1e-2 --ckpt %s/ck --log %s 2>&1",
                 data, data, data, dir, log);
    if (tu_run(cmd, out, sizeof out) != 0) fail_msg("%s\n%s", cmd, out);
    // the first 20193 tokens: 315 windows of 64, 39 batches of 8 and one of 3 (the second plan)
    char o_cpu[64], o_gpu[64], o_bf16[64];
    snprintf(o_cpu, sizeof o_cpu, "--device cpu %s", tokens);
    snprintf(o_gpu, sizeof o_gpu, "--device cuda %s", tokens);
    snprintf(o_bf16, sizeof o_bf16, "--device cuda --precision bf16 %s", tokens);
    double cpu = eval_loss(o_cpu, ckpt, data), gpu = eval_loss(o_gpu, ckpt, data), bf16 = eval_loss(o_bf16, ckpt, data),
           whole = eval_loss("--device cuda", ckpt, data);
    print_message("eval: cpu %.9f, cuda fp32 %.9f (rel %.2e), cuda bf16 %.6f (rel %.2e)\n", cpu, gpu, fabs(gpu - cpu) / cpu, bf16,
                  fabs(bf16 - cpu) / cpu);
    assert_true(fabs(gpu - cpu) <= 1e-5 * cpu);
    assert_true(fabs(bf16 - cpu) <= 2e-2 * cpu);
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    char line[1024];
    double last = NAN;
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "\"val_loss\": ");
        if (p) last = strtod(p + 12, NULL);
    }
    fclose(f);
    print_message("--val-full on cuda at step %d: %.9f; stg eval on cuda: %.9f\n", steps, last, whole);
    assert_true(fabs(last - whole) <= 1e-6 * whole);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cuda_equals_cpu)};
    return GPU_RUN(tests);
}

#endif
