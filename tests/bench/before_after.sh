#!/usr/bin/env bash
# Gateway binaries side by side in one sitting: the same poppy-bench rows, the binaries
# alternating (first, second, …, first, second, …), so all see the same load on a shared
# machine. Read each run's ratios (a row beside its reference row, same binary, same minute);
# the comparison lines of every run are printed at the end, with the load average.
#
#     tests/bench/before_after.sh [--rounds N] BIN… -- [poppy-bench args…]
#     tests/bench/before_after.sh --rounds 2 /tmp/main/poppy-gateway target/release/poppy-gateway \
#         -- --rows 7a,8a,8ao,7c,8c,8co --duration 3s --warmup 1s --held 0 --roundtrip-ops 0
#
# Each binary is named by its file name in the output (copy them to distinct names first).
# Needs the release poppy-bench (tests/bench/run.sh builds it). OUT_DIR (default a new
# temporary folder) keeps each run's report, `NAME-ROUND.md`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

rounds=2
if [[ ${1:-} == --rounds ]]; then
    rounds=$2
    shift 2
fi
bins=()
while (($#)) && [[ $1 != -- ]]; do
    bins+=("$(realpath "$1")")
    shift
done
[[ ${1:-} == -- ]] && shift
if ((${#bins[@]} < 2)); then
    echo "before_after.sh: name at least two gateway binaries" >&2
    exit 2
fi
target_dir=${CARGO_TARGET_DIR:-target}
bench="$target_dir/release/poppy-bench"
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
out=${OUT_DIR:-$(mktemp -d)}
mkdir -p "$out"

for round in $(seq 1 "$rounds"); do
    for bin in "${bins[@]}"; do
        name=$(basename "$bin")
        echo "before_after.sh: round $round, $name ($bin); load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
        "$bench" --nginx "$nginx_bin" --gateway-bin "$bin" "$@" >"$out/$name-$round.md" 2>"$out/$name-$round.err"
    done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$rounds"); do
    for bin in "${bins[@]}"; do
        name=$(basename "$bin")
        echo "## round $round, $name"
        grep -E '^- .*: row .* µs vs row' "$out/$name-$round.md" || echo "(no comparison lines: see $out/$name-$round.md)"
    done
done
echo "reports: $out"
