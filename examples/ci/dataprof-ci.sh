#!/usr/bin/env bash
# Generic CI step: sweep TARGET on this machine's GPU, gate it, keep JSON and HTML.
#
#   examples/ci/dataprof-ci.sh TARGET [more dataprof sweep options]
#
# Environment: OUT (default dataprof-out), BASELINE (default baseline/run.json:
# compared when present), MAX_REGRESSION (default 10%), FAIL_ON (default
# critical). Exit codes are dataprof's: 0 pass, 1 a gate failed, 2 usage error
# (no GPU visible included), 3 the dataset cannot be loaded, 130 interrupted.
set -uo pipefail
target="${1:?usage: dataprof-ci.sh TARGET [dataprof sweep options]}"
shift
out="${OUT:-dataprof-out}"
baseline="${BASELINE:-baseline/run.json}"
mkdir -p "$out"
gates=(--require-gpu --fail-on "${FAIL_ON:-critical}")
if [[ -f "$baseline" ]]; then
    gates+=(--baseline "$baseline" --max-regression "${MAX_REGRESSION:-10%}")
else
    echo "no baseline at $baseline: regression gate skipped" >&2
fi
NO_COLOR=1 dataprof sweep "$target" "${gates[@]}" --json "$out/run.json" --html "$out/report.html" "$@" \
    | tee "$out/report.txt"
status=${PIPESTATUS[0]}
if [[ -f "$baseline" && -f "$out/run.json" ]]; then
    NO_COLOR=1 dataprof compare "$baseline" "$out/run.json" --max-regression "${MAX_REGRESSION:-10%}" \
        > "$out/compare.txt" || true
fi
exit "$status"
