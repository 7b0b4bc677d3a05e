#!/usr/bin/env bash
# test_remote_list.sh ZEPHON [MPIEXEC] - listings of remote folders and globs
# against the suite's S3 server, through a counting proxy of its own
# (tests/net/fault_proxy.py --forward-all: signed requests pass unchanged):
#  1. 5,000 keys under one prefix (4,999 shards and a text file): `zephon index --no-count` of the s3://
#     folder lists them in 5 pages of 1,000 (ListObjectsV2 continuation
#     tokens), takes the sizes from the listing (no HEAD, no GET), and writes
#     a manifest of every key with the uploaded sizes; a key with a space and
#     a '+' comes through; a key that is not a shard is skipped with a warning.
#  2. a glob over S3 keys and an http folder (its manifest.json) run with the
#     sample ids of the local run.
#  3. under mpirun (2 ranks), the folder is listed once (rank 0), with no HEAD.
#  4. errors name the URL and S3's error code, never the secret: NoSuchBucket,
#     a wrong secret (SignatureDoesNotMatch), an empty folder, a glob without
#     a match.
set -u
Z=${1:?usage: test_remote_list.sh PATH_TO_ZEPHON [MPIEXEC]}
MPIEXEC=${2:-}
. "$(dirname "$0")/../testlib.sh"
. "$(dirname "$0")/common.sh"
PFX=rlist
[[ -n "$S3" ]] || { echo "FAIL - no S3 server in $env_file"; exit 1; }

# the counting proxy in front of the S3 server
port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
python3 "$HERE/../net/fault_proxy.py" --port "$port" --upstream "$S3" --forward-all \
  --log "$T/proxy.log" </dev/null >/dev/null 2>&1 &
ppid=$!
trap 'kill $ppid 2>/dev/null; wait $ppid 2>/dev/null; rm -rf "$T"' EXIT
SP=http://127.0.0.1:$port
for ((i = 0; i < 50; i++)); do curl -s -o /dev/null "$SP/__stats" && break; sleep 0.1; done
sp_reset() { curl -s --max-time 5 -X POST "$SP/__reset" >/dev/null; }
# sp_count METHOD PATH_PREFIX [EXACT]: requests counted for paths starting with (or equal to) it
sp_count() {
  curl -s --max-time 5 "$SP/__stats" | python3 -c "
import json,sys
d=json.load(sys.stdin).get(sys.argv[1], {})
print(sum(n for k,n in d.items() if (k==sys.argv[2] if sys.argv[3]=='1' else k.startswith(sys.argv[2]))))" "$1" "$2" "${3:-0}"
}
export AWS_ACCESS_KEY_ID=$S3_KEY AWS_SECRET_ACCESS_KEY=$S3_SECRET
S3OPT="--s3-endpoint $SP"

# ---------------------------------------------------------------- 1. 5,000 keys
N=5000
BIGP=$PFX/big-$$  # a prefix of this run's own (the S3 server may keep an earlier run's keys)
mkdir -p "$T/big"
python3 - "$T/big" "$N" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n - 2):  # n keys in all: these, a key with a space and a '+', a non-shard
    with open(os.path.join(d, "s-%05d.jsonl" % i), "w") as f:
        f.write('{"text": "%s"}\n' % ("x" * (i % 50)))
with open(os.path.join(d, "sp a+b.jsonl"), "w") as f:
    f.write('{"text": "a space and a plus"}\n')
with open(os.path.join(d, "readme.txt"), "w") as f:
    f.write("not a shard\n")
PY
# one curl uploads them all over a few connections (a config file of upload/url pairs)
python3 - "$T/big" "$S3/$BUCKET/$BIGP" >"$T/put.cfg" <<'PY'
import os, sys, urllib.parse
d, base = sys.argv[1], sys.argv[2]
for f in sorted(os.listdir(d)):
    print('upload-file = "%s"' % os.path.join(d, f))
    print('url = "%s/%s"' % (base, urllib.parse.quote(f)))
PY
t0=$(date +%s.%N)
curl -sS -f --no-progress-meter --parallel --parallel-max 8 -o /dev/null --aws-sigv4 "aws:amz:us-east-1:s3" \
  --user "$S3_KEY:$S3_SECRET" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -K "$T/put.cfg" ||
  bad "upload of $N keys"
echo "# uploaded $N keys in $(python3 -c "import time;print(round(time.time()-$t0,1))") s"

sp_reset
t0=$(date +%s.%N)
"$Z" index --no-count -o "$T/big.json" $S3OPT "s3://$BUCKET/$BIGP/" \
  >"$T/big.out" 2>"$T/big.err" || { bad "index --no-count of the s3:// folder"; tail -5 "$T/big.err"; }
echo "# listed the $N keys and wrote their manifest in $(python3 -c "import time;print(round(time.time()-$t0,1))") s"
pages=$(sp_count GET "/$BUCKET" 1)
heads=$(sp_count HEAD /)
gets=$(sp_count GET "/$BUCKET/$BIGP/")
check "5,000 keys listed in 5 pages of 1,000 ($pages list requests)" '[[ $pages -eq 5 ]]'
check "sizes from the listing: no HEAD request ($heads)" '[[ $heads -eq 0 ]]'
check "--no-count reads no shard ($gets GETs)" '[[ $gets -eq 0 ]]'
python3 - "$T/big.json" "$T/big" "s3://$BUCKET/$BIGP/" >"$T/big.cmp" 2>&1 <<'PY'
import json, os, sys
m = json.load(open(sys.argv[1]))["shards"]
d, base = sys.argv[2], sys.argv[3]
want = {base + f: os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".jsonl")}
got = {s["path"]: s["bytes"] for s in m}
paths = [s["path"] for s in m]
assert paths == sorted(paths, key=lambda p: p.encode()), "not in bytewise order"
assert got == want, "differs: %d listed, %d uploaded, e.g. %s" % (
    len(got), len(want), sorted(set(got.items()) ^ set(want.items()))[:3])
assert not any("samples" in s for s in m), "counts written"
print("ok")
PY
check "manifest: every shard key, its uploaded size, bytewise order ($(tail -1 "$T/big.cmp"))" \
  '[[ $(tail -1 "$T/big.cmp") == ok ]]'
check "a key with a space and a '+' is read" 'grep -q "/sp a+b.jsonl\"" "$T/big.json"'
check "a key that is not a shard is skipped with a warning" \
  'grep -q "skipped 1 object that is not a shard.*readme.txt" "$T/big.err"'

# ---------------------------------------------------------------- 2. glob, http folder
make_ds rlist 6 40
RUN="--quiet --seed 3 --threads 2 --microbatch 8"
"$Z" run "$ROOT/rlist/manifest.json" $RUN --emit-ids "$T/local" >/dev/null || bad "local run"
ids_of "$T/local/rank-0.ids" >"$T/local.ids"
same() { # NAME DIR: the ids in DIR equal the local run's
  got="$T/same-${1//[^a-z0-9]/_}.ids"
  ids_of "$2/rank-0.ids" >"$got" 2>/dev/null
  check "$1: same sample ids, same order as local" 'cmp -s "$T/local.ids" "$got"'
}
for f in "$ROOT"/rlist/*; do bash "$HERE/../net/s3put.sh" "$f" "$PFX/small/$(basename "$f")" || bad "upload $f"; done
sp_reset
"$Z" run "s3://$BUCKET/$PFX/small/shard-*.jsonl.zst" $RUN $FAST $S3OPT --cache-dir "$T/c1" \
  --emit-ids "$T/glob" >"$T/glob.out" 2>&1 || { bad "run of an S3 glob"; tail -5 "$T/glob.out"; }
same "s3 glob" "$T/glob"
check "s3 glob: one listing, no HEAD" '[[ $(sp_count GET "/$BUCKET" 1) -eq 1 && $(sp_count HEAD /) -eq 0 ]]'
"$Z" index -o "$T/small.json" $FAST $S3OPT --cache-dir "$T/c1" "s3://$BUCKET/$PFX/small/*.zst" \
  >"$T/small.out" 2>&1 || { bad "index of an S3 glob"; tail -5 "$T/small.out"; }
check "index of an S3 glob: 6 shards, 240 samples counted" \
  '[[ $(python3 -c "import json;m=json.load(open(\"$T/small.json\"))[\"shards\"];print(len(m),sum(s[\"samples\"] for s in m))") == "6 240" ]]'
"$Z" run "$HTTP/rlist/" $RUN $FAST --cache-dir "$T/c2" --emit-ids "$T/hfold" >"$T/hfold.out" 2>&1 ||
  { bad "run of an http folder"; tail -5 "$T/hfold.out"; }
same "http folder (its manifest.json)" "$T/hfold"

# ---------------------------------------------------------------- 3. MPI: rank 0 lists once
if [[ -n "$MPIEXEC" ]]; then
  # the folder without its manifest: its shards are listed
  curl -sS -f -o /dev/null -X DELETE --aws-sigv4 "aws:amz:us-east-1:s3" --user "$S3_KEY:$S3_SECRET" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$S3/$BUCKET/$PFX/small/manifest.json" ||
    bad "delete the folder's manifest"
  sp_reset
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader \
    ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0 \
    LSAN_OPTIONS=suppressions=$HERE/../mpi/lsan.supp:print_suppressions=0 \
    timeout 120 "$MPIEXEC" -np 2 --oversubscribe --bind-to none "$Z" run "s3://$BUCKET/$PFX/small/" \
    --quiet --seed 6 --threads 1 --microbatch 8 $FAST $S3OPT --cache-dir "$T/c3" \
    --emit-ids "$T/mpi" >"$T/mpi.out" 2>&1 || { bad "2-rank run of an s3:// folder"; tail -20 "$T/mpi.out"; }
  uniq=$(cat "$T"/mpi/rank-*.ids 2>/dev/null | sort -u | wc -l)
  check "2 ranks: every sample delivered ($uniq)" '[[ $uniq -eq 240 ]]'
  pages=$(sp_count GET "/$BUCKET" 1); heads=$(sp_count HEAD /)
  check "2 ranks: the folder listed once ($pages), no HEAD ($heads)" '[[ $pages -eq 1 && $heads -eq 0 ]]'
fi

# ---------------------------------------------------------------- 4. errors
"$Z" index -o "$T/e.json" $S3OPT "s3://no-such-bucket/$PFX/" >"$T/e1.out" 2>&1; rc=$?
check "NoSuchBucket: fails (rc $rc) naming the URL and the code" \
  '[[ $rc -ne 0 ]] && grep -q "s3://no-such-bucket/$PFX/.*404.*NoSuchBucket" "$T/e1.out"'
AWS_SECRET_ACCESS_KEY=wrong-secret-1234 "$Z" index -o "$T/e.json" $S3OPT "s3://$BUCKET/$PFX/small/" \
  >"$T/e2.out" 2>&1; rc=$?
check "wrong secret: 403 at once (rc $rc), named, secret not printed" \
  '[[ $rc -ne 0 ]] && grep -q "listing s3://$BUCKET/$PFX/small/: HTTP 403.*SignatureDoesNotMatch" "$T/e2.out" && ! grep -q "wrong-secret-1234" "$T/e2.out"'
"$Z" index -o "$T/e.json" $S3OPT "s3://$BUCKET/$PFX/none/" >"$T/e3.out" 2>&1; rc=$?
check "empty folder: fails (rc $rc) saying so" '[[ $rc -ne 0 ]] && grep -q "has no shard objects" "$T/e3.out"'
"$Z" index -o "$T/e.json" $S3OPT "s3://$BUCKET/$PFX/small/*.parquet" >"$T/e4.out" 2>&1; rc=$?
check "glob without a match: fails (rc $rc) saying so" '[[ $rc -ne 0 ]] && grep -q "matches no object" "$T/e4.out"'
finish
