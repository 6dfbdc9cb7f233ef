#!/usr/bin/env bash
# packages.sh installs the Debian packages the tests use when their commands
# are missing: prometheus (prometheus and promtool judge the alert rules and
# the dashboard), iproute2 (ip brings up lo in the tests' network namespace),
# podman and runc (run the image `make image` builds; Debian's crun refuses
# these machines' hybrid cgroup layout), buildah (builds the Dockerfile for
# each platform in deploy/image_test.go), chromium (renders `report -o html`
# headless to a PNG in the report's test). Without root or apt-get it says what
# to install and fails. Everything else the tests run (kubectl
# among them) is built by build.sh from pinned modules.
set -euo pipefail

declare -A package_of=([prometheus]=prometheus [promtool]=prometheus [ip]=iproute2 [podman]=podman [runc]=runc [buildah]=buildah [chromium]=chromium)
missing=()
for cmd in "${!package_of[@]}"; do
	command -v "$cmd" >/dev/null || missing+=("${package_of[$cmd]}")
done
if [ ${#missing[@]} -gt 0 ]; then
	mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
	if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
		echo "tools: missing Debian packages: ${missing[*]}; install them (apt-get install ${missing[*]}) and run make tools again" >&2
		exit 1
	fi
	echo "tools: installing Debian packages: ${missing[*]}"
	start=$SECONDS
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
	echo "tools: Debian packages installed in $((SECONDS - start))s"
fi
echo "tools: Debian packages present (prometheus, iproute2, podman, runc, buildah, chromium)"
