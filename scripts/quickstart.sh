#!/usr/bin/env bash
# README command (a): install dependencies, build, and run the main job on the embedded default
# model (models/tiny-v4, a small random DeepSeek-V4 checkpoint in the official layout).
# Until the forward pass lands this main job is `plumb inspect` on that checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build/plumb inspect models/tiny-v4
