#!/usr/bin/env bash
# build.sh builds every pinned test tool once into a cache outside the repo,
# keyed by name and version, and extracts the CRD sets the harness needs.
# A tool already in the cache is not rebuilt. Pins live in versions.txt.
#
#   test/tools/build.sh            build everything missing
#   test/tools/build.sh NAME...    only these tools / CRD sets
#
# Cache: $TOOLS_CACHE, by default ${XDG_CACHE_HOME:-$HOME/.cache}/csi-clone-sidecar/
#   bin/<name>-<version>           one static binary per tool
#   crds/<name>-<version>/*.yaml   one directory per CRD set
#   logs/<tool>.log                the go build output of the last build of a tool (and its group)
#
# The binaries of one module dir (mod/<dir>) that take the same -ldflags are
# built by one `go build`, so the packages they share are compiled once and
# their links run side by side; up to TOOLS_JOBS (2, the cores these machines
# have) such builds of different modules run at once.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/csi-clone-sidecar}
JOBS=${TOOLS_JOBS:-2}
HEARTBEAT=${TOOLS_HEARTBEAT:-120} # seconds between "still building" lines
mkdir -p "$CACHE/bin" "$CACHE/crds" "$CACHE/logs"

# Static, stripped, path-free binaries: smaller and independent of the checkout.
export CGO_ENABLED=0

# all_cached: build.sh NAME... whose every NAME is a binary already in the
# cache has nothing to build, and need not wait for another build.sh's lock
# (make release while make tools builds Kubernetes).
all_cached() {
	local n ver
	[ $# -gt 0 ] || return 1
	for n in "$@"; do
		ver=$(awk -v n="$n" '$1 == "bin" && $2 == n { print $3 }' "$here/versions.txt")
		[ -n "$ver" ] && [ -x "$CACHE/bin/$n-$ver" ] || return 1
	done
	for n in "$@"; do
		echo "tools: $n $(awk -v n="$n" '$1 == "bin" && $2 == n { print $3 }' "$here/versions.txt") cached"
	done
}
all_cached "$@" && exit 0

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
	victoriametrics) printf -- ' -X github.com/VictoriaMetrics/VictoriaMetrics/lib/buildinfo.Version=%s' "$ver" ;;
	esac
}

# build_group builds, with one `go build`, the tools of one module dir that
# share their -ldflags: "name version package" lines on stdin, none cached.
# Its go output goes to logs/<first tool>.log, shown when the build fails.
build_group() {
	local dir=$1 ldflags=$2 name ver pkg start=$SECONDS
	local -a names=() vers=() pkgs=()
	while read -r name ver pkg; do
		names+=("$name") vers+=("$ver") pkgs+=("$pkg")
	done
	# $BASHPID: groups run in subshells, which share $$.
	local tmp="$CACHE/bin/.${names[0]}.tmp.$BASHPID" log="$CACHE/logs/${names[0]}.log"
	rm -rf "$tmp" && mkdir -p "$tmp"
	echo "tools: ${names[*]} building (mod/$dir)"
	heartbeat "${names[*]}" &
	local beat=$! out=$tmp/
	# One package: -o names the file (a major-version suffix such as
	# server/v3 would otherwise name it "v3"); several: go names each after
	# its package's last element, which versions.txt makes the tool's name.
	[ ${#pkgs[@]} -gt 1 ] || out=$tmp/${names[0]}
	# -mod=mod: the committed go.sum pins every module; go may only add to it.
	if ! (cd "$here/mod/$dir" && go build -mod=mod -trimpath -ldflags="-s -w$ldflags" -o "$out" "${pkgs[@]}") >"$log" 2>&1; then
		kill "$beat" 2>/dev/null
		tail -n 40 "$log" | sed 's/^/    /' >&2
		echo "tools: ${names[*]} FAILED after $((SECONDS - start))s (log: $log)" >&2
		rm -rf "$tmp"
		return 1
	fi
	kill "$beat" 2>/dev/null
	local i
	for i in "${!names[@]}"; do
		mv -f "$tmp/${names[$i]}" "$CACHE/bin/${names[$i]}-${vers[$i]}"
	done
	rm -rf "$tmp"
	echo "tools: ${names[*]} built in $((SECONDS - start))s"
}

# heartbeat prints a line every $HEARTBEAT seconds while a long build runs,
# so that a CI log shows it is alive.
heartbeat() {
	local what=$1 start=$SECONDS
	# sleep holds neither our output nor the lock (fd 9) once we are killed.
	while sleep "$HEARTBEAT" </dev/null >/dev/null 2>&1 9>&-; do
		echo "tools: $what still building ($((SECONDS - start))s)"
	done
}

# build_bins builds every wanted tool that is not cached: rows "name version
# dir package" on stdin, grouped by module dir and -ldflags, at most $JOBS
# groups at once, in the order their groups first appear.
build_bins() {
	local name ver dir pkg key flags failed=0 running=0
	local -A group=() flags_of=() dir_of=()
	local -a order=()
	while read -r name ver dir pkg; do
		if [ -x "$CACHE/bin/$name-$ver" ]; then
			echo "tools: $name $ver cached"
			continue
		fi
		flags=$(ldflags_for "$dir" "$ver")
		key="$dir $flags"
		# A group's binaries are named after their packages: a tool whose
		# package ends otherwise is built on its own.
		[ "${pkg##*/}" = "$name" ] || key="$dir $flags $name"
		[ -n "${group[$key]:-}" ] || order+=("$key")
		group[$key]+="$name $ver $pkg"$'\n'
		flags_of[$key]=$flags dir_of[$key]=$dir
	done
	local status="$CACHE/bin/.status.$BASHPID"
	rm -rf "$status" && mkdir -p "$status"
	for key in "${order[@]}"; do
		if [ "$running" -ge "$JOBS" ]; then
			wait -n || :
			running=$((running - 1))
		fi
		(printf '%s' "${group[$key]}" | build_group "${dir_of[$key]}" "${flags_of[$key]}" || touch "$status/failed") &
		running=$((running + 1))
	done
	wait
	[ ! -e "$status/failed" ] || failed=1
	rm -rf "$status"
	return $failed
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
	local bins="" crds=()
	while read -r kind name ver dir pkg only; do
		case $kind in '' | '#'*) continue ;; esac
		want "$name" || continue
		[ $# -eq 0 ] || wanted[$name]=done # seen; the rest are unknown names
		case $kind in
		bin) bins+="$name $ver $dir $pkg"$'\n' ;;
		crds) crds+=("$name $ver $dir $pkg $only") ;;
		*) echo "tools: versions.txt: unknown kind $kind" >&2 && return 2 ;;
		esac
	done <"$here/versions.txt"
	for name in "${!wanted[@]}"; do
		[ "${wanted[$name]}" = done ] && continue
		echo "tools: $name is not in test/tools/versions.txt" >&2
		failed=1
	done
	printf '%s' "$bins" | build_bins || failed=1
	# After the binaries: a CRD set may be written by one of them.
	local row
	for row in "${crds[@]}"; do
		# shellcheck disable=SC2086 # five fields, the last may be empty
		extract_crds $row || failed=1
	done
	echo "tools: done in $((SECONDS - total))s; cache $CACHE"
	return $failed
}

main "$@"
exit
