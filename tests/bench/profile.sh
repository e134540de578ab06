#!/usr/bin/env bash
# Profile the gateway under one benchmark row (see BENCHMARKS.md, "Scaling (issue 28)"):
#
#     tests/bench/profile.sh ROW OUT [GATEWAY_BIN]    # e.g. tests/bench/profile.sh 7b /tmp/prof-7b
#
# Runs poppy-bench with that row for 12 s and records the row's gateway with
# `perf record --call-graph dwarf` for 5 s of its measured window, into OUT.data; read it with
# `perf report -i OUT.data --children --sort symbol -g none --stdio`. Needs the release binaries
# (tests/bench/run.sh builds them; the release profile keeps line tables) and perf.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

row=$1
out=$(realpath -m "$2")
target_dir=${CARGO_TARGET_DIR:-target}
bin=${3:-$target_dir/release/poppy-gateway}
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)

"$target_dir/release/poppy-bench" --nginx "$nginx_bin" --gateway-bin "$bin" --rows "$row" \
    --duration 12s --warmup 1s --held 0 --roundtrip-ops 0 >"$out.bench.md" 2>"$out.bench.err" &
bench=$!
gateway=
for _ in $(seq 1 200); do
    gateway=$(pgrep -P "$bench" -f -- "$(basename "$bin") --config" || true)
    [[ -n $gateway ]] && break
    sleep 0.1
done
if [[ -z $gateway ]]; then
    echo "profile.sh: no gateway started by poppy-bench (see $out.bench.err)" >&2
    wait "$bench" || true
    exit 1
fi
sleep 4 # start-up and warm-up: record inside the measured window
perf record -F 1999 --call-graph dwarf,16384 -o "$out.data" -p "$gateway" -- sleep 5 2>"$out.perf.err"
wait "$bench"
echo "profile.sh: $out.data (gateway pid $gateway); the row's report is $out.bench.md"
