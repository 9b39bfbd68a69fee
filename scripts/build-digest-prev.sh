#!/usr/bin/env bash
# Builds the logits_digest tool of an earlier revision into .carry/bin/logits_digest_prev.xz, for
# plans that compare a change's digests with the build before it (`logits_digest_prev` lines).
# The revision is built from a git worktree into its own target folder, kept between runs.
# Usage: scripts/build-digest-prev.sh REV   (after scripts/build-gpu-carry.sh, which empties .carry)
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?the revision whose digests the plan compares against}
[ -d .carry/bin ] || { echo "build-digest-prev: no .carry/bin; run scripts/build-gpu-carry.sh first" >&2; exit 1; }
tree=$(mktemp -d)
trap 'git worktree remove --force "$tree" > /dev/null 2>&1 || true; rm -rf "$tree"' EXIT
git worktree add -q --detach "$tree" "$rev"
target="${DIGEST_PREV_TARGET:-$HOME/.cache/kiln/digest-prev-target}"
(cd "$tree" && CARGO_TARGET_DIR="$target" cargo build -q -p kiln --release --example logits_digest)
strip --strip-debug -o .carry/bin/logits_digest_prev "$target/release/examples/logits_digest"
xz -f -T2 -6 .carry/bin/logits_digest_prev
chmod +x .carry/bin/logits_digest_prev.xz
echo "$(git rev-parse --short "$rev")" > .carry/digest-prev-commit.txt
echo "build-digest-prev: .carry/bin/logits_digest_prev.xz from $(git rev-parse --short "$rev")" >&2
