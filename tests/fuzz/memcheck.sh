#!/bin/sh
# valgrind memcheck over the differential fuzzers with the compiled data
# plane (the normal -O2 build that uv sync makes), issues 29 and 42.
#
#   nice -n 10 sh tests/fuzz/memcheck.sh [FUZZ_INPUTS] [SEED]
#
# Prints the error summary, the definite leaks, and the errors that are the
# extensions' (netutil/dataplane.py's MODULES: router/_*.so and cluster_bus/_*.so, their
# functions named __pyx_..._6router_... and ..._11cluster_bus_...): raised in
# them or in what it calls directly (before
# any interpreter frame), or an invalid access or a definite leak through it.
# That count must be 0.
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
# the compiled request loop (tests/fuzz/fuzz_loop.py): a script per 100 inputs
PYTHONMALLOC=malloc valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite \
    --errors-for-leak-kinds=definite --num-callers=40 --log-file="$log.loop" \
    .venv/bin/python -m tests.fuzz.fuzz_loop --count "$(( ${1:-3000} / 100 + 1 ))" --seed "${2:-31}"
# the compiled bus (tests/fuzz/fuzz_forwarding.py): a script per 10 inputs
PYTHONMALLOC=malloc valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite \
    --errors-for-leak-kinds=definite --num-callers=40 --log-file="$log.bus" \
    .venv/bin/python -m tests.fuzz.fuzz_forwarding --count "$(( ${1:-3000} / 10 + 1 ))" --seed "${2:-31}"
ours=0
for l in "$log" "$log.loop" "$log.bus"; do
    grep "ERROR SUMMARY" "$l"
    grep "definitely lost:" "$l" || echo "no definite leak"
    # ours: an error raised in the extension or in what it calls directly
    # (its frame comes before any interpreter frame, counted from the
    # innermost), or an invalid access or definite leak whose stack passes
    # through it. The request loop calls back into Python (execute), so
    # CPython's own reports inside interpreted code (uninitialised values
    # the reference path's stacks show too) pass through it as well: those
    # are not its own
    top=$(awk '/^==[0-9]+== $/ { seen = 0; next }
               / (at|by) 0x/ && !seen { if ($0 ~ /6router_|11cluster_bus_|router\/_[a-z]+\.cpython|cluster_bus\/_[a-z]+\.cpython/) { n++; seen = 1 }
                                        else if ($0 ~ /_PyEval_EvalFrameDefault/) seen = 1 }
               END { print n + 0 }' "$l")
    bad=$(awk '/^==[0-9]+== $/ { if (b ~ /6router_|11cluster_bus_|router\/_[a-z]+\.cpython|cluster_bus\/_[a-z]+\.cpython/ && b ~ /(Invalid|Mismatched|overlap|definitely lost)/) n++; b = ""; next }
               { b = b "\n" $0 } END { print n + 0 }' "$l")
    through=$(grep -cE "6router_|11cluster_bus_|router/_[a-z]+\.cpython|cluster_bus/_[a-z]+\.cpython" "$l" || true)
    echo "errors of the extensions: $top; invalid accesses or leaks through them: $bad; frames through them in all: $through (log: $l)"
    ours=$((ours + top + bad))
done
[ "$ours" -eq 0 ]
