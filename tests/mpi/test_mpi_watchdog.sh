#!/usr/bin/env bash
# test_mpi_watchdog.sh ZEPHON MPIRUN - the stall watchdog across ranks
# (docs/mpi.md, "Stall watchdog"; needs the loopback servers: fixture net).
# 2 ranks, --no-shuffle: rank 1 reads shard-00001, which the fault proxy
# holds 3 s before answering; --watchdog 0.5.
#  1. while rank 1 waits, rank 0 (the root) logs that rank 1 is stuck, with
#     the operator, what it does and the shard, within the watchdog period
#     (received live, not at the end), and again while it lasts;
#  2. the cluster report (text, JSON, HTML) names rank 1, fetch and the
#     shard; the JSON says when the root learned it (before the stall
#     ended) and that the notices came live; rank 0 is not listed;
#  3. with --watchdog 0 the same stall gives no notice and no stall in the
#     report.
set -u
Z=$(realpath "${1:?usage: test_mpi_watchdog.sh ZEPHON MPIRUN}")
MPIRUN=${2:-mpirun}
. "$(dirname "$0")/mpilib.sh"
: "${ZT_NETENV:?ZT_NETENV is not set (run under ctest with the net fixture)}"
get() { sed -n "s/^$1=//p" "$ZT_NETENV" | head -n1; }
ROOT=$(get ZT_ROOT); PROXY=$(get ZT_PROXY)
sub=mwd$$
trap 'rm -rf "$T" "$ROOT/$sub"' EXIT
"$Z" gen --out "$ROOT/$sub" --shards 2 --samples-per-shard 40 --seed 11 --hash >/dev/null ||
  { echo "FAIL - gen"; exit 1; }
chmod -R a+rX "$ROOT/$sub"
# shard 1 through the proxy with a 3 s wait before every response
python3 - "$ROOT/$sub/manifest.json" "$PROXY" "$sub" > "$T/m.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); proxy, sub = sys.argv[2], sys.argv[3]
for i, s in enumerate(m["shards"]):
    s["name"] = s["path"]
    s["path"] = proxy + ("/f/delay:3000*0" if i == 1 else "") + "/" + sub + "/" + s["path"]
print(json.dumps(m))
PY
args=(--no-shuffle --microbatch 4 --threads 1 --quiet)

run -np 2 "$Z" run "$T/m.json" "${args[@]}" --watchdog 0.5 --cache-dir "$T/c1" --report "$T/rep" \
  --emit-ids "$T/ids" >"$T/out" 2>"$T/err"; rc=$?
check "the run completes (rc $rc)" '[[ $rc -eq 0 ]]' || cat "$T/err"
check "rank 1 read shard-00001 (the stalled one), rank 0 shard-00000" \
  'grep -q "shard-00001" "$T/ids/rank-1.ids" && ! grep -q "shard-00001" "$T/ids/rank-0.ids"'
# 1. the root's log (only the root logs "watchdog: rank R:")
line="zephon: warning: watchdog: rank 1: no batch for 0.5 s: fetch: loading shard 'shard-00001.jsonl.zst' (#1, remote: downloading) for "
check "root: rank 1 stuck, fetch loading shard-00001 (downloading), after 0.5 s" 'grep -qF "$line" "$T/err"'
check "root: learned live (not at the end)" '! grep -F "$line" "$T/err" | grep -q "received late"'
check "root: again while it lasts (2.0 s)" 'grep -q "watchdog: rank 1: no batch for 2.0 s: fetch" "$T/err"'
check "root: no notice of rank 0 (not stuck)" '! grep -q "watchdog: rank 0:" "$T/err"'
check "rank 1's own watchdog: the queue depths" 'grep -q "watchdog: queues: fetch 0 queued, 1/1 running" "$T/err"'
# 2. the report
check "report.txt: the stalls section names rank 1, fetch, the shard" \
  'grep -q "^stalls (watchdog): 1 rank " "$T/rep/report.txt" &&
   grep -q "^  rank 1: no batch for [0-9.]* s: fetch: loading shard .shard-00001.jsonl.zst. (#1, remote: downloading) for [0-9.]* s" "$T/rep/report.txt"'
python3 - "$T/rep/report.json" >"$T/j" 2>&1 <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = r["stalls"]
assert r["stalled_ranks"] == 1 and len(s) == 1, s
s = s[0]
assert s["rank"] == 1 and s["op"] == "fetch" and s["state"] == "loading", s
assert s["shard_name"] == "shard-00001.jsonl.zst" and s["shard"] == 1 and s["remote"], s
assert s["notices"] >= 4 and s["live_notices"] >= 3, s
assert 2.5 <= s["longest_wait_s"] < 4, s
assert 0 < s["learned_s"] < 2.5, s      # the stall lasts 3 s: learned while it lasted
ranks = {x["rank"]: x for x in r["ranks"]}
assert ranks[1]["stall_notices"] == s["notices"] and ranks[0]["stall_notices"] == 0, ranks
print("ok")
PY
check "report.json: rank 1, fetch, loading, shard-00001, live, learned within the stall ($(tail -1 "$T/j"))" \
  '[[ $(tail -1 "$T/j") == ok ]]'
check "report.html: the stalls section" \
  'grep -q "<h2>Stalls (watchdog): 1 rank</h2>" "$T/rep/report.html" && grep -q "rank 1: no batch for" "$T/rep/report.html"'

# 3. off
run -np 2 "$Z" run "$T/m.json" "${args[@]}" --watchdog 0 --cache-dir "$T/c2" --report "$T/rep0" \
  >"$T/out0" 2>"$T/err0"; rc=$?
check "--watchdog 0: completes (rc $rc), no notice, no stall in the report" \
  '[[ $rc -eq 0 ]] && ! grep -q watchdog "$T/err0" && ! grep -q "^stalls" "$T/rep0/report.txt" &&
   python3 -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r[\"stalls\"] == [] and r[\"stalled_ranks\"] == 0 else 1)" "$T/rep0/report.json"'
finish
