// The fuzz entry points' invariant check (fuzz_entry.h, fuzz_json_entry.h, fuzz_tok_entry.h): a
// broken promise aborts with where and what, which libFuzzer and the regression replays report.
#ifndef STG_FUZZ_CHECK_H
#define STG_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define STG_FUZZ_CHECK(c)                                                                            \
    do {                                                                                             \
        if (!(c)) {                                                                                  \
            fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #c);           \
            abort();                                                                                 \
        }                                                                                            \
    } while (0)

#endif
