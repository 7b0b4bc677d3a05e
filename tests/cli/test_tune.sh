#!/usr/bin/env bash
# test_tune.sh ZEPHON - `zephon tune` (docs/cli.md):
#  1. text: the measured stall, throughput and memory, each tuned setting
#     with its value and why, a `zephon run` line and Python builder calls;
#  2. --json: the same as one document; with fetch slowed (fault injection)
#     automatic fetch parallelism is raised and the run line carries it;
#     the pasted line runs and delivers the data of a plain run;
#  3. settings given stay as given; --max-batches and --seconds bound the
#     run; a bad --seconds is a usage error.
set -u
Z=${1:?usage: test_tune.sh PATH_TO_ZEPHON}
. "$(dirname "$0")/../testlib.sh"
export XDG_CACHE_HOME="$T/cache"

"$Z" gen --out "$T/d" --shards 4 --bytes 4M --seed 3 >/dev/null 2>&1
M="$T/d/manifest.json"
check "gen made a dataset" '[[ -f $M ]]'
RUN=(--tokenize gpt2 --threads 2 --seq-len 512 --microbatch 4)

# 1. text
timeout 120 "$Z" tune "$M" "${RUN[@]}" --step-time 0.002 --max-batches 60 >"$T/out" 2>"$T/err"; rc=$?
check "text: exit 0 ($rc)" '[[ $rc -eq 0 ]]'
check "text: 60 batches and the step" 'grep -q "^zephon tune: 60 batches in .* a step of 0.0020 s, 2 threads" "$T/out"'
check "text: stall" 'grep -qE "^  stall +[0-9.]+% " "$T/out"'
check "text: throughput" 'grep -qE "^  throughput +[0-9.]+ batches/s" "$T/out"'
check "text: memory" 'grep -qE "^  memory +[0-9.]+ MiB peak resident" "$T/out"'
check "text: prefetch_batches auto" 'grep -qE "^  prefetch_batches +[0-9]+  auto, cap [0-9]+: " "$T/out"'
check "text: fetch parallelism auto" 'grep -qE "^  fetch parallelism +[12]  auto, cap 2: " "$T/out"'
check "text: tokenize parallelism auto" 'grep -qE "^  tokenize parallelism +[12]  auto, cap 2: " "$T/out"'
check "text: run line" 'grep -qE "^zephon run .*/manifest.json --threads 2 --seq-len 512 --microbatch 4 --prefetch-batches [0-9]+ --fetch-parallelism [12] --tokenize gpt2:[12]$" "$T/out"'
check "text: python line" 'grep -qE "^python: zephon.Pipeline\(ws\).fetch\([12]\).tokenize\(\"gpt2\", field=\"text\", parallelism=[12]\).options\(prefetch_batches=[0-9]+\)$" "$T/out"'
check "text: nothing of zephon run's own summary" '! grep -q "samples in" "$T/out"'

# 2. --json, fetch slowed by 20 ms a chunk: raised to 2
timeout 120 "$Z" tune "$M" "${RUN[@]}" --fetch-delay-us 20000 --json >"$T/j" 2>"$T/err"; rc=$?
check "json: exit 0 ($rc)" '[[ $rc -eq 0 ]]'
python3 - "$T/j" >"$T/jv" 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
s = {e["op"]: e for e in d["settings"]}
assert set(d) >= {"batches", "seconds", "step_time", "stall_fraction", "batches_per_second",
                  "samples_per_second", "tokens_per_second", "peak_rss_bytes", "zephon_run",
                  "python", "threads"}, d.keys()
assert d["peak_rss_bytes"] > 1 << 20 and d["batches"] > 0 and 0 <= d["stall_fraction"] <= 1
assert s["fetch"]["auto"] and s["fetch"]["value"] == 2, s["fetch"]
assert s["fetch"]["why"].startswith("raised 1 -> 2"), s["fetch"]["why"]
assert s["output"]["setting"] == "prefetch_batches" and s["output"]["auto"]
assert " --fetch-parallelism 2 " in d["zephon_run"] + " ", d["zephon_run"]
assert "--json" not in d["zephon_run"]
assert ".fetch(2)" in d["python"]
print(d["zephon_run"])
PY
pyrc=$?
check "json: fetch raised to 2, in the run line ($(tail -1 "$T/jv"))" '[[ $pyrc -eq 0 ]] && grep -q "^zephon run " "$T/jv"'
line=$(tail -1 "$T/jv")
eval "\"$Z\" ${line#zephon } --quiet --emit-digest \"$T/dig-tuned\"" >/dev/null 2>"$T/err"; rc=$?
check "the pasted run line runs ($rc)" '[[ $rc -eq 0 ]]'
"$Z" run "$M" "${RUN[@]}" --fetch-parallelism 1 --tokenize gpt2:1 --prefetch-batches 2 --quiet \
  --emit-digest "$T/dig-fixed" >/dev/null 2>&1
check "the tuned line delivers the data of fixed settings" 'cmp -s "$T/dig-tuned" "$T/dig-fixed"'

# 3. settings given stay as given; bounds; usage error
timeout 120 "$Z" tune "$M" "${RUN[@]}" --fetch-parallelism 1 --prefetch-batches 3 --fetch-delay-us 20000 \
  --max-batches 40 --json >"$T/j2" 2>"$T/err"; rc=$?
check "given: exit 0 ($rc)" '[[ $rc -eq 0 ]]'
check "given: fetch 1 and prefetch 3 as given, 40 batches" 'python3 -c "
import json, sys
d = json.load(open(sys.argv[1])); s = {e[\"op\"]: e for e in d[\"settings\"]}
assert d[\"batches\"] == 40
assert s[\"fetch\"][\"value\"] == 1 and not s[\"fetch\"][\"auto\"]
assert s[\"output\"][\"value\"] == 3 and not s[\"output\"][\"auto\"]
assert \" --fetch-parallelism 1 \" in d[\"zephon_run\"] and \" --prefetch-batches 3 \" in d[\"zephon_run\"]
" "$T/j2"'
timeout 120 "$Z" tune "$M" "${RUN[@]}" --step-time 0.05 --seconds 1 --json >"$T/j3" 2>"$T/err"; rc=$?
check "--seconds 1 bounds the run ($rc)" '[[ $rc -eq 0 ]] && python3 -c "
import json, sys
d = json.load(open(sys.argv[1])); assert 1 <= d[\"seconds\"] < 3 and d[\"batches\"] < 40, d
" "$T/j3"'
"$Z" tune "$M" --observe --threads 2 --max-batches 5 --tokenize gpt2:2 >"$T/o4" 2>"$T/err"; rc=$?
check "--observe (no value) left out of the run line, the next option kept ($rc)" \
  '[[ $rc -eq 0 ]] && grep -qE "^zephon run .*/manifest.json --threads 2 --prefetch-batches [0-9]+ --fetch-parallelism [12] --tokenize gpt2:2$" "$T/o4"'
"$Z" tune "$M" --seconds 0 >/dev/null 2>"$T/err"; rc=$?
check "--seconds 0: usage error ($rc)" '[[ $rc -eq 2 ]] && grep -q -- "--seconds" "$T/err"'
"$Z" tune "$M" --fetch-parallelism autox >/dev/null 2>"$T/err"; rc=$?
check "--fetch-parallelism autox: usage error ($rc)" '[[ $rc -eq 2 ]]'
# the prefetch look-ahead: automatic when asked (--prefetch auto), listed
# with its tasks; the pasted line carries what it reached (or nothing: off)
"$Z" tune "$M" --threads 2 --max-batches 40 --prefetch auto --json >"$T/pf.json" 2>"$T/err"; rc=$?
check "--prefetch auto: exit 0 ($rc)" '[[ $rc -eq 0 ]]'
check "--prefetch auto: look_ahead and its tasks listed as automatic" \
  'python3 -c "import json,sys; d=json.load(open(sys.argv[1])); s=[e for e in d[\"settings\"] if e[\"op\"]==\"prefetch\"]; assert sorted(e[\"setting\"] for e in s)==[\"look_ahead\",\"parallelism\"] and all(e[\"auto\"] for e in s), s" "$T/pf.json"'
check "--prefetch auto: not repeated in the run line" \
  '[[ $(grep -o -- "--prefetch [a-z0-9:]*" <<<"$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[\"zephon_run\"])" "$T/pf.json")" | grep -c auto) -eq 0 ]]'
"$Z" run "$M" --prefetch far >/dev/null 2>"$T/err"; rc=$?
check "--prefetch far: usage error ($rc)" '[[ $rc -eq 2 ]]'
"$Z" tune --help >"$T/help"; rc=$?
check "--help ($rc)" '[[ $rc -eq 0 ]] && grep -q "usage: zephon tune" "$T/help"'
finish
