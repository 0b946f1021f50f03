#!/usr/bin/env bash
# Builds the libFuzzer targets here (clang) and packs them for a machine without clang or libyaml
# (the GPU machine): .fz/fuzz.tgz holds bin/ (the fuzz_* programs) and lib/ (the shared libraries
# they load that are not glibc's), and .fz/work.tgz the corpora of an earlier segment when WORK (a
# work.tgz that tests/fuzz/device.sh wrote) is given. Usage: tests/fuzz/pack.sh [WORK]
set -euo pipefail
cd "$(dirname "$0")/../.."
CC=${CC:-clang} cmake -S . -B build-fuzz -DSTG_FUZZ=ON -DSTG_CUDA=OFF -DSTG_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j"${JOBS:-2}" >/dev/null
rm -rf .fz/p && mkdir -p .fz/p/bin .fz/p/lib
cp build-fuzz/tests/fuzz/fuzz_* .fz/p/bin/
for b in .fz/p/bin/*; do
    ldd "$b" | awk '$3 ~ /^\// {print $3}'
done | sort -u | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libgcc_s|libstdc\+\+)\.so' |
    while read -r l; do cp -L "$l" .fz/p/lib/; done
tar -czf .fz/fuzz.tgz -C .fz/p bin lib
rm -rf .fz/p
if [ -n "${1:-}" ]; then cp "$1" .fz/work.tgz; fi
ls -la .fz
