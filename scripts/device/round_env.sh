# Sourced ON the GPU machine by quick_round.sh and long_checks.sh with their tag ($1: quick, long):
# logs go to the work folder OUT=/tmp/plumb-$1, which pack_round packs into $FINAL/$1.tgz (FINAL is
# the device tool's $OUT: it returns at most 8 files) beside the summary file named; the bundle
# unpacked into /tmp/plumb-device (once per bundle) and on PATH; the test binary's build-machine
# paths (its fixtures, the plumb binary it runs) made to resolve; CKPT the synthetic's folder.
round=$1
FINAL=${OUT:-/tmp/plumb-final}
OUT=/tmp/plumb-$round
rm -rf "$OUT" && mkdir -p "$OUT" "$FINAL"
CKPT=${CKPT:-/tmp/v4-flash-3layers}
dev=/tmp/plumb-device
# Unpacked again when the carried bundle is another (a warm machine may hold an earlier call's).
sum=$(sha256sum .device/bundle.tar.xz 2>/dev/null | cut -d' ' -f1)
[ -n "$sum" ] || { echo "no bundle"; exit 1; }
if [ "$(cat $dev/.bundle-sum 2>/dev/null)" != "$sum" ]; then
  rm -rf $dev && mkdir -p $dev && tar -C $dev -xJf .device/bundle.tar.xz && echo "$sum" > $dev/.bundle-sum || { echo "bad bundle"; exit 1; }
fi
export LD_LIBRARY_PATH="$dev/lib:${LD_LIBRARY_PATH:-}" PATH="$dev/bin:$PATH"
scripts/fixtures.sh unpack || exit 1  # the golden fixtures' checkpoints and logits (committed as archives)
src=$(strings "$dev/bin/plumb_tests" | grep -m1 -oE '^/[^ ]*/tests/data$' | sed 's#/tests/data$##')
[ -n "$src" ] && [ "$src" != "$(pwd)" ] && { mkdir -p "$(dirname "$src")"; ln -sfn "$(pwd)" "$src"; }
bin=$(strings "$dev/bin/plumb_tests" | grep -m1 -oE '^/[^ ]*/plumb$')
[ -n "$bin" ] && [ ! -e "$bin" ] && { mkdir -p "$(dirname "$bin")"; ln -sfn "$dev/bin/plumb" "$bin"; }

pack_round() {  # summary file name
  tar czf "$FINAL/$round.tgz" -C "$OUT" . && cp "$OUT/$1" "$FINAL/"
}
