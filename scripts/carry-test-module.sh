#!/usr/bin/env bash
# Copied by scripts/build-gpu-carry.sh as .carry/bin/NAME for each module NAME of kiln-cuda's one
# integration-test executable (.carry/bin/kiln_cuda_tests; one module per file of
# crates/kiln-cuda/tests/all), so that NAME runs as that file's own executable once did:
# `bin/NAME [OPTIONS] [FILTER...]` runs NAME's tests whose name below `NAME::` contains a FILTER
# (all of NAME's tests without one; `--exact`: equals one), `--skip` the same way, every other
# option passed on (--include-ignored, --test-threads=1, --nocapture, --list...).
set -euo pipefail
dir=$(dirname "$0")
module=$(basename "$0")
exe="$dir/kiln_cuda_tests"
opts=()
filters=()
skips=()
exact=0
while [ $# -gt 0 ]; do
    case "$1" in
        --exact) exact=1 ;;
        --skip) skips+=("$2"); shift ;;
        --skip=*) skips+=("${1#--skip=}") ;;
        --test-threads | --color | --format | --logfile | --shuffle-seed | -Z) opts+=("$1" "$2"); shift ;;
        -*) opts+=("$1") ;;
        *) filters+=("$1") ;;
    esac
    shift
done
# The module's tests chosen here, then named exactly: the harness ORs its filters, so NAME::
# beside the caller's filters would select the union.
matches() { # TEST PATTERN...
    local t=$1 p
    shift
    for p in "$@"; do
        if [ "$exact" = 1 ]; then [ "$t" = "$p" ] && return 0; else [[ "$t" == *"$p"* ]] && return 0; fi
    done
    return 1
}
chosen=()
while IFS= read -r line; do
    full=${line%: test}
    [[ "$full" == "$module::"* ]] || continue
    t=${full#"$module::"}
    [ ${#filters[@]} -eq 0 ] || matches "$t" "${filters[@]}" || continue
    [ ${#skips[@]} -gt 0 ] && matches "$t" "${skips[@]}" && continue
    chosen+=("$full")
done < <("$exe" --list --format terse)
# None chosen: a name no test has, so the harness reports 0 tests as it would have.
[ ${#chosen[@]} -gt 0 ] || chosen=("$module::")
exec "$exe" "${opts[@]}" --exact "${chosen[@]}"
