#!/usr/bin/env bash
# release.sh builds a release into dist/ (make release) and publishes one
# (make publish). docs/release.md is the user's side of it.
#
#   VERSION=v1.2.3 [DIST=dist] test/tools/release.sh build
#   VERSION=v1.2.3 REGISTRY=ghcr.io/cozystack [DIST=dist] test/tools/release.sh publish
#
# build is reproducible: no engine, no clock. The binaries are built with
# -trimpath and an empty build id, the image and the chart carry the
# commit's time (SOURCE_DATE_EPOCH, by default the commit's), so one commit
# and VERSION give the same bytes, the same digests and the same SHA256SUMS.
#
# dist/ after build:
#   csi-clone-sidecar-linux-{amd64,arm64}           the static binaries
#   csi-clone-sidecar-linux-{amd64,arm64}.cdx.json  their SBOMs (CycloneDX, cyclonedx-gomod bin)
#   csi-clone-sidecar-<chart version>.tgz           the chart, its image pinned by digest
#   csi-clone-sidecar.digest                        the image index's digest
#   SHA256SUMS                                      of the files above
#   oci/                                            the image: an OCI layout of the multi-arch index
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
CACHE=${TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/csi-clone-sidecar}
GO=${GO:-go}
DIST=${DIST:-dist}
PLATFORMS=${PLATFORMS:-linux/amd64 linux/arm64}
RELEASE_REPOSITORY=${RELEASE_REPOSITORY:-ghcr.io/cozystack/csi-clone-sidecar}
SOURCE_URL=https://github.com/cozystack/csi-clone-sidecar

say() { echo "release: $*"; }
die() { echo "release: $*" >&2; exit 1; }

# semver: vMAJOR.MINOR.PATCH with an optional pre-release; no +build
# metadata (an OCI tag cannot hold "+").
check_version() {
	[[ ${VERSION:-} =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] ||
		die "VERSION=${VERSION:-} is not vMAJOR.MINOR.PATCH[-PRERELEASE] (e.g. make release VERSION=v0.2.0)"
}

# tool prints the cached path of a pinned tool, or fails naming make tools.
tool() {
	local ver path
	ver=$(awk -v n="$1" '$1 == "bin" && $2 == n { print $3 }' "$here/versions.txt")
	path="$CACHE/bin/$1-$ver"
	[ -x "$path" ] || die "$1 $ver is not in the tools cache ($path): run make tools (test/tools/build.sh $1)"
	echo "$path"
}

build() {
	check_version
	local helm cdx epoch created revision chartver p os arch bin start=$SECONDS
	helm=$(tool helm) cdx=$(tool cyclonedx-gomod)
	cd "$root"
	epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
	created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
	revision=$(git rev-parse HEAD)
	chartver=${VERSION#v} # Helm chart versions are SemVer without the v
	say "$VERSION (chart $chartver) of $revision, time $created, into $DIST/"
	rm -rf "$DIST" && mkdir -p "$DIST/.build"
	local -a binaries=()
	for p in $PLATFORMS; do
		os=${p%/*} arch=${p#*/}
		say "binary $os/$arch"
		GOOS=$os GOARCH=$arch make --no-print-directory sidecar GO="$GO" VERSION="$VERSION" BIN="$DIST/.build/$os-$arch" >/dev/null
		bin=$DIST/csi-clone-sidecar-$os-$arch
		cp "$DIST/.build/$os-$arch/csi-clone-sidecar" "$bin"
		binaries+=(-binary "$p=$bin")
		say "sbom $bin.cdx.json"
		"$cdx" bin -json -noserial -notimestamp -version "$VERSION" -output "$bin.cdx.json" "$bin" 2>"$DIST/.build/sbom.log" ||
			{ cat "$DIST/.build/sbom.log" >&2; die "cyclonedx-gomod failed"; }
	done
	say "image index $RELEASE_REPOSITORY:$VERSION"
	"$GO" run ./test/tools/image -out "$DIST" -archives=false -index-digest "$DIST/csi-clone-sidecar.digest" \
		-tag "$RELEASE_REPOSITORY:$VERSION" -version "$VERSION" -revision "$revision" -source "$SOURCE_URL" \
		-created "$created" "${binaries[@]}"
	package_chart "$helm" "$chartver" "$(cat "$DIST/csi-clone-sidecar.digest")" "$epoch"
	rm -rf "$DIST/.build"
	(cd "$DIST" && sha256sum -- csi-clone-sidecar* >SHA256SUMS)
	say "done in $((SECONDS - start))s:"
	(cd "$DIST" && sed 's/^/  /' SHA256SUMS)
}

# package_chart packages deploy/chart with version/appVersion set and the
# image pinned by digest, its files stamped with the commit's time.
package_chart() {
	local helm=$1 chartver=$2 digest=$3 epoch=$4
	local src=$DIST/.build/chart/csi-clone-sidecar values
	mkdir -p "$(dirname "$src")"
	cp -r deploy/chart/csi-clone-sidecar "$src"
	values=$src/values.yaml
	# The two lines of sidecar.image that the release sets; a values.yaml
	# without them would ship unpinned, so their absence fails the build.
	grep -q '^    repository: ghcr.io/cozystack/csi-clone-sidecar$' "$values" && grep -q '^    digest: ""$' "$values" ||
		die "$values: sidecar.image.repository/digest lines not found; update package_chart"
	sed -i -e "s#^    repository: ghcr.io/cozystack/csi-clone-sidecar\$#    repository: $RELEASE_REPOSITORY#" \
		-e "s#^    digest: \"\"\$#    digest: \"$digest\"#" "$values"
	say "chart $chartver, image $RELEASE_REPOSITORY:$VERSION@$digest"
	"$helm" lint --quiet "$src" >/dev/null
	"$helm" package --version "$chartver" --app-version "$VERSION" -d "$DIST" "$src" >/dev/null
	"$GO" run ./test/tools/release chart-epoch -epoch "$epoch" "$DIST/csi-clone-sidecar-$chartver.tgz"
}

# publish pushes what build wrote: the image by digest, then its tags
# (VERSION, and vMAJOR.MINOR unless VERSION is a pre-release), and the chart.
publish() {
	check_version
	[ -n "${REGISTRY:-}" ] || die "REGISTRY is not set (e.g. make publish REGISTRY=ghcr.io/cozystack VERSION=$VERSION)"
	local helm chartver=${VERSION#v} minor
	helm=$(tool helm)
	cd "$root"
	[ -f "$DIST/SHA256SUMS" ] || die "$DIST/SHA256SUMS missing: run make release VERSION=$VERSION first"
	(cd "$DIST" && sha256sum --quiet -c SHA256SUMS) || die "$DIST/ does not match its SHA256SUMS"
	[ -f "$DIST/csi-clone-sidecar-$chartver.tgz" ] || die "$DIST holds no chart $chartver: was it built with VERSION=$VERSION?"
	local -a tags=(-tag "$VERSION")
	if [[ $VERSION != *-* ]]; then
		minor=${VERSION%.*}
		tags+=(-tag "$minor")
	fi
	say "image to $REGISTRY/csi-clone-sidecar"
	"$GO" run ./test/tools/release push -layout "$DIST/oci" -repository "$REGISTRY/csi-clone-sidecar" "${tags[@]}" |
		sed 's/^/image: /'
	say "chart to oci://$REGISTRY/charts"
	if [ -n "${REGISTRY_USER:-}" ]; then
		printf '%s' "${REGISTRY_PASSWORD:-}" | "$helm" registry login "${REGISTRY%%/*}" --username "$REGISTRY_USER" --password-stdin >/dev/null ||
			die "helm registry login ${REGISTRY%%/*} as $REGISTRY_USER failed"
	fi
	local out
	# shellcheck disable=SC2086 # flags, e.g. --plain-http
	out=$("$helm" push ${HELM_PUSH_FLAGS:-} "$DIST/csi-clone-sidecar-$chartver.tgz" "oci://$REGISTRY/charts" 2>&1) ||
		{ echo "$out" >&2; die "helm push failed"; }
	echo "chart: oci://$REGISTRY/charts/csi-clone-sidecar:$chartver@$(sed -n 's/^Digest: //p' <<<"$out")"
	if [ "$REGISTRY/csi-clone-sidecar" != "$RELEASE_REPOSITORY" ]; then
		say "the chart installs $RELEASE_REPOSITORY by default: set sidecar.image.repository=$REGISTRY/csi-clone-sidecar (docs/release.md, Mirror)"
	fi
}

case ${1:-} in
build) build ;;
publish) publish ;;
*) die "usage: $0 build|publish (make release / make publish)" ;;
esac
