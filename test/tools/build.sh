#!/usr/bin/env bash
# build.sh builds every pinned test tool once into a cache outside the repo,
# keyed by name and version, and extracts the CRD sets the harness needs.
# A tool already in the cache is not rebuilt. Pins live in versions.txt.
#
#   test/tools/build.sh            build everything missing, in versions.txt order
#   test/tools/build.sh NAME...    only these tools / CRD sets
#
# Cache: ${XDG_CACHE_HOME:-$HOME/.cache}/csi-clone-sidecar/
#   bin/<name>-<version>           one static binary per tool
#   crds/<name>-<version>/*.yaml   one directory per CRD set
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/csi-clone-sidecar
mkdir -p "$CACHE/bin" "$CACHE/crds"

# Static, stripped, path-free binaries: smaller and independent of the checkout.
export CGO_ENABLED=0

# A second build.sh (another helper, make tools) waits instead of racing us
# into the same go build of the same tool.
exec 9>"$CACHE/.build.lock"
if ! flock -n 9; then
	echo "tools: another build.sh is running; waiting for it"
	flock 9
fi

declare -A wanted=()
for n in "$@"; do wanted[$n]=1; done
want() { [ ${#wanted[@]} -eq 0 ] || [ -n "${wanted[$1]:-}" ]; }

# ldflags_for prints the -X flags that make a tool report its own version.
ldflags_for() {
	local dir=$1 ver=$2
	case $dir in
	helm) printf -- ' -X helm.sh/helm/v3/internal/version.version=%s' "$ver" ;;
	kubernetes)
		local mm=${ver#v} p
		local major=${mm%%.*} minor=${mm#*.}
		minor=${minor%%.*}
		for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
			printf -- ' -X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean' \
				"$p" "$ver" "$p" "$major" "$p" "$minor" "$p"
		done
		;;
	provisioner | resizer | snapshotter) printf -- ' -X main.version=%s' "$ver" ;;
	sanity) printf -- ' -X main.VERSION=%s' "$ver" ;;
	esac
}

# build_bin builds one tool unless its binary is already cached.
build_bin() {
	local name=$1 ver=$2 dir=$3 pkg=$4
	local out="$CACHE/bin/$name-$ver"
	if [ -x "$out" ]; then
		echo "tools: $name $ver cached"
		return
	fi
	local tmp="$CACHE/bin/.$name-$ver.tmp.$$" start=$SECONDS
	echo "tools: $name $ver building"
	# -mod=mod: the committed go.sum pins every module; go may only add to it.
	if ! (cd "$here/mod/$dir" && go build -mod=mod -trimpath \
		-ldflags="-s -w$(ldflags_for "$dir" "$ver")" -o "$tmp" "$pkg"); then
		rm -f "$tmp"
		echo "tools: $name $ver FAILED after $((SECONDS - start))s" >&2
		return 1
	fi
	mv -f "$tmp" "$out"
	echo "tools: $name $ver built in $((SECONDS - start))s"
}

# extract_crds fills crds/<name>-<version>/ from a module directory or by
# running one of our tools; it is filled in a temp dir and renamed, so a
# directory that exists is complete.
extract_crds() {
	local name=$1 ver=$2 mod=$3 src=$4 only=${5:-*.yaml}
	local out="$CACHE/crds/$name-$ver"
	if [ -d "$out" ]; then
		echo "tools: crds/$name $ver cached"
		return
	fi
	local tmp="$CACHE/crds/.$name-$ver.tmp.$$" start=$SECONDS
	rm -rf "$tmp" && mkdir -p "$tmp"
	if [[ $src == bin:* ]]; then
		local tool=${src#bin:}
		# (set -e does not apply here: main calls us in an || list.)
		"$CACHE/bin/$tool-$(version_of "$tool")" "$tmp" || {
			echo "tools: crds/$name $ver: $tool failed" >&2
			rm -rf "$tmp"
			return 1
		}
	else
		local moddir
		moddir=$(cd / && go mod download -json "$mod@$ver" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
		[ -n "$moddir" ] && copy_crds "$moddir/$src" "$only" "$tmp" || {
			echo "tools: crds/$name $ver: no CRD in $mod/$src/$only" >&2
			rm -rf "$tmp"
			return 1
		}
	fi
	mv "$tmp" "$out"
	echo "tools: crds/$name $ver extracted in $((SECONDS - start))s ($(ls "$out" | wc -l) files)"
}

# copy_crds copies the CRD files among the comma-separated globs in a
# directory; a kustomization.yaml beside them is not for kubectl apply.
copy_crds() {
	local from=$1 only=$2 to=$3 pat f n=0
	local IFS=,
	for pat in $only; do
		for f in "$from"/$pat; do
			grep -q '^kind: CustomResourceDefinition' "$f" 2>/dev/null || continue
			install -m 0644 "$f" "$to/" && n=$((n + 1))
		done
	done
	[ $n -gt 0 ]
}

version_of() { awk -v n="$1" '$1 == "bin" && $2 == n { print $3 }' "$here/versions.txt"; }

# main is one function so that the whole script is parsed before it runs:
# editing build.sh while a long build runs cannot derail that build.
main() {
	local total=$SECONDS failed=0 kind name ver dir pkg only
	while read -r kind name ver dir pkg only; do
		case $kind in '' | '#'*) continue ;; esac
		want "$name" || continue
		[ $# -eq 0 ] || wanted[$name]=done # seen; the rest are unknown names
		case $kind in
		bin) build_bin "$name" "$ver" "$dir" "$pkg" || failed=1 ;;
		crds) extract_crds "$name" "$ver" "$dir" "$pkg" "$only" || failed=1 ;;
		*) echo "tools: versions.txt: unknown kind $kind" >&2 && return 2 ;;
		esac
	done <"$here/versions.txt"
	for name in "${!wanted[@]}"; do
		[ "${wanted[$name]}" = done ] && continue
		echo "tools: $name is not in test/tools/versions.txt" >&2
		failed=1
	done
	echo "tools: done in $((SECONDS - total))s; cache $CACHE"
	return $failed
}

main "$@"
exit
