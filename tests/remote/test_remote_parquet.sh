#!/usr/bin/env bash
# test_remote_parquet.sh ZEPHON - Parquet shards of other writers (pyarrow,
# DuckDB, hyparquet-writer: tests/parquet/write_fixtures.py) over http,
# https and S3 against the loopback servers: the records (--emit-records)
# equal the logical rows field by field; a shuffled run delivers the sample
# ids of the same run on the local files; `zephon index` of the URLs counts
# every file's rows (from the footer, by a range read of the file's tail).
set -u
Z=$(realpath "${1:?usage: test_remote_parquet.sh PATH_TO_ZEPHON}")
. "$(dirname "$0")/../testlib.sh"
. "$(dirname "$0")/common.sh"
root=$(cd "$HERE/../.." && pwd)
P=$root/tests/parquet
export XDG_CACHE_HOME="$T/cache"
# check_or DESC COND CMD...: check, and when it fails run CMD (the details)
check_or() { local _d=$1 _c=$2; shift 2; if eval "$_c"; then ok "$_d"; else bad "$_d"; "$@"; fi; }
ref=$("$root/tools/pqref.sh" | tail -n 1) || { echo "FAIL - tools/pqref.sh"; exit 1; }
py=$ref/venv/bin/python
"$py" "$P/write_fixtures.py" "$T/fx" >/dev/null 2>"$T/err" &&
  node "$P/write_hyparquet.mjs" "$ref/npm" "$T/fx/rows_js.jsonl" "$T/fx" >/dev/null 2>>"$T/err" ||
  { cat "$T/err"; echo "FAIL - writing the fixtures"; exit 1; }
files=(pa_row_groups.parquet duck_row_groups.parquet hy_gzip_pages.parquet pa_default.parquet)
rm -rf "$ROOT/rpq"; mkdir -p "$ROOT/rpq"
for f in "${files[@]}"; do cp "$T/fx/$f" "$ROOT/rpq/"; done
chmod -R a+rX "$ROOT/rpq"
nrows=$(wc -l < "$T/fx/rows.jsonl")
RUN=(--quiet --seed 5 --microbatch 16 --threads 2)

local_files=(); for f in "${files[@]}"; do local_files+=("$ROOT/rpq/$f"); done
"$Z" run "${local_files[@]}" "${RUN[@]}" --emit-ids "$T/local" >/dev/null 2>"$T/err" || bad "local run: $(head -n1 "$T/err")"
ids_of "$T/local/rank-0.ids" > "$T/local.ids"

remote() { # NAME BASE_URL ARGS...: the files from BASE_URL, records and ids checked
  local name=$1 base=$2; shift 2
  local urls=(); for f in "${files[@]}"; do urls+=("$base/rpq/$f"); done
  "$Z" run "${urls[@]}" --quiet --no-shuffle $FAST --cache-dir "$T/c-$name" --emit-records "$T/rec-$name" "$@" \
    >/dev/null 2>"$T/err" || bad "$name: records run: $(head -n1 "$T/err")"
  "$py" "$P/compare.py" --by-id=${#files[@]} "$T/fx/rows.jsonl" "$name" "$T/rec-$name/rank-0.jsonl" > "$T/out"; rc=$?
  check_or "$name: every row of the ${#files[@]} files, fields equal to the logical rows" '[[ $rc -eq 0 ]]' cat "$T/out"
  "$Z" run "${urls[@]}" "${RUN[@]}" $FAST --cache-dir "$T/c-$name" --emit-ids "$T/ids-$name" "$@" \
    >/dev/null 2>"$T/err" || bad "$name: shuffled run: $(head -n1 "$T/err")"
  ids_of "$T/ids-$name/rank-0.ids" > "$T/$name.ids" 2>/dev/null
  check "$name: shuffled, the local run's sample ids in its order" \
    '[[ -s "$T/local.ids" ]] && cmp -s "$T/local.ids" "$T/$name.ids"'
}
remote http "$HTTP"
[[ -n "$HTTPS" ]] && remote https "$HTTPS" --ca-file "$CA"
if [[ -n "$S3" ]]; then
  for f in "${files[@]}"; do bash "$HERE/../net/s3put.sh" "$ROOT/rpq/$f" "rpq/$f" || bad "s3 upload $f"; done
  AWS_ACCESS_KEY_ID=$S3_KEY AWS_SECRET_ACCESS_KEY=$S3_SECRET remote s3 "s3://$BUCKET" --s3-endpoint "$S3"
fi

urls=(); for f in "${files[@]}"; do urls+=("$HTTP/rpq/$f"); done
"$Z" index -o "$T/m.json" --cache-dir "$T/c-idx" "${urls[@]}" >/dev/null 2>"$T/err" || bad "index of URLs: $(head -n1 "$T/err")"
check "zephon index of the URLs: $nrows rows in each file" \
  "python3 -c 'import json,sys; c=[s[\"samples\"] for s in json.load(open(\"$T/m.json\"))[\"shards\"]]; sys.exit(0 if c == [$nrows] * ${#files[@]} else 1)'"

# indexing reads footers only: through the fault proxy (no fault), which
# counts the body bytes it serves, the index of the URLs reads at most
# 64 KiB (the tail read) of each file, not the file
PFX=rpq
proxy_reset
purls=(); for f in "${files[@]}"; do purls+=("$PROXY/rpq/$f"); done
"$Z" index -o "$T/mp.json" --cache-dir "$T/c-idx2" "${purls[@]}" >/dev/null 2>"$T/err" || bad "index through the proxy: $(head -n1 "$T/err")"
proxy_stats > "$T/pstats.json"
read -r got total <<<"$(python3 - "$T/pstats.json" "$ROOT/rpq" <<'PY'
import json, os, sys
st = json.load(open(sys.argv[1]))
got = sum(st.get("bytes", {}).values())
total = sum(os.path.getsize(os.path.join(sys.argv[2], f)) for f in os.listdir(sys.argv[2]))
print(got, total)
PY
)"
check "index of the URLs read $got bytes of the files' $total: footers only (<= 64 KiB a file)" \
  '[[ -n "$got" && $got -gt 0 && $got -le $((65536 * ${#files[@]})) && $got -lt $total ]]'
finish
