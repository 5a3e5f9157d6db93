#!/usr/bin/env bash
# README command (a): install dependencies, build, and generate text with the embedded default
# model (models/tiny-kjv, a small trained DeepSeek-V4-architecture model in the official
# checkpoint layout): a seeded, sampled continuation of a KJV-style prompt, streamed as it is
# generated, then a stats line on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build/plumb run --model models/tiny-kjv --prompt "And God said," --seed 1 --max-new-tokens 60
