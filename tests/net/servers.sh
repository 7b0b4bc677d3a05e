#!/usr/bin/env bash
# servers.sh start|stop DIR - the test suite's loopback servers (see tests/net/README.md).
#   start: stops what a previous run left in DIR, then starts on 127.0.0.1, each on a
#          free port: nginx (http and https, a throwaway CA made here), the fault proxy
#          (tests/net/fault_proxy.py) and the S3 server (tests/net/s3server.js); waits
#          until each answers and writes DIR/env (KEY=VALUE lines). Fails naming the
#          server that did not come up, with the end of its log; nothing is left running.
#   stop:  ends every process started in DIR (pids in DIR/*.pid); idempotent, always
#          exits 0.
# Environment: ZT_NPM_DIR (where the npm package is installed once and kept; default
# /var/cache/zephon-test-npm, or ${XDG_CACHE_HOME:-~/.cache}/zephon-test-npm when
# /var/cache is not writable), ZT_PROXY_DELAY_MS (the proxy's --delay-ms, default 0).
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
S3RVER_PKG=@20minutes/s3rver@5.0.0
BUCKET=zephon-test
WAIT_S=20

die() { echo "servers.sh: $*" >&2; exit 1; }

# ---------------------------------------------------------------- process helpers
# alive PID: the process exists and is not a zombie (an orphan waits for init to reap it)
alive() {
  [[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null || return 1
  local stat
  stat=$({ cat "/proc/$1/stat"; } 2>/dev/null) || return 0
  stat=${stat##*) }
  [[ "${stat:0:1}" != Z ]]
}
children() { # PID: the pids whose parent is PID (from /proc, no procps needed)
  local f stat rest
  for f in /proc/[0-9]*/stat; do
    stat=$(<"$f") 2>/dev/null || continue
    rest=${stat##*) }            # after the command name: "S PPID ..."
    read -r _ ppid _ <<<"$rest"
    [[ "$ppid" == "$1" ]] && { f=${f#/proc/}; echo "${f%/stat}"; }
  done 2>/dev/null
}
# ours PID WORD: the process PID is still the one we started (its command line has WORD)
ours() { alive "$1" && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "$2"; }
# stop_pid PIDFILE WORD: TERM, up to 5 s, then KILL; nginx workers too
stop_pid() {
  local pidfile=$1 word=$2 pid kids i
  [[ -f "$pidfile" ]] || return 0
  pid=$(head -c 32 "$pidfile" | tr -dc 0-9)
  if [[ -n "$pid" ]] && ours "$pid" "$word"; then
    kids=$(children "$pid")
    kill -TERM "$pid" 2>/dev/null
    for ((i = 0; i < 50; i++)); do
      alive "$pid" || break
      sleep 0.1
    done
    kill -KILL "$pid" $kids 2>/dev/null
    for ((i = 0; i < 20; i++)); do
      alive "$pid" || break
      sleep 0.1
    done
    # orphaned workers of a killed nginx master
    for k in $kids; do kill -KILL "$k" 2>/dev/null; done
  fi
  rm -f "$pidfile"
}

stop_all() {
  local dir=$1
  stop_pid "$dir/proxy.pid" fault_proxy.py
  stop_pid "$dir/s3.pid" s3server.js
  stop_pid "$dir/nginx.pid" "$dir/nginx.conf"
  return 0
}

# ---------------------------------------------------------------- start pieces
free_ports() { # N: N distinct free TCP ports on 127.0.0.1
  "$PY" - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

make_certs() { # DIR/ca.pem (CA), DIR/server.pem + server.key for localhost and 127.0.0.1
  local d=$1
  (
    set -e
    cd "$d"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
      -keyout ca.key -out ca.pem -subj "/CN=zephon test CA" \
      -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign"
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout server.key -out server.csr -subj "/CN=localhost"
    printf '%s\n' "basicConstraints=CA:FALSE" \
      "keyUsage=critical,digitalSignature,keyEncipherment" \
      "extendedKeyUsage=serverAuth" \
      "subjectAltName=DNS:localhost,IP:127.0.0.1" >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
      -extfile server.ext -out server.pem
    rm -f server.csr ca.srl
  ) >"$d/logs/openssl.log" 2>&1 ||
    { tail -5 "$d/logs/openssl.log" >&2; die "openssl: cannot make the test certificates"; }
}

start_nginx() { # DIR HTTP_PORT HTTPS_PORT
  local d=$1 hp=$2 sp=$3 user=""
  [[ $(id -u) -eq 0 ]] && user="user root;"
  mkdir -p "$d/nginx-tmp"
  cat >"$d/nginx.conf" <<EOF
# written by tests/net/servers.sh: nginx for the tests, loopback only
$user
daemon on;
master_process on;
worker_processes 2;
pid $d/nginx.pid;
error_log $d/logs/nginx-error.log warn;
events { worker_connections 512; }
http {
    types { text/html html; application/json json; text/plain txt; }
    default_type application/octet-stream;
    access_log $d/logs/nginx-access.log;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 10000;
    client_body_temp_path $d/nginx-tmp/body;
    proxy_temp_path $d/nginx-tmp/proxy;
    fastcgi_temp_path $d/nginx-tmp/fastcgi;
    uwsgi_temp_path $d/nginx-tmp/uwsgi;
    scgi_temp_path $d/nginx-tmp/scgi;
    server {
        listen 127.0.0.1:$hp;
        server_name 127.0.0.1 localhost;
        root $d/root;
        # /redirect/P answers 302 to /P (a redirect within http)
        location /redirect/ { rewrite ^/redirect/(.*)\$ /\$1 redirect; }
    }
    server {
        listen 127.0.0.1:$sp ssl;
        server_name localhost;
        ssl_certificate $d/server.pem;
        ssl_certificate_key $d/server.key;
        root $d/root;
        # /redirect-http/P answers 302 to http://.../P (a downgrade, to be refused);
        # /redirect/P answers 302 to https://.../P (within https)
        location /redirect-http/ { rewrite ^/redirect-http/(.*)\$ http://127.0.0.1:$hp/\$1 redirect; }
        location /redirect/ { rewrite ^/redirect/(.*)\$ /\$1 redirect; }
    }
}
EOF
  "$NGINX" -p "$d/nginx-tmp" -e "$d/logs/nginx-error.log" -c "$d/nginx.conf" \
    </dev/null >>"$d/logs/nginx.out" 2>&1
}

npm_dir() {
  if [[ -n "${ZT_NPM_DIR:-}" ]]; then echo "$ZT_NPM_DIR"
  elif mkdir -p /var/cache/zephon-test-npm 2>/dev/null && [[ -w /var/cache/zephon-test-npm ]]; then
    echo /var/cache/zephon-test-npm
  else echo "${XDG_CACHE_HOME:-$HOME/.cache}/zephon-test-npm"; fi
}

# npm_locked DIR TEST LOG ARGS...: unless TEST (a shell condition) holds, runs
# `npm install --prefix DIR ARGS...`, one install at a time per folder (two builds may
# start servers at once); the lock's fd is closed before any server starts.
npm_locked() {
  local nd=$1 test=$2 log=$3; shift 3
  command -v npm >/dev/null || die "s3: npm is missing (tools/deps.sh installs it)"
  mkdir -p "$nd" || die "s3: cannot create $nd"
  (
    if command -v flock >/dev/null; then flock -w 600 9 || exit 3; fi
    eval "$test" && exit 0
    echo "servers.sh: installing $* into $nd" >&2
    npm install --prefix "$nd" --no-audit --no-fund --loglevel=error "$@" \
      </dev/null >>"$log" 2>&1 && eval "$test"
  ) 9>>"$nd/.install.lock" ||
    { tail -5 "$log" >&2; die "s3: npm install $* into $nd failed (log $log)"; }
}

ensure_s3rver() { # installs the npm package into the cache folder when missing
  local nd=$1 log=$2 pj="$1/node_modules/@20minutes/s3rver/package.json"
  npm_locked "$nd" "[[ -f '$pj' ]] && grep -q '\"version\": \"5.0.0\"' '$pj'" "$log" \
    "$S3RVER_PKG"
}

# pick_node NPM_DIR LOG: sets NODE to a Node.js >= 20 (what s3rver's dependencies need).
# Debian 12's nodejs is 18: then Node 20 is installed once from the npm registry
# (package node-linux-<arch>) into NPM_DIR. ZT_NPM_NODE=1 forces that copy.
NODE_PKG_VERSION=20.19.5
pick_node() {
  local nd=$1 log=$2 major=0 arch pkg
  if command -v node >/dev/null && [[ "${ZT_NPM_NODE:-0}" != 1 ]]; then
    major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
    if ((major >= 20)); then NODE=$(command -v node); return 0; fi
    echo "servers.sh: node $major is older than 20" >&2
  fi
  case $(uname -m) in
    x86_64) arch=x64 ;; aarch64) arch=arm64 ;; ppc64le) arch=ppc64le ;; *) arch=$(uname -m) ;;
  esac
  pkg=node-linux-$arch
  NODE=$nd/node$NODE_PKG_VERSION/node_modules/$pkg/bin/node
  npm_locked "$nd/node$NODE_PKG_VERSION" "[[ -x '$NODE' ]]" "$log" "$pkg@$NODE_PKG_VERSION"
}

# wait_for NAME PID CHECK...: runs CHECK until it succeeds; fails when PID dies or after
# WAIT_S seconds
wait_for() {
  local name=$1 pid=$2 log=$3; shift 3
  local end=$((SECONDS + WAIT_S))
  while ! "$@" >/dev/null 2>&1; do
    if ! alive "$pid"; then FAILED="$name exited at start (log $log)"; return 1; fi
    if ((SECONDS >= end)); then
      FAILED="$name did not answer within ${WAIT_S} s (log $log)"; return 1
    fi
    sleep 0.1
  done
}
http_answers() { # URL [curl options]: any HTTP status counts
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$@") || true
  [[ "$code" != 000 && -n "$code" ]]
}
http_ok() { curl -sf -o /dev/null --max-time 2 "$@"; }

start_once() { # DIR: one try; 0 ok, 1 failed (FAILED says why), 2 port taken
  local d=$1 hp sp pp s3p
  read -r hp sp pp s3p <<<"$(free_ports 4)"
  [[ -n "$s3p" ]] || { FAILED="no free ports"; return 1; }

  FAILED=""
  if ! start_nginx "$d" "$hp" "$sp"; then
    FAILED="nginx failed to start: $(tail -n1 "$d/logs/nginx.out" 2>/dev/null)"
    grep -qsiE 'in use' "$d/logs/nginx.out" "$d/logs/nginx-error.log" && return 2
    return 1
  fi
  local npid=""
  for _ in $(seq 50); do
    npid=$({ tr -dc 0-9 <"$d/nginx.pid"; } 2>/dev/null) && [[ -n "$npid" ]] && break
    sleep 0.1
  done
  setsid "$PY" "$HERE/fault_proxy.py" --port "$pp" --upstream "http://127.0.0.1:$hp" \
    --delay-ms "${ZT_PROXY_DELAY_MS:-0}" --log "$d/logs/proxy.log" \
    </dev/null >>"$d/logs/proxy.log" 2>&1 &
  echo $! >"$d/proxy.pid"
  # --openssl-legacy-provider: s3rver makes a listing's continuation token with DES,
  # which OpenSSL 3 keeps in its legacy provider (without it a listing of more than
  # one page is an InternalError)
  NODE_PATH="$NPM_DIR/node_modules" ZT_S3_SECRET="$S3_SECRET" setsid "$NODE" --openssl-legacy-provider \
    "$HERE/s3server.js" \
    "$s3p" "$d/s3" "$BUCKET" "$S3_KEY" </dev/null >>"$d/logs/s3.log" 2>&1 &
  echo $! >"$d/s3.pid"

  wait_for nginx-http "$npid" "$d/logs/nginx-error.log" http_answers "http://127.0.0.1:$hp/" &&
  wait_for nginx-https "$npid" "$d/logs/nginx-error.log" \
    http_answers --cacert "$d/ca.pem" "https://localhost:$sp/" &&
  wait_for fault-proxy "$(cat "$d/proxy.pid")" "$d/logs/proxy.log" \
    http_ok "http://127.0.0.1:$pp/__stats" &&
  wait_for s3 "$(cat "$d/s3.pid")" "$d/logs/s3.log" \
    http_ok --aws-sigv4 "aws:amz:us-east-1:s3" --user "$S3_KEY:$S3_SECRET" \
      -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "http://127.0.0.1:$s3p/$BUCKET"
  if [[ -n "$FAILED" ]]; then
    if grep -qsiE 'in use|EADDRINUSE' "$d/logs/nginx-error.log" "$d/logs/nginx.out" \
         "$d/logs/proxy.log" "$d/logs/s3.log"; then
      return 2
    fi
    return 1
  fi
  {
    echo "ZT_DIR=$d"
    echo "ZT_ROOT=$d/root"
    echo "ZT_HTTP=http://127.0.0.1:$hp"
    echo "ZT_HTTPS=https://localhost:$sp"
    echo "ZT_CA=$d/ca.pem"
    echo "ZT_PROXY=http://127.0.0.1:$pp"
    echo "ZT_S3=http://127.0.0.1:$s3p"
    echo "ZT_S3_BUCKET=$BUCKET"
    echo "ZT_S3_KEY=$S3_KEY"
    echo "ZT_S3_SECRET=$S3_SECRET"
    echo "ZT_S3_REGION=us-east-1"
  } >"$d/env.tmp" && mv "$d/env.tmp" "$d/env"
}

start() {
  local d=$1
  mkdir -p "$d" || die "cannot create $d"
  d=$(cd "$d" && pwd)
  stop_all "$d"
  rm -rf "$d/root" "$d/s3" "$d/nginx-tmp" "$d/logs" "$d/env" "$d/env.tmp"
  mkdir -p "$d/root" "$d/s3" "$d/logs"
  for t in openssl curl; do
    command -v "$t" >/dev/null || die "$t is missing (tools/deps.sh installs it)"
  done
  NGINX=$(command -v nginx || echo /usr/sbin/nginx)
  [[ -x "$NGINX" ]] || die "nginx is missing (tools/deps.sh installs it)"
  PY=/usr/bin/python3
  [[ -x "$PY" ]] || PY=$(command -v python3) || die "python3 is missing"
  NPM_DIR=$(npm_dir)
  ensure_s3rver "$NPM_DIR" "$d/logs/npm.log"
  pick_node "$NPM_DIR" "$d/logs/npm.log"
  make_certs "$d"
  S3_KEY=ZT$(od -An -N8 -tx1 /dev/urandom | tr -dc 0-9a-f | tr a-f A-F)
  S3_SECRET=$(od -An -N20 -tx1 /dev/urandom | tr -dc 0-9a-f)
  local try rc
  for try in 1 2 3; do
    start_once "$d"; rc=$?
    ((rc == 0)) && { echo "servers.sh: up; addresses in $d/env"; return 0; }
    local why=$FAILED
    stop_all "$d"
    if ((rc == 2)); then
      echo "servers.sh: a port was taken (try $try): $why; again" >&2
      rm -f "$d"/logs/*.log "$d"/logs/*.out
      continue
    fi
    for f in "$d"/logs/nginx.out "$d"/logs/nginx-error.log "$d"/logs/proxy.log "$d"/logs/s3.log; do
      [[ -s "$f" ]] && { echo "--- $f" >&2; tail -5 "$f" >&2; }
    done
    die "$why"
  done
  die "could not find free ports in 3 tries"
}

cmd=${1:-}; dir=${2:-}
[[ -n "$dir" ]] || die "usage: servers.sh start|stop DIR"
case "$cmd" in
  start) start "$dir" ;;
  stop)
    if [[ -d "$dir" ]]; then stop_all "$(cd "$dir" && pwd)"; rm -f "$dir/env"; fi
    exit 0 ;;
  *) die "usage: servers.sh start|stop DIR" ;;
esac
