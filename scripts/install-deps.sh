#!/usr/bin/env bash
# Installs plumb's build and test dependencies from Debian 12 (bookworm) apt. Idempotent: does
# nothing when everything is already installed. Needs root or passwordless sudo.
# --hip adds Debian's hipcc and HIP runtime (~1.7 GB) for the gfx90a compile that the test suite
# (scripts/test.sh) runs; the quickstart does not need them. --plots adds python3-matplotlib.
set -euo pipefail
PKGS=(
  build-essential cmake ninja-build ccache pkg-config
  nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev
  libgtest-dev libgmock-dev
  libpcre2-dev libopenblas-dev
  libsimdjson-dev
  libboost-dev
  openmpi-bin libopenmpi-dev
  clang libclang-rt-14-dev python3-numpy
)
# --hip: HIP for the gfx90a (MI250) compile of the GPU backend (no AMD GPU needed to compile)
# --plots: matplotlib for tools/plot_bench.py (`plumb bench serve --plot`, benchmark PNGs); optional
for arg in "$@"; do
  case $arg in
    --hip) PKGS+=(hipcc libamdhip64-dev rocm-device-libs) ;;
    --plots) PKGS+=(python3-matplotlib) ;;
  esac
done
missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
