#!/usr/bin/env bash
# Interim demo (until the verdict demo lands): start the test CSI driver and
# csi-clone-sidecar in front of it, run the real csi-sanity through the relay,
# then print what the tap observed and the sidecar's metrics.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
test/tools/build.sh csi-sanity
cache=${XDG_CACHE_HOME:-$HOME/.cache}/csi-clone-sidecar
sanity=$cache/bin/csi-sanity-$(awk '$1=="bin" && $2=="csi-sanity" {print $3}' test/tools/versions.txt)

work=$(mktemp -d /tmp/csi-clone-demo.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
bin/csi-test-driver --endpoint="unix://$work/driver.sock" --state-dir="$work/state" \
	--pool=replicated --pool=local:node-local >"$work/driver.log" 2>&1 &
pids+=($!)
bin/csi-clone-sidecar --csi-address="$work/driver.sock" --listen-address="$work/relay.sock" \
	--http-endpoint="127.0.0.1:$port" --observations-log="$work/observations.jsonl" --verdicts=false >"$work/sidecar.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -S "$work/relay.sock" ] && [ -S "$work/driver.sock" ] && break; sleep 0.1; done

echo "== csi-sanity (real, v5.6.0) through the relay =="
"$sanity" --csi.endpoint="$work/relay.sock" --csi.testvolumesize=1048576 --csi.testvolumeexpandsize=2097152 \
	--ginkgo.skip='Node Service' --ginkgo.no-color >"$work/sanity.log" 2>&1 && result=passed || result=FAILED
grep -E '^(Ran|PASS|FAIL|SUCCESS)' "$work/sanity.log" || true
echo "csi-sanity $result (log: kept below on failure)"

echo
echo "== clone-related calls the tap observed (first 12) =="
python3 - "$work/observations.jsonl" <<'PY'
import json, sys
want = ("CreateVolume", "ControllerExpandVolume", "CreateSnapshot", "DeleteVolume", "DeleteSnapshot")
n = 0
for line in open(sys.argv[1]):
    o = json.loads(line)
    m = o["Method"].rsplit("/", 1)[-1]
    if m not in want:
        continue
    rq, rs = o["Request"], o["Response"]
    src = rq.get("SourceVolumeID") or rq.get("SourceSnapshotID") or "-"
    print(f'{m:24} code={o["Code"]:<2} name={rq.get("Name") or rq.get("VolumeID") or rq.get("SnapshotID") or "-":40.40} source={src:20.20} '
          f'required={rq.get("RequiredBytes", 0)} -> volume={rs.get("VolumeID") or rs.get("SnapshotID") or "-"} capacity={rs.get("CapacityBytes", 0)}')
    n += 1
    if n == 12:
        break
total = sum(1 for _ in open(sys.argv[1]))
print(f"... {total} calls observed in all")
PY

echo
echo "== metrics (http://127.0.0.1:$port/metrics) =="
curl -fsS "http://127.0.0.1:$port/metrics" | grep -E '^csi_(clone_tap|sidecar_operations_seconds_count)' | sort | head -30
[ "$result" = passed ] || { cat "$work/sanity.log" | tail -50; exit 1; }
