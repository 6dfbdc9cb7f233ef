#!/usr/bin/env bash
# packages.sh installs the Debian packages the tests use when their commands
# are missing: prometheus (prometheus and promtool judge the alert rules and
# the dashboard) and iproute2 (ip brings up lo in the tests' network
# namespace). Without root or apt-get it says what to install and fails.
# kubectl, which renders deploy/, has no Debian package here: it must be on
# PATH already.
set -euo pipefail

declare -A package_of=([prometheus]=prometheus [promtool]=prometheus [ip]=iproute2)
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
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
command -v kubectl >/dev/null || { echo "tools: kubectl is required on PATH (deploy/ is rendered with kubectl kustomize)" >&2; exit 1; }
echo "tools: Debian packages present (prometheus, iproute2), kubectl on PATH"
