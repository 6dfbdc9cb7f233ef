#!/bin/sh
# run-in-netns.sh runs a command in a fresh network namespace that has only an
# up loopback interface, e.g. the demo or a prebuilt e2e test binary:
#
#   test/e2e/run-in-netns.sh ./e2e.test -test.v
#
# `go test ./test/e2e/...` does not need it: the tests' TestMain (cluster.Main)
# re-executes itself the same way. Needs root (unshare --net).
set -eu
if [ $# -eq 0 ]; then
	echo "usage: $0 COMMAND [ARG...]" >&2
	exit 2
fi
exec unshare --net -- sh -c 'ip link set lo up && exec "$0" "$@"' "$@"
