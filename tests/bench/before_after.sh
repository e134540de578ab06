#!/usr/bin/env bash
# Two gateway binaries side by side in one sitting: the same poppy-bench rows, the binaries
# alternating (before, after, before, after, …), so both see the same load on a shared machine.
# Read each run's ratios (a row beside its reference row, same binary, same minute); the
# comparison lines of every run are printed at the end, with the load average.
#
#     tests/bench/before_after.sh BEFORE_BIN AFTER_BIN [ROUNDS] [poppy-bench args…]
#     tests/bench/before_after.sh /tmp/main/poppy-gateway target/release/poppy-gateway 3 \
#         --rows 7a,8a,8ao,7c,8c,8co --duration 3s --warmup 1s --held 0 --roundtrip-ops 0
#
# Needs the release poppy-bench (tests/bench/run.sh builds it). Output: OUT_DIR (default a new
# temporary folder) holds each run's report, `before-N.md` and `after-N.md`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

before=$(realpath "$1")
after=$(realpath "$2")
rounds=${3:-3}
shift 3 || shift $#
target_dir=${CARGO_TARGET_DIR:-target}
bench="$target_dir/release/poppy-bench"
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
out=${OUT_DIR:-$(mktemp -d)}
mkdir -p "$out"

for round in $(seq 1 "$rounds"); do
    for side in before after; do
        bin=$before
        [[ $side == after ]] && bin=$after
        echo "before_after.sh: round $round, $side ($bin); load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
        "$bench" --nginx "$nginx_bin" --gateway-bin "$bin" "$@" >"$out/$side-$round.md" 2>"$out/$side-$round.err"
    done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$rounds"); do
    for side in before after; do
        echo "## round $round, $side"
        grep -E '^- .*: row .* µs vs row' "$out/$side-$round.md" || echo "(no comparison lines: see $out/$side-$round.md)"
    done
done
echo "reports: $out"
