#!/usr/bin/env bash
# The golden fixtures' large files (tests/data/golden/**: *.safetensors checkpoints and
# *.logits.npy logits, ~23 MB) are committed xz-compressed, one blobs.tar.xz per fixture folder,
# so that the working tree, the GPU bundle and the llama.cpp peer kit fit in one call of the
# device tool (64 MiB; issue 17 item 7). The unpacked files sit beside their archive, ignored by
# git (.gitignore), where the tests and tools/golden read them.
#   scripts/fixtures.sh unpack   extract every archive newer than its folder's stamp (the list of
#                                its files), or whose files are not all there (the build's
#                                configure step runs it; so do the device scripts that read them)
#   scripts/fixtures.sh pack     after regenerating fixtures (tools/golden): rewrite each folder's
#                                archive from its files, byte for byte reproducible (an unchanged
#                                folder gives the committed archive again)
set -euo pipefail
cd "$(dirname "$0")/.."
root=tests/data/golden
stamp=.blobs-unpacked

# Whether dir's stamp is newer than its archive and every file it lists (the archive's members)
# is there.
fresh() {
  local dir=$1 a=$2 f
  [ -f "$dir/$stamp" ] && [ ! "$a" -nt "$dir/$stamp" ] || return 1
  while IFS= read -r f; do [ -f "$dir/$f" ] || return 1; done < "$dir/$stamp"
}

unpack() {
  local a dir tmp f
  while IFS= read -r -d '' a; do
    dir=$(dirname "$a")
    fresh "$dir" "$a" && continue
    # Into a scratch folder first, then renamed into place file by file: a reader never sees a
    # half-written fixture, and a failed extraction leaves the old files and stamp (the archive
    # stays newer than the stamp, so the next run tries again).
    tmp=$(mktemp -d "$dir/.unpack.XXXXXX")
    if ! tar -C "$tmp" -xJf "$a"; then
      rm -rf "$tmp"
      echo "fixtures: $a is not a readable tar.xz archive (re-checkout it: git checkout -- $a)" >&2
      exit 2
    fi
    (cd "$tmp" && find . -maxdepth 1 -type f ! -name "$stamp" -printf '%f\n' | LC_ALL=C sort) > "$tmp/$stamp"
    for f in "$tmp"/* "$tmp/$stamp"; do mv -f "$f" "$dir/"; done
    rmdir "$tmp"
  done < <(find "$root" -name blobs.tar.xz -print0)
}

pack() {
  local dir files
  while IFS= read -r -d '' dir; do
    mapfile -t files < <(cd "$dir" && find . -maxdepth 1 -type f \( -name '*.safetensors' -o -name '*.logits.npy' \) \
                          -printf '%f\n' | LC_ALL=C sort)
    [ "${#files[@]}" -gt 0 ] || continue
    tar -C "$dir" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=gnu -cf - "${files[@]}" |
      xz -9e -T1 > "$dir/blobs.tar.xz.new"
    mv -f "$dir/blobs.tar.xz.new" "$dir/blobs.tar.xz"
    printf '%s\n' "${files[@]}" > "$dir/$stamp"
    echo "fixtures: $dir/blobs.tar.xz: ${#files[@]} files, $(stat -c %s "$dir/blobs.tar.xz") bytes"
  done < <(find "$root" -type d -print0)
}

case "${1:-}" in
  unpack) unpack ;;
  pack) pack ;;
  *) echo "usage: scripts/fixtures.sh unpack|pack" >&2; exit 2 ;;
esac
