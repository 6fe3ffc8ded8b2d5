#!/bin/sh
# The compiled data plane (every module of netutil/dataplane.py's MODULES: the .pyx files
# and the pure-Python mode sources compiled under their _names) built with
# ASan + UBSan, then the router and bus tests and the differential fuzzers run
# against that build (issues 29, 42).
#
#   nice -n 10 sh tests/fuzz/sanitize.sh [FUZZ_INPUTS] [SEED] [PYTEST_PATHS...]
#
# The working tree's tracked files are copied to build/san (the in-place
# extension of the worktree is left alone: running processes may have it
# mapped) and the extension is built there, -O1 -g, with the sanitizers. The
# interpreter is not instrumented: the ASan and UBSan runtimes are preloaded
# and PYTHONMALLOC=malloc lets ASan see the objects' memory. Leak detection is
# off (CPython keeps its interned objects to exit); valgrind covers leaks
# (tests/fuzz/memcheck.sh). Any ASan or UBSan report stops the run (exit != 0).
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
out="$root/build/san"
inputs="${1:-1000000}"
seed="${2:-21}"
if [ $# -gt 2 ]; then shift 2; else set -- tests/router tests/cluster_bus; fi
rm -rf "$out" && mkdir -p "$out"
(cd "$root" && git ls-files | tar -cf - -T -) | tar -xf - -C "$out"
cd "$out"
CFLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" \
LDFLAGS="-fsanitize=address,undefined" \
    uv run --project "$root" --no-sync --with 'cython>=3.1,<3.4' --with 'setuptools>=70' \
    python setup.py -q build_ext --inplace >build.log 2>&1 || { cat build.log; exit 1; }
# the modules setup.py builds (netutil/dataplane.py's MODULES, the one list)
modules=$(python3 -c 'from netutil.dataplane import MODULES; print(" ".join(m for m, _ in MODULES))')
[ -n "$modules" ] || { echo "no modules read from netutil/dataplane.py" >&2; exit 1; }
for m in $modules; do
    so=$(ls "$(echo "$m" | tr . /)".*.so)
    nm -D "$so" | grep -q __asan_report || { echo "$so is not instrumented" >&2; exit 1; }
done
LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
export LD_PRELOAD PYTHONMALLOC=malloc PYTHONPATH="$out"
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
py="$root/.venv/bin/python"
for m in $modules; do
    "$py" -c "import $m as d; assert d.__file__.startswith('$out'), d.__file__; print('sanitized:', d.__file__)"
done
# not here: glibc malloc's mmap threshold (ASan replaces the allocator), and
# 100 PUBSUB CHANNELS of a 50,000-byte glob over 20,000 channels within the
# test's 60 s (every Python allocation through ASan: minutes)
"$py" -m pytest -q -p no:cacheprovider \
    --deselect tests/router/test_allocator.py::test_freed_large_blocks_leave_the_rss_once_the_threshold_is_fixed \
    --deselect tests/router/test_hostile_input.py::test_probe_answered_between_pipelined_hostile_pubsub_channels \
    "$@"
"$py" -m tests.fuzz.fuzz_resp --count "$inputs" --seed "$seed" --require-compiled
"$py" -m tests.fuzz.fuzz_loop --count "$((inputs / 1000 + 1))" --seed "$seed"
"$py" -m tests.fuzz.fuzz_forwarding --count "$((inputs / 100 + 1))" --seed "$seed"
"$py" -m tests.fuzz.fuzz_bus --count "$((inputs / 10 + 1))" --seed "$seed"
