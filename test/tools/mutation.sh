#!/usr/bin/env bash
# mutation.sh runs gremlins (pinned in versions.txt, built into the tools
# cache by build.sh) on the pure rules, one package at a time, each bounded
# by MUTATION_TIMEOUT, and prints killed, lived and efficacy per target.
# docs/testing.md holds the last report and explains every mutant that lives.
#
#   test/tools/mutation.sh            every target
#   test/tools/mutation.sh NAME...    only these (predict, labels, tap, verdicts)
#
# A target is a package, the tests that judge its mutants (a -run pattern,
# passed through GOFLAGS, which gremlins' go test runs honour) and the files
# whose rules it covers: the package's other files are excluded, so only
# those are mutated.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
CACHE=${TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/csi-clone-sidecar}
ver=$(awk '$1 == "bin" && $2 == "gremlins" { print $3 }' "$here/versions.txt")
gremlins=$CACHE/bin/gremlins-$ver
TIMEOUT=${MUTATION_TIMEOUT:-40m}
# One worker: the machines have 2 cores, and a test run of cloner uses both.
WORKERS=${MUTATION_WORKERS:-1}
out=${MUTATION_OUT:-$root/bin/mutation}
# The sidecar's suite runs for minutes (driver kills, memory bounds); the
# tests of what the tap reports per call judge its status and method rules.
TAP_TESTS='^(TestStatusAsGRPCGoReportsIt|TestOnlyRequestHeadersOpenCalls|TestEarlyRepliesAreBounded|TestHostilePathsNeitherCrashNorGrowLabels|TestObserverSelectsMethods|TestOnlyDecodedMethodsAreBuffered|TestUndecodableCallsAreCountedNotPublished|TestRelayObservesCloneAndExpand|TestClientCancelReachesDriverAndIsObserved|TestTapDifferential)$'

[ -x "$gremlins" ] || { echo "mutation: $gremlins missing: run make tools (or test/tools/build.sh gremlins)" >&2; exit 1; }

# name     package dir     tests (-run)  files mutated (the package's others are excluded)
targets=(
	"predict   cloner/predict  .             predict.go reasons.go pairs.go"
	"labels    metrics         .             clones.go metrics.go predict.go"
	"tap       sidecar         $TAP_TESTS    call.go methods.go"
	"verdicts  cloner          .             verdict.go reasons.go cdi.go"
)

declare -A wanted=()
for n in "$@"; do wanted[$n]=1; done

mkdir -p "$out"
cd "$root"
failed=0
printf '%-9s %-15s %7s %6s %9s %8s %9s\n' target package killed lived "timed out" "not viable" efficacy >"$out/summary.txt"
for row in "${targets[@]}"; do
	read -r name dir run files <<<"$row"
	[ ${#wanted[@]} -eq 0 ] || [ -n "${wanted[$name]:-}" ] || continue
	# gremlins matches -E against paths relative to the package directory,
	# and walks subpackages too: exclude them and the package's other files.
	excludes=()
	for f in "$dir"/*; do
		base=${f##*/}
		if [ -d "$f" ]; then
			excludes+=(-E "^$base/")
			continue
		fi
		case $base in *.go) ;; *) continue ;; esac
		case " $files " in *" $base "*) continue ;; esac
		excludes+=(-E "^${base//./\\.}\$")
	done
	echo "mutation: $name ($dir: $files), at most $TIMEOUT"
	start=$SECONDS
	if ! GOFLAGS="${GOFLAGS:+$GOFLAGS }-run=$run" timeout "$TIMEOUT" "$gremlins" unleash --workers "$WORKERS" --timeout-coefficient 3 \
		--invert-logical --invert-loopctrl --remove-self-assignments \
		-o "$out/$name.json" "${excludes[@]}" "./$dir" >"$out/$name.log" 2>&1; then
		echo "mutation: $name: gremlins failed or timed out after $((SECONDS - start))s (log: $out/$name.log)" >&2
		tail -n 20 "$out/$name.log" >&2
		failed=1
		continue
	fi
	grep -E '^\s+LIVED' "$out/$name.log" || :
	read -r killed lived timedout viable eff < <(awk '
		/Killed:/ { for (i = 1; i <= NF; i++) { if ($i == "Killed:") k = $(i+1); if ($i == "Lived:") l = $(i+1) } gsub(",", "", k); gsub(",", "", l) }
		/Timed out:/ { for (i = 1; i <= NF; i++) { if ($i == "out:") t = $(i+1); if ($i == "viable:") v = $(i+1) } gsub(",", "", t); gsub(",", "", v) }
		/Test efficacy:/ { e = $3 }
		END { print k+0, l+0, t+0, v+0, e }' "$out/$name.log")
	printf '%-9s %-15s %7s %6s %9s %8s %9s\n' "$name" "$dir" "$killed" "$lived" "$timedout" "$viable" "$eff" >>"$out/summary.txt"
	echo "mutation: $name done in $((SECONDS - start))s"
done
cat "$out/summary.txt"
exit $failed
