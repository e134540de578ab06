#!/usr/bin/env bash
# The side-by-side benchmark, in one command (see BENCHMARKS.md):
#
#     tests/bench/run.sh                        # every row, 10 s each
#     tests/bench/run.sh --duration 30s --json /tmp/bench.json
#     tests/bench/run.sh --rows 1,2,3 --duration 3s
#     tests/bench/run.sh --wrk                  # also every row wrk can drive, under wrk
#
# Installs what is missing (nginx, redis-server, taskset, wrk, cmake; as root, or says what to
# install), builds the release binaries (poppy-gateway, poppy-bench) and runs poppy-bench
# with the arguments given. Respects CARGO_TARGET_DIR. Only 127.0.0.1 is ever used.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

missing=()
command -v nginx >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]] || missing+=(nginx)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v taskset >/dev/null 2>&1 || missing+=(util-linux)
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
if ((${#missing[@]})); then
    if [[ $(id -u) -eq 0 ]]; then
        echo "run.sh: installing ${missing[*]}" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y --no-install-recommends "${missing[@]}"
    else
        echo "run.sh: missing ${missing[*]}; install them first:" >&2
        echo "    sudo apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
fi
# Debian's nginx lives in /usr/sbin, which a non-root PATH may lack.
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)

cargo build --release -p poppy-gateway -p poppy-bench
target_dir=${CARGO_TARGET_DIR:-target}
exec "$target_dir/release/poppy-bench" --nginx "$nginx_bin" \
    --gateway-bin "$target_dir/release/poppy-gateway" "$@"
