#!/bin/sh
# valgrind memcheck over the differential fuzzer with the compiled request
# parser (the normal -O2 build that uv sync makes), issue 29.
#
#   nice -n 10 sh tests/fuzz/memcheck.sh [FUZZ_INPUTS] [SEED]
#
# Prints the error summary, the definite leaks, and how many error or leak
# stacks pass through the extension (_dataplane): that count must be 0.
# CPython itself, without its Misc/valgrind-python.supp, reports a few
# "uninitialised value" contexts at start-up and import (`python -c pass`
# shows them too); PYTHONMALLOC=malloc lets memcheck see every object.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
log="${MEMCHECK_LOG:-/tmp/bloomcast-memcheck.log}"
PYTHONMALLOC=malloc valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite \
    --errors-for-leak-kinds=definite --num-callers=40 --log-file="$log" \
    .venv/bin/python -m tests.fuzz.fuzz_resp --count "${1:-3000}" --seed "${2:-31}" --require-compiled
grep "ERROR SUMMARY" "$log"
grep "definitely lost:" "$log" || echo "no definite leak"
ours=$(grep -c "_dataplane" "$log" || true)
echo "stacks through _dataplane: $ours (log: $log)"
[ "$ours" -eq 0 ]
