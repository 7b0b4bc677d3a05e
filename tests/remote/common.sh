# common.sh - sourced by the remote-storage tests (tests/remote/*.sh) after
# testlib.sh: the loopback servers' addresses from $ZT_NETENV, a generated
# dataset served by nginx and S3, and helpers. Needs $Z (the zephon command).
env_file=${ZT_NETENV:?the loopback servers env file (run under ctest: fixture net)}
netget() { sed -n "s/^$1=//p" "$env_file" | head -n1; }
HTTP=$(netget ZT_HTTP); HTTPS=$(netget ZT_HTTPS); CA=$(netget ZT_CA); ROOT=$(netget ZT_ROOT)
PROXY=$(netget ZT_PROXY); S3=$(netget ZT_S3); BUCKET=$(netget ZT_S3_BUCKET)
S3_KEY=$(netget ZT_S3_KEY); S3_SECRET=$(netget ZT_S3_SECRET)
[[ -n "$HTTP" && -n "$ROOT" && -n "$PROXY" ]] || { echo "FAIL - $env_file lacks the servers"; exit 1; }
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Short timeouts: a test never waits long for a fault to play out.
FAST="--connect-timeout 2 --low-speed-time 2 --retries 4 --retry-base 0.05 --retry-max 1"

# make_ds NAME SHARDS SAMPLES: a dataset generated into $ROOT/NAME (served at
# $HTTP/NAME/), indexed with content hashes.
make_ds() {
  rm -rf "$ROOT/$1"
  "$Z" gen --out "$ROOT/$1" --shards "$2" --samples-per-shard "$3" --seed 11 --hash >/dev/null ||
    { echo "FAIL - gen $1"; exit 1; }
  chmod -R a+rX "$ROOT/$1"
}
# ids_of FILE: sample ids with the shard named by its file name only
ids_of() { sed 's#^.*/##' "$1"; }
# proxy_stats / proxy_reset: the proxy's request counts (JSON) of this
# test's folder $PFX only (tests run in parallel against one proxy)
proxy_stats() { curl -s --max-time 5 "$PROXY/__stats?prefix=/$PFX/"; }
proxy_reset() { curl -s --max-time 5 -X POST "$PROXY/__reset?prefix=/$PFX/" >/dev/null; }
# proxy_manifest NAME FAULT...: the manifest of $ROOT/NAME with shard i
# served through the proxy with fault i ("" = none; the last fault given
# applies to the shards after it), named as in the local manifest (so that
# sample ids compare with a local run's)
proxy_manifest() {
  python3 - "$ROOT/$1/manifest.json" "$PROXY" "$1" "${@:2}" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); proxy, name = sys.argv[2], sys.argv[3]; faults = sys.argv[4:] or [""]
for i, s in enumerate(m["shards"]):
    f = faults[min(i, len(faults) - 1)]
    s["name"] = s["path"]
    s["path"] = proxy + ("/f/" + f if f else "") + "/" + name + "/" + s["path"]
print(json.dumps(m))
PY
}
