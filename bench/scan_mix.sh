#!/usr/bin/env bash
# What completed searches cost a fragile DMS (issue 40): the release gateway against a stand-in
# DMS that lists sold units, pages by 50 and answers in 100 ms (bench/scan_mix.rs), for each
# stock size in BENCH_UNITS. Per size: the largest scan cold and warm on a fresh gateway, the
# seeded mix of 1,000 searches and facets from one buyer (DMS calls per AAP call: mean, p99,
# max), and the same mix arriving at BENCH_RATE calls a second (the DMS's peak calls a second,
# buyer latency). Prints a Markdown table (stdout) and one JSON line per run (stderr).
#
#   BENCH_UNITS="130 2000"     stock sizes of the stand-in DMS
#   BENCH_CALLS=1000           AAP calls in the mix
#   BENCH_SEED=40              the generator's seed (the same seed, the same mix)
#   BENCH_RATE=50              arrivals a second of the open-loop run
#   BENCH_SCAN_CACHE=5s        the mapping's scan_cache (short, so the mix spans several windows)
#   BENCH_SCAN_STALE=0s        the mapping's scan_stale
#   BENCH_SCAN_QUERY=filtered  the mapping's scan_query (every_unit: one scan answers every search)
#   BENCH_MAX_CONCURRENCY=8    the upstream's max_concurrency
#   BENCH_MAX_RPS=             the upstream's max_requests_per_second (none when empty)
#   BENCH_THINK_MS=20          mean think time between the sequential run's calls
#   BENCH_RUNS=cold,sequential,open
#   BENCH_BIN=…/release/aap-gateway   the gateway binary
#   BENCH_BUILD=1              1: build the release gateway (CARGO_BUILD_JOBS=1) and the bench
#
# Exit status: 0 when every run ran; 1 when the bench could not run.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

UNITS=${BENCH_UNITS:-130 2000}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
if [[ ${BENCH_BUILD:-1} == 1 ]]; then
    (cd "$ROOT" && CARGO_BUILD_JOBS=1 cargo build --release --bin aap-gateway) \
        || die "the release build failed"
    # The generator and the stand-in DMS wait 100 ms per call: a debug build measures the same.
    (cd "$ROOT" && cargo build --example scan_mix) || die "the bench build failed"
fi
[[ -x $BIN ]] || die "no gateway binary at $BIN (BENCH_BIN)"
MIX=$TARGET_DIR/debug/examples/scan_mix
[[ -x $MIX ]] || die "no bench binary at $MIX"

header=1
for units in $UNITS; do
    "$MIX" --bin "$BIN" --units "$units" \
        --calls "${BENCH_CALLS:-1000}" --seed "${BENCH_SEED:-40}" --rate "${BENCH_RATE:-50}" \
        --scan-cache "${BENCH_SCAN_CACHE:-5s}" --scan-stale "${BENCH_SCAN_STALE:-0s}" \
        --scan-query "${BENCH_SCAN_QUERY:-filtered}" \
        --max-concurrency "${BENCH_MAX_CONCURRENCY:-8}" --think-ms "${BENCH_THINK_MS:-20}" \
        --runs "${BENCH_RUNS:-cold,sequential,open}" \
        ${BENCH_MAX_RPS:+--max-rps "$BENCH_MAX_RPS"} \
        | if (( header )); then cat; else tail -n +3; fi
    header=0
done
