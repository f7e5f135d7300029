#!/usr/bin/env bash
# Runs every check CI runs, in the order CI runs them (.ci/run calls only this):
#   1. scripts/setup.sh (packages)
#   2. clang-format --dry-run -Werror over the C++ files in src/ and tests/
#   3. a -Werror build into build/ and the whole ctest suite
#   4. an ASan+UBSan build into build-asan/ and the whole ctest suite again
#   5. a TSan build into build-tsan/ only if src/ starts threads
#   6. the release artifacts and the servers users run: ctest -L 'release|servers' in
#      build/. The release artifacts: scripts/release.sh, twice for the reproducibility
#      check; the binaries in Debian 11 and 13 roots and under qemu. The servers: the lock
#      scripts' unit tests against Redis 6.0 (Debian 11's), Redis 8 and Valkey 8 (Debian
#      13's), from those roots; on Redis 6.0 also an e2e subset that runs every script and
#      mode, on Redis 8 and Valkey 8 test_acl and test_doctor (the host's Redis 7.0 ran
#      everything in stage 3)
# Stages 3-5 leave out the tests labelled `release` and `servers`; stage 4 also those
# labelled `model` and `packaging` (no code of redlock's to sanitize). Stage 6 costs about
# 7 CPU-minutes (two release.sh runs of 3.5): 4.5 min in CI. The servers' 21 tests (222 s
# of tests, mostly waiting) run in the slot release.sh leaves idle: here they were all done
# within `release: build` (316 s; load 8 on 2 shared cores). The Debian roots (6.5 min
# to download and unpack from a cold cache at load 8, 140 s of CPU) are made in the
# background from the start, beside the compilers.
# Every stage runs even when an earlier one failed, so one run shows everything; the
# exit status is non-zero if any stage failed. The summary gives each stage's time.
#
# Environment: JOBS (default 2), CTEST_TIMEOUT (seconds for one whole ctest run, 1500).
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
jobs=${JOBS:-2}
ctest_timeout=${CTEST_TIMEOUT:-1500}

failures=()
summaries=()
total_passed=0
total_failed=0

# Each banner starts a stage; the summary lists how long each took.
stage=""
stage_started=$SECONDS
stage_times=()
banner() {
    if [[ -n "$stage" ]]; then
        stage_times+=("$(printf '%5d s  %s' $((SECONDS - stage_started)) "$stage")")
    fi
    stage=$*
    stage_started=$SECONDS
    printf '\n==== %s ====\n' "$*"
}

# Runs one ctest suite from build dir $1 (label $2) with the test selection $3 (ctest
# options); the rest of the arguments are env assignments. Keeps ctest's closing lines
# for the final summary.
run_ctest() {
    local dir=$1 label=$2 select=$3
    shift 3
    local log="$dir/ctest.log"
    local rc=0
    env "$@" timeout --kill-after=30 "$ctest_timeout" \
        ctest --test-dir "$dir" -j"$jobs" --output-on-failure --timeout 600 $select 2>&1 |
        tee "$log" || rc=$?
    if ((rc == 124 || rc == 137)); then
        echo "test.sh: ctest ($label) did not finish within ${ctest_timeout}s" | tee -a "$log"
    fi
    # "100% tests passed, 0 tests failed out of 57" and the list of failed tests.
    local line
    line=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -1)
    if [[ -n "$line" ]]; then
        local failed_n total_n
        failed_n=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")
        total_n=$(sed -E 's/.* failed out of ([0-9]+).*/\1/' <<<"$line")
        total_failed=$((total_failed + failed_n))
        total_passed=$((total_passed + total_n - failed_n))
    else
        line="(ctest printed no summary, exit status $rc)"
        total_failed=$((total_failed + 1))
    fi
    summaries+=("$label: $line")
    while IFS= read -r failed; do
        summaries+=("$label:   $failed")
    done < <(sed -n '/^The following tests FAILED:/,/^Errors while running CTest/p' "$log" |
        grep -E '^\s+[0-9]+ - ' || true)
    if ((rc != 0)); then
        failures+=("ctest ($label)")
    fi
}

# Configures and builds into $1 with the remaining cmake arguments.
build() {
    local dir=$1
    shift
    mkdir -p "$root/$dir"
    cmake -S "$root" -B "$root/$dir" -DREDLOCK_BUILD_TESTS=ON "$@" >"$root/$dir/configure.log" 2>&1 ||
        {
            cat "$root/$dir/configure.log"
            return 1
        }
    cmake --build "$root/$dir" -j"$jobs"
}

banner "setup"
if ! bash scripts/setup.sh; then
    echo "test.sh: setup.sh failed" >&2
    exit 1
fi

# The Debian 11 and 13 roots of stage 6 (debootstrap: downloads and unpacking, 3.5 min in
# CI from a cold cache, 140 s of CPU) are made in the background from here on, beside
# the compilers, into the cache of build/ the fixtures `release: roots` and `servers:
# roots` read; those wait on the roots' lock if this is not done yet, and report any
# failure themselves. Skipped (77) when not root.
mkdir -p build/release-cache
roots_log=build/release-cache/roots.log
(
    started=$SECONDS rc=0
    cd tests/packaging &&
        REDLOCK_BUILD_DIR="$root/build" REDLOCK_RELEASE_CACHE="$root/build/release-cache" \
            PYTHONDONTWRITEBYTECODE=1 python3 runtests.py release_roots || rc=$?
    echo "roots: made in the background in $((SECONDS - started)) s, status $rc ($roots_log)"
) >"$roots_log" 2>&1 &
roots_pid=$!

banner "format: clang-format --dry-run -Werror"
mapfile -t cxx_files < <(find src tests -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' \
    -o -name '*.cc' -o -name '*.hh' \) | sort)
clang-format --version
if clang-format --dry-run -Werror "${cxx_files[@]}"; then
    echo "format: ${#cxx_files[@]} files formatted"
    summaries+=("format: ${#cxx_files[@]} files checked, all formatted")
else
    echo "format: unformatted files above; fix with: clang-format -i \$(git ls-files 'src/*.[ch]pp' 'tests/*.[ch]pp')"
    failures+=("clang-format")
    summaries+=("format: FAILED (see the clang-format output above)")
fi

# RelWithDebInfo (-O2 -g), the project's default: g++ 12 at -O3 (Release) warns
# -Wrestrict about std::string's operator+ inlined from libstdc++ (GCC bug 105651), a
# false positive that -Werror would turn into a failure.
banner "build (RelWithDebInfo, -Werror) into build/"
if build build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREDLOCK_WERROR=ON -DREDLOCK_SANITIZE=; then
    banner "ctest: build/"
    run_ctest build/ "werror" "-LE release|servers"
else
    failures+=("build (werror)")
    summaries+=("werror: build FAILED")
fi

banner "build (ASan+UBSan) into build-asan/"
# LeakSanitizer stops the process with ptrace; some sandboxes forbid that. Probe with a
# program that leaks on purpose: if LSan cannot report its leak, run without it.
detect_leaks=1
probe_dir=$(mktemp -d)
printf '#include <cstdlib>\nint main() { void* volatile p = std::malloc(77); p = nullptr; return 0; }\n' \
    >"$probe_dir/leak.cpp"
if g++ -fsanitize=address -g "$probe_dir/leak.cpp" -o "$probe_dir/leak" 2>"$probe_dir/cc.log"; then
    ASAN_OPTIONS=detect_leaks=1 "$probe_dir/leak" >"$probe_dir/out" 2>&1 || true
    if ! grep -q 'detected memory leaks' "$probe_dir/out"; then
        detect_leaks=0
        echo "note: LeakSanitizer cannot run here (no ptrace?); running ASan with detect_leaks=0:"
        sed 's/^/  /' "$probe_dir/out" | head -5
    else
        echo "LeakSanitizer works here: detect_leaks=1"
    fi
else
    echo "note: could not build the LeakSanitizer probe; keeping detect_leaks=1"
    cat "$probe_dir/cc.log"
fi
rm -rf "$probe_dir"

asan_env=(
    "ASAN_OPTIONS=detect_leaks=$detect_leaks:abort_on_error=1"
    "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1"
    # Sanitized binaries are slower; the e2e tests scale their deadlines by this.
    "REDLOCK_E2E_SLACK=${REDLOCK_E2E_SLACK:-3}"
)
# src/ in batches of 16 files (REDLOCK_UNITY): the -Werror build above already compiled
# each file alone. Without the tests that do not run redlock's code (the SPIN model) or
# check the docs and packages (label packaging): the -Werror build ran them.
if build build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREDLOCK_WERROR=OFF \
    -DREDLOCK_SANITIZE=address,undefined -DREDLOCK_UNITY=ON; then
    banner "ctest: build-asan/ (${asan_env[*]})"
    run_ctest build-asan/ "asan+ubsan" "-LE release|model|packaging|servers" "${asan_env[@]}"
else
    failures+=("build (asan+ubsan)")
    summaries+=("asan+ubsan: build FAILED")
fi

banner "ThreadSanitizer"
if grep -rqn 'std::thread\|std::jthread\|pthread_create\|std::async' src/; then
    echo "src/ starts threads:"
    grep -rn 'std::thread\|std::jthread\|pthread_create\|std::async' src/ | sed 's/^/  /'
    if build build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREDLOCK_WERROR=OFF \
        -DREDLOCK_SANITIZE=thread; then
        banner "ctest: build-tsan/"
        run_ctest build-tsan/ "tsan" "-LE release|servers" "TSAN_OPTIONS=halt_on_error=1" \
            "REDLOCK_E2E_SLACK=${REDLOCK_E2E_SLACK:-3}"
    else
        failures+=("build (tsan)")
        summaries+=("tsan: build FAILED")
    fi
else
    echo "skipped: src/ starts no threads (one poll loop, signals through signalfd), so"
    echo "ThreadSanitizer has nothing to check. It runs here once src/ uses std::thread."
    summaries+=("tsan: skipped, src/ starts no threads")
fi

# Runs the tests labelled $1 in build/ (the -Werror build), in a stage of their own.
run_label_stage() {
    local label=$1
    if [[ -f build/CTestTestfile.cmake ]]; then
        local started=$SECONDS
        run_ctest build/ "$label" "-L $label"
        summaries+=("$label: took $((SECONDS - started)) s")
    else
        failures+=("$label (no build/)")
        summaries+=("$label: not run, build/ was not configured")
    fi
}

banner "release artifacts and the servers users run: ctest -L 'release|servers' in build/"
wait "$roots_pid"
summaries+=("$(tail -1 "$roots_log")")
# scripts/release.sh builds both architectures from scratch into build/release-test/ (and
# once more for the reproducibility check); the sysroots and Debian roots it and the
# tests fetch are cached in build/release-cache/. The release tests have no sanitizer
# variant: they test the release build, which is not sanitized.
# Redis 6.0, Redis 8 and Valkey 8 run from those Debian roots (tests/packaging/servers.py),
# on the host's loopback. Their tests mostly wait on servers and timers: in one ctest run
# with the release tests they take the slot release.sh leaves idle beside it for most of
# the stage (its two runs, one test each), instead of a stage of their own.
run_label_stage 'release|servers'

banner "summary"
for line in "${summaries[@]}"; do
    echo "$line"
done
echo "time by stage (total $SECONDS s):"
for line in "${stage_times[@]}"; do
    echo "  $line"
done
echo "tests: $total_passed passed, $total_failed failed"
if ((${#failures[@]} > 0)); then
    echo "test.sh: FAILED: ${failures[*]}"
    exit 1
fi
echo "test.sh: all checks passed"
