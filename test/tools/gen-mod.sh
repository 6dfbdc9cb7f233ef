#!/usr/bin/env bash
# gen-mod.sh writes a throwaway tools module that builds a tool's main packages
# from the tool's own pins. Used when a pin in versions.txt changes; the
# resulting go.mod/go.sum are committed so that build.sh is reproducible.
#
#   gen-mod.sh <dir> <module>@<version> [staging-version]
#
# The tool's own go.mod is copied with its module line renamed, its local
# (=> ./ or => ../) replace lines and tool directives dropped (they only work
# inside the tool's repository), and a require of the tool module added.
# With staging-version (k8s.io/kubernetes), every k8s.io staging module that
# the dropped replaces pointed into the repository is replaced by its
# published version instead. Pins the tool's go.mod gets wrong (CDI's API
# module at v0.0.0) are fixed by hand afterwards; see versions.txt.
set -euo pipefail

dir=$1 modver=$2 staging=${3:-}
mod=${modver%@*} ver=${modver#*@}
json=$(go mod download -json "$modver")
gomod=$(sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p' <<<"$json")
srcdir=$(sed -n 's/^\t"Dir": "\(.*\)",$/\1/p' <<<"$json")
[ -n "$gomod" ] && [ -n "$srcdir" ] || { echo "gen-mod: cannot download $modver" >&2; exit 1; }

mkdir -p "$dir"
awk -v name="csi-clone-sidecar-tools/$(basename "$dir")" -v staging="$staging" '
  function localrepl(l) { return l ~ /=>[ \t]*\.\.?\// }
  /^module[ \t]/ { print "module " name; next }
  /^toolchain[ \t]/ { next }
  /^tool[ \t]*\(/ { skip = 1; next }
  skip && /^\)/ { skip = 0; next }
  skip { next }
  /^tool[ \t]/ { next }
  /^replace[ \t]*\(/ { inrep = 1; print; next }
  inrep && /^\)/ { inrep = 0; print; next }
  (inrep || /^replace[ \t]/) && localrepl($0) {
    if (staging != "") {
      line = $0; sub(/^replace[ \t]+/, "", line); split(line, f, /[ \t]+/)
      m = (f[1] == "") ? f[2] : f[1]
      if (m ~ /^k8s\.io\//) print (inrep ? "\t" : "replace ") m " => " m " " staging
    }
    next
  }
  { print }
' "$gomod" > "$dir/go.mod"
printf '\nrequire %s %s\n' "$mod" "$ver" >> "$dir/go.mod"
# Seed go.sum with the tool's own: some of its pins (e.g. CDI's) are not in
# the checksum database this machine can reach, and -mod=mod would refuse them.
cp "$srcdir/go.sum" "$dir/go.sum" 2>/dev/null || : >"$dir/go.sum"
chmod u+w "$dir/go.sum"
echo "gen-mod: $dir from $modver"
