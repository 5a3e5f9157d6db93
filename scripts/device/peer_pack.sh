#!/usr/bin/env bash
# Prepares the llama.cpp peer kit (../shared/peer, its README) for the device tool HERE: copies it
# to .peer/ (ignored by git) with the V4-Flash tokenizer xz-compressed (6.4 MB -> 1.3 MB), so that
# the tracked tree (~53 MiB with the fixtures packed, scripts/fixtures.sh), the bundle
# (.device/bundle.tar.xz, ~5.3 MiB) and the kit (~5 MiB) fit in what one call may send (64 MiB):
#   scripts/device/bundle.sh && scripts/device/peer_pack.sh                  # here
#   run(command="scripts/device/side_by_side.sh", carry=[".device/bundle.tar.xz", ".peer"])
# (side_by_side.sh runs peer_run.sh's prep first when the machine has not got the peer yet).
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
bundle=$(stat -c %s .device/bundle.tar.xz 2>/dev/null || echo 0)
total=$(( tree + $(du -sb .peer | cut -f1) ))
echo "peer_pack: .peer ready; tracked tree + .peer = $(( total / 1048576 )) MiB, with the bundle" \
     "$(( (total + bundle) / 1048576 )) MiB, of the device tool's 64 MiB"
[ "$total" -lt $(( 64 * 1048576 )) ] || { echo "peer_pack: too large to carry"; exit 1; }
[ $(( total + bundle )) -lt $(( 64 * 1048576 )) ] ||
  echo "peer_pack: WARNING: tree + .peer + bundle is over 64 MiB: BUNDLE_BINS=bench/plumb_bench scripts/device/bundle.sh packs only the bench"
