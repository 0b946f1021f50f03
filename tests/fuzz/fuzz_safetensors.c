// libFuzzer target: see fuzz_entry.h (stg_fuzz_safetensors) for what one input is and what is checked.
#include "tests/fuzz/fuzz_entry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return stg_fuzz_safetensors(data, size); }
