// libFuzzer target: see fuzz_json_entry.h (stg_fuzz_json) for what one input is and what is checked.
#include "tests/fuzz/fuzz_json_entry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return stg_fuzz_json(data, size); }
