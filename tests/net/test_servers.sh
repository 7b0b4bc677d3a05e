#!/usr/bin/env bash
# test_servers.sh - tests/net/servers.sh itself, on an instance of its own (not the
# `net` fixture's):
#  1. start writes every ZT_* key, absolute paths, and each server answers;
#  2. the proxy's --delay-ms (ZT_PROXY_DELAY_MS) delays every request; POST /__reset
#     without a prefix clears all counts;
#  3. start over a running instance replaces it: the old processes are gone;
#  4. stop ends every process (nginx workers included), none left with the folder in its
#     command line; a second stop, and a stop of a folder never started, succeed;
#  5. a server that cannot start makes start fail naming it, leaving nothing running.
set -u
. "$(dirname "$0")/../testlib.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
S=$HERE/servers.sh
D=$T/srv
trap 'bash "$S" stop "$D" >/dev/null 2>&1; rm -rf "$T"' EXIT

get() { sed -n "s/^$1=//p" "$D/env" | head -n1; }
pids() { cat "$D"/*.pid 2>/dev/null | tr -dc '0-9\n'; }
# the pids of the processes whose command line mentions the folder
procs_of() {
  grep -lsF -f <(printf "%s\n" "$1") /proc/[0-9]*/cmdline | sed 's|/proc/||;s|/cmdline||'
}
# all_dead PID...: none runs (a zombie waiting for init to reap it counts as ended)
all_dead() {
  local p st
  for p in "$@"; do
    st=$({ cat "/proc/$p/stat"; } 2>/dev/null) || continue
    st=${st##*) }
    [[ "${st:0:1}" == Z ]] || return 1
  done
  return 0
}
kids() { # PID...: their children
  local p
  for p in "$@"; do
    grep -l "^[0-9]* ([^)]*) [A-Z] $p " /proc/[0-9]*/stat 2>/dev/null | sed 's|/proc/||;s|/stat||'
  done
}

# 1. start
ZT_PROXY_DELAY_MS=300 bash "$S" start "$D" >"$T/out" 2>&1; rc=$?
check "start succeeds (rc $rc)" '[[ $rc == 0 ]]' || cat "$T/out"
for k in ZT_ROOT ZT_HTTP ZT_HTTPS ZT_CA ZT_PROXY ZT_S3 ZT_S3_BUCKET ZT_S3_KEY ZT_S3_SECRET; do
  check "env has $k" '[[ -n "$(get $k)" ]]'
done
check "ZT_ROOT is an absolute, existing folder" '[[ $(get ZT_ROOT) == /* && -d $(get ZT_ROOT) ]]'
check "ZT_CA is a PEM certificate" 'grep -q "BEGIN CERTIFICATE" "$(get ZT_CA)"'
check "ZT_S3_BUCKET is zephon-test" '[[ $(get ZT_S3_BUCKET) == zephon-test ]]'
echo hello >"$(get ZT_ROOT)/h.txt"
check "nginx http answers" '[[ $(curl -s "$(get ZT_HTTP)/h.txt") == hello ]]'
check "nginx https answers" \
  '[[ $(curl -s --cacert "$(get ZT_CA)" "$(get ZT_HTTPS)/h.txt") == hello ]]'
check "s3 answers (unsigned: 403)" \
  '[[ $(curl -s -o /dev/null -w "%{http_code}" "$(get ZT_S3)/zephon-test/x") == 403 ]]'

# 2. --delay-ms and a full reset
P=$(get ZT_PROXY)
t=$(curl -s -o "$T/b" -w '%{time_starttransfer}' "$P/h.txt")
check "proxy --delay-ms 300 delays a plain request (${t}s)" \
  '[[ $(cat "$T/b") == hello ]] && awk "BEGIN{exit !($t >= 0.3)}"'
t=$(curl -s -o /dev/null -w '%{time_starttransfer}' "$P/f/500/h.txt")
check "and a faulted one (${t}s)" 'awk "BEGIN{exit !($t >= 0.3)}"'
curl -s -o /dev/null -X POST "$P/__reset"
check "POST /__reset clears every count" \
  '[[ $(curl -s "$P/__stats") == "{\"GET\": {}, \"HEAD\": {}, \"bytes\": {}}" ]]'
check "POST /__reset clears the fault counters" \
  '[[ $(curl -s -o /dev/null -w "%{http_code}" "$P/f/500/h.txt") == 500 ]]'

# 3. start over a running instance
old=$(pids); oldk=$(kids $old)
check "pid files name live processes ($(echo $old))" '[[ -n "$old" ]] && ! all_dead $old'
check "nginx has workers ($(echo $oldk))" '[[ -n "$oldk" ]]'
bash "$S" start "$D" >"$T/out" 2>&1; rc=$?
check "start again over the running servers (rc $rc)" '[[ $rc == 0 ]]' || cat "$T/out"
check "the old processes are gone" 'all_dead $old $oldk'
check "the new ones answer" \
  '[[ $(curl -s -o /dev/null -w "%{http_code}" "$(get ZT_HTTP)/") != 000 ]]'

# 4. stop
new=$(pids); newk=$(kids $new)
check "the folder's processes are found while they run ($(procs_of "$D" | wc -l))" \
  '[[ $(procs_of "$D" | wc -l) -ge 3 ]]'
bash "$S" stop "$D"; rc=$?
check "stop succeeds (rc $rc)" '[[ $rc == 0 ]]'
check "every process ended, nginx workers too" 'all_dead $new $newk'
check "no process left with the folder in its command line" '[[ -z "$(procs_of "$D")" ]]'
check "no env file left" '[[ ! -e "$D/env" ]]'
bash "$S" stop "$D"; rc=$?
check "a second stop succeeds (rc $rc)" '[[ $rc == 0 ]]'
bash "$S" stop "$T/never-started"; rc=$?
check "stop of a folder never started succeeds (rc $rc)" '[[ $rc == 0 ]]'

# 5. a server that cannot start: an nginx that exits at once
mkdir -p "$T/bin"
printf '#!/bin/sh\necho "nginx: broken on purpose" >&2\nexit 1\n' >"$T/bin/nginx"
chmod +x "$T/bin/nginx"
PATH="$T/bin:$PATH" bash "$S" start "$D" >"$T/out" 2>&1; rc=$?
check "start with a broken nginx fails (rc $rc)" '[[ $rc != 0 ]]'
check "the message names nginx" 'grep -q "nginx" "$T/out" && tail -n1 "$T/out" | grep -q nginx'
sleep 0.3
check "nothing left running after the failed start" '[[ -z "$(procs_of "$D")" ]]'
check "no env file after the failed start" '[[ ! -e "$D/env" ]]'

finish
