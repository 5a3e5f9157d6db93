#!/usr/bin/env bash
# Runs ON the GPU machine with .peer carried (scripts/device/peer_pack.sh): unpacks the tokenizer
# beside the kit, then the kit's run_llamacpp.sh (default `all`; prints RESUME when it must be
# called again at once). Arguments go to run_llamacpp.sh. Then, at once, in the same warm lease:
# scripts/device/side_by_side.sh with the bundle carried.
set -uo pipefail
cd "$(dirname "$0")/../.."
[ -f .peer/run_llamacpp.sh ] || { echo "peer_run: .peer not carried (scripts/device/peer_pack.sh, carry [\".peer\"])"; exit 2; }
[ -f .peer/tokenizer/tokenizer.json ] || xz -dc .peer/tokenizer/tokenizer.json.xz > .peer/tokenizer/tokenizer.json
# A copy of the kit on the machine, so that a later call of the same lease that carries the bundle
# instead (scripts/device/side_by_side.sh) can run the bench phase.
mkdir -p /tmp/v4peer && rm -rf /tmp/v4peer/kit && cp -r .peer /tmp/v4peer/kit
exec bash .peer/run_llamacpp.sh "${@:-all}"
