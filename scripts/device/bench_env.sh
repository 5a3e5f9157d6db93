# Sourced ON the GPU machine by the profiling scripts (profile.sh, ncu_detail.sh): $OUT, the
# bundle unpacked into /tmp/plumb-device (once per machine) and on PATH, the 3-layer real-dims
# synthetic at $CKPT (written once per machine, ~160 s), and $ncu with ncu_lib.sh's functions.
OUT=${OUT:-/tmp/plumb-results}; mkdir -p "$OUT"
CKPT=${CKPT:-/tmp/v4-flash-3layers}
dev=/tmp/plumb-device
[ -x $dev/bin/plumb_bench ] || { mkdir -p $dev && tar -C $dev -xJf .device/bundle.tar.xz; }
export LD_LIBRARY_PATH="$dev/lib:${LD_LIBRARY_PATH:-}" PATH="$dev/bin:$PATH"
[ -f "$CKPT/config.json" ] || plumb synth --config bench/configs/v4-flash-3layers.json --out "$CKPT" --no-mtp --force > /tmp/synth.log 2>&1
. scripts/device/ncu_lib.sh
