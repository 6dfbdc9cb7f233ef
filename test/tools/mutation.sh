#!/usr/bin/env bash
# mutation.sh runs gremlins (pinned in versions.txt, built into the tools
# cache by build.sh) on the pure rules, one package at a time, each bounded
# by MUTATION_TIMEOUT, and prints killed, lived and efficacy per target.
# docs/testing.md holds the last report and explains every mutant that lives.
#
#   test/tools/mutation.sh            every target
#   test/tools/mutation.sh NAME...    only these (predict, cdirules, labels, tap, verdicts)
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
TAP_TESTS='^(TestResetCodesAsGRPCGoReportsThem|TestRepliesBeforeRequestsNeverOutliveTheirStreams|TestStatusMessagesAreBounded|TestOnlyRequestHeadersOpenCalls|TestEarlyRepliesAreBounded|TestHostilePathsNeitherCrashNorGrowLabels|TestObserverSelectsMethods|TestOnlyDecodedMethodsAreBuffered|TestUndecodableCallsAreCountedNotPublished|TestRelayObservesCloneAndExpand|TestClientCancelReachesDriverAndIsObserved|TestTapDifferential|TestUnselectedDecodedMethodIsNotBuffered|TestMessageSizeBoundIsInclusive|TestClientResetMidRequestEndsTheCall|TestDriverResetMidRequestWaitsOnlyForKeptRequests|TestRequestWithoutAMessageEndsAtItsStatus|TestOnlyTheRequestsFirstMessageIsKept|TestReplyBufferIsTakenFromTheBudgetAsItGrows|TestGRPCTimeoutFollowsDecodeTimeout|TestAHugeTimeoutPutsNoDeadlineNear|TestStatusMessagesDecodeAsGRPCGo|TestContentTypesAsGRPCGo|TestReplyFramingAsGRPCGo)$'

[ -x "$gremlins" ] || { echo "mutation: $gremlins missing: run make tools (or test/tools/build.sh gremlins)" >&2; exit 1; }

# gremlins bounds each mutant's go test, its build included, by the coverage
# run's time times a coefficient. A package whose tests run in a second
# needs a larger one, or a busy machine's link time alone times its mutants
# out (and a timed-out mutant counts as neither killed nor lived).
#
# name     package dir     coefficient tests (-run)  files mutated (the package's others are excluded)
targets=(
	"predict   cloner/predict  20 .             predict.go outcome.go classes.go reasons.go pairs.go"
	"cdirules  cloner/cdirules 20 .             claim.go clone.go planner.go strategy.go"
	"labels    metrics         3  .             clones.go metrics.go predict.go"
	"tap       sidecar         3  $TAP_TESTS    call.go methods.go grpcstatus.go"
	"verdicts  cloner/verdict  20 .             verdict.go blocked.go path.go predictions.go assess.go cdiwords.go"
)

# main is one function so that the whole script is parsed before it runs:
# editing this file while a long run goes on cannot derail it.
main() {
	local name dir coef run files row base f start status killed lived timedout viable eff failed=0
	declare -A wanted=()
	for n in "$@"; do wanted[$n]=1; done

	mkdir -p "$out"
	cd "$root"
	printf '%-9s %-15s %7s %6s %9s %8s %9s\n' target package killed lived "timed out" "not viable" efficacy >"$out/summary.txt"
	for row in "${targets[@]}"; do
		read -r name dir coef run files <<<"$row"
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
		status=done
		if ! GOFLAGS="${GOFLAGS:+$GOFLAGS }-run=$run" timeout "$TIMEOUT" "$gremlins" unleash --workers "$WORKERS" --timeout-coefficient "$coef" \
			--invert-logical --invert-loopctrl --remove-self-assignments \
			-o "$out/$name.json" "${excludes[@]}" "./$dir" >"$out/$name.log" 2>&1; then
			# Counted below all the same: the log has every mutant tested so far.
			status="FAILED or timed out (partial)"
			tail -n 5 "$out/$name.log" >&2
			failed=1
		fi
		grep -E '^\s+(LIVED|TIMED OUT)' "$out/$name.log" || :
		count() { grep -cE "^\s+$1 " "$out/$name.log" || :; }
		killed=$(count KILLED) lived=$(count LIVED) timedout=$(count 'TIMED OUT') viable=$(count 'NOT VIABLE')
		eff=$(awk -v k="$killed" -v l="$lived" 'BEGIN { if (k + l) printf "%.2f%%", 100 * k / (k + l); else print "-" }')
		printf '%-9s %-15s %7s %6s %9s %8s %9s\n' "$name" "$dir" "$killed" "$lived" "$timedout" "$viable" "$eff" >>"$out/summary.txt"
		echo "mutation: $name $status in $((SECONDS - start))s (log: $out/$name.log)"
	done
	cat "$out/summary.txt"
	return $failed
}

main "$@"
exit
