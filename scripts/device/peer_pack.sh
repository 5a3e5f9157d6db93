#!/usr/bin/env bash
# Prepares the llama.cpp peer kit (../shared/peer, its README) for the device tool HERE: copies it
# to .peer/ (ignored by git) with the V4-Flash tokenizer xz-compressed (6.4 MB -> 1.3 MB), so that
# the tracked tree (~58.5 MB) and the kit (~5 MB) fit in what one call may send (64 MiB). The
# bundle (.device/bundle.tar.xz, 5.2 MB) does not fit beside them: carry .peer in one call and the
# bundle in the next, while the machine is warm (/tmp/v4peer keeps the peer's checkpoint).
#   scripts/device/peer_pack.sh                      # here
#   run(command="scripts/device/peer_run.sh", carry=[".peer"])   # on the device; repeat on RESUME
set -euo pipefail
cd "$(dirname "$0")/../.."
kit=${PEER_KIT:-../shared/peer}
tok=${PEER_TOKENIZER:-../shared/data/tokenizers/deepseek-v4-flash}
[ -f "$kit/run_llamacpp.sh" ] || { echo "peer_pack: no peer kit at $kit"; exit 2; }
[ -f "$tok/tokenizer.json" ] || { echo "peer_pack: no tokenizer.json in $tok"; exit 2; }
rm -rf .peer && mkdir -p .peer/tokenizer
cp "$kit"/* .peer/
cp "$tok"/tokenizer_config.json .peer/tokenizer/
xz -9e -T0 -c "$tok/tokenizer.json" > .peer/tokenizer/tokenizer.json.xz
grep -qx '/.peer/' .git/info/exclude 2>/dev/null || echo /.peer/ >> .git/info/exclude
tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
total=$(( tree + $(du -sb .peer | cut -f1) ))
echo "peer_pack: .peer ready; tracked tree + .peer = $(( total / 1048576 )) MiB of the device tool's 64 MiB"
[ "$total" -lt $(( 64 * 1048576 )) ] || { echo "peer_pack: too large to carry"; exit 1; }
