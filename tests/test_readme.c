// The README cannot drift from the program: its "Options" section is every command's --help, and
// every ./build/stg command in its ```sh blocks runs (with this build's binary, from the source
// directory) and prints what the ```text block after it shows ("..." ends a shown prefix). A
// command writing `-o FILE` where the repository holds FILE writes elsewhere and must reproduce it.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/testutil.h"

// Runs a shell command from the source directory; its stdout (stderr discarded) in a new string.
static char *run(int *rc, const char *fmt, ...) {
    char c[8192], cmd[8400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c, sizeof c, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "cd '%s' && %s 2>/dev/null", STG_SOURCE_DIR, c);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char *b = tu_read_all(p, NULL);
    assert_non_null(b);
    int st = pclose(p);
    *rc = st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return b;
}

// The body of the fenced block that starts at `fence` (a line "```lang"): a new string, and *end
// past the closing fence.
static char *block_body(const char *fence, const char **end) {
    const char *b = strchr(fence, '\n');
    assert_non_null(b);
    b++;
    const char *e = strstr(b, "\n```");
    if (b[0] == '`' && b[1] == '`' && b[2] == '`') e = b - 1; // an empty block
    assert_non_null(e);
    size_t n = (size_t)(e + 1 - b);
    char *s = malloc(n + 1);
    assert_non_null(s);
    memcpy(s, b, n);
    s[n] = 0;
    *end = strchr(e + 1, '\n') ? strchr(e + 1, '\n') + 1 : e + strlen(e);
    return s;
}

static void test_options_section_is_help(void **st) {
    char *readme = tu_slurp(STG_SOURCE_DIR "/README.md", NULL);
    assert_non_null(readme);
    static const char *const cmds[] = {"check", "graph", "memreport", "train", "step", "bench", "attn-bench", "comm-bench", "launch", "tokens",
                                       "sample", "eval", "export", "import", "plot"};
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        char marker[128];
        snprintf(marker, sizeof marker, "<!-- stg %s --help -->\n```text\n", cmds[i]);
        const char *m = strstr(readme, marker);
        if (!m) fail_msg("README.md has no block '%s' (tools/readme_options.sh build/stg prints the section)", marker);
        const char *end;
        char *doc = block_body(strchr(m, '\n') + 1, &end);
        int rc;
        char *help = run(&rc, "'%s' %s --help", STG_BINARY, cmds[i]);
        assert_int_equal(rc, 0);
        if (strcmp(doc, help) != 0)
            fail_msg("README.md's `stg %s --help` block differs from the program's; regenerate the section with "
                     "tools/readme_options.sh build/stg\n--- README\n%s--- stg\n%s", cmds[i], doc, help);
        free(doc);
        free(help);
    }
    free(readme);
}

// out must begin with the lines of `want` up to a line "...", or equal it when there is none.
static void compare_output(const char *cmd, const char *want, const char *out) {
    const char *dots = strstr(want, "\n...\n");
    if (strncmp(want, "...\n", 4) == 0) dots = want - 1;
    size_t n = dots ? (size_t)(dots + 1 - want) : strlen(want);
    if (strncmp(out, want, n) != 0 || (!dots && strlen(out) != n))
        fail_msg("README.md shows for\n  %s\n---\n%.*s---\nbut it prints\n---\n%s---", cmd, (int)n, want, out);
}

static void test_examples_run_as_shown(void **st) {
    char *readme = tu_slurp(STG_SOURCE_DIR "/README.md", NULL);
    assert_non_null(readme);
    int ran = 0;
    for (const char *p = strstr(readme, "\n```sh\n"); p; p = strstr(p, "\n```sh\n")) {
        const char *end;
        char *body = block_body(p + 1, &end);
        p = end;
        const char *cmd = strstr(body, "./build/stg ");
        if (!cmd) {
            free(body);
            continue;
        }
        // The shell lines before it in the block (e.g. making its input file) run first, as a reader
        // would run them: the example must work on a fresh machine.
        if (cmd > body) {
            char pre[4096];
            snprintf(pre, sizeof pre, "%.*s", (int)(cmd - body), body);
            int prc;
            free(run(&prc, "%s", pre));
            if (prc != 0) fail_msg("README.md's\n%sexits %d", pre, prc);
        }
        char line[4096];
        snprintf(line, sizeof line, "%.*s", (int)strcspn(cmd, "\n"), cmd);
        char args[4096];
        snprintf(args, sizeof args, "%s", line + strlen("./build/stg "));
        // -o FILE that the repository holds: written to a temporary file and compared with it
        char *o = strstr(args, " -o "), repo_file[1024] = "", tmp[64] = "";
        if (o) {
            char *f = o + 4;
            snprintf(repo_file, sizeof repo_file, "%s/%.*s", STG_SOURCE_DIR, (int)strcspn(f, " "), f);
            if (access(repo_file, F_OK) == 0) {
                snprintf(tmp, sizeof tmp, "/tmp/stg_readme_XXXXXX");
                int fd = mkstemp(tmp);
                assert_true(fd >= 0);
                close(fd);
                char rest[4096];
                snprintf(rest, sizeof rest, "%s", f + strcspn(f, " "));
                snprintf(f, sizeof args - (size_t)(f - args), "%s%s", tmp, rest);
            } else {
                repo_file[0] = 0;
            }
        }
#ifdef STG_HAVE_CUDA
        // the README shows what a machine without a GPU prints
        strncat(args, strncmp(args, "train", 5) == 0 ? " --device cpu" : "", sizeof args - strlen(args) - 1);
#endif
        int rc;
        char *out = run(&rc, "'%s' %s", STG_BINARY, args);
        if (rc != 0) fail_msg("README.md's\n  %s\nexits %d", line, rc);
        // the ```text block right after it, if any, is its output
        const char *q = end;
        while (*q == '\n') q++;
        if (strncmp(q, "```text\n", 8) != 0) {
            const char *para = strstr(q, "\n\n");
            if (para && strncmp(para + 2, "```text\n", 8) == 0 && !memchr(q, '`', (size_t)(para - q))) q = para + 2;
        }
        if (strncmp(q, "```text\n", 8) == 0) {
            const char *e2;
            char *want = block_body(q, &e2);
            compare_output(line, want, out);
            free(want);
        }
        if (repo_file[0]) {
            char *a = tu_slurp(repo_file, NULL), *b = tu_slurp(tmp, NULL);
            assert_non_null(a);
            assert_non_null(b);
            if (strcmp(a, b) != 0) fail_msg("%s differs from what `%s` writes now; rerun that command", repo_file, line);
            free(a);
            free(b);
            unlink(tmp);
        }
        free(out);
        free(body);
        ran++;
    }
    assert_true(ran >= 3); // the main job, the memory report and its SVG
    free(readme);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_options_section_is_help),
        cmocka_unit_test(test_examples_run_as_shown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
