#!/usr/bin/env bash
# test_remote_users.sh ZEPHON - two users of one node and the shard cache
# (docs/storage.md, "The shard cache on disk"): run as two uids (setpriv,
# the suite runs as root), each gets a default cache folder of its own
# ($TMPDIR/zephon-cache-<uid>, mode 0700, files 0600) that the other can
# neither read nor list; a folder the other user made first, or a symbolic
# link of theirs in its place, is refused with a message saying why; a
# folder its group or others can write is refused; a cache entry that is a
# symbolic link or a file of another user is not served but replaced.
set -u
Z=${1:?usage: test_remote_users.sh PATH_TO_ZEPHON}
. "$(dirname "$0")/../testlib.sh"
. "$(dirname "$0")/common.sh"
PFX=rusers
[[ $(id -u) -eq 0 ]] || { echo "FAIL - runs as root (it switches to two other uids)"; exit 1; }
# checkv FILE DESCRIPTION 'CONDITION': check, and show FILE when it failed
checkv() { local f=$fails; check "$2" "$3"; [[ $fails -eq $f ]] || cat "$1"; }

make_ds rusers 2 40
# the same manifest without content hashes: then only the cache's own
# checks keep a planted file from being read
python3 - "$ROOT/rusers/manifest.json" > "$ROOT/rusers/nohash.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
for s in m["shards"]:
    s.pop("xxh64", None)
print(json.dumps(m))
PY
chmod a+r "$ROOT/rusers/nohash.json"

UA=40001; UB=40002
chmod 755 "$T"
TMPD="$T/tmp"; mkdir -m 1777 "$TMPD"   # a shared temporary folder, as /tmp is
for u in $UA $UB; do mkdir -p "$T/home-$u"; chown "$u:$u" "$T/home-$u"; done
# as UID CMD...: CMD as that user, with $TMPD as its TMPDIR
as() { local u=$1; shift; setpriv --reuid="$u" --regid="$u" --clear-groups -- \
  env -u SLURM_TMPDIR TMPDIR="$TMPD" HOME="$T/home-$u" "$@"; }
RUN="--quiet --seed 3 --threads 1 --microbatch 8"
# runas UID NAME [SPEC]: zephon run as UID, output in $T/NAME.out, ids in the user's home
runas() {
  local u=$1 n=$2 spec=${3:-$HTTP/rusers/nohash.json}
  as "$u" "$Z" run "$spec" $RUN --emit-ids "$T/home-$u/$n" >"$T/$n.out" 2>&1
}
CA="$TMPD/zephon-cache-$UA"; CB="$TMPD/zephon-cache-$UB"

"$Z" run "$ROOT/rusers/manifest.json" $RUN --emit-ids "$T/local" >/dev/null || bad "local run"
ids_of "$T/local/rank-0.ids" > "$T/local.ids"
same_ids() { ids_of "$T/home-$1/$2/rank-0.ids" 2>/dev/null | cmp -s - "$T/local.ids"; }

# --- each user gets a private default cache
runas $UA a1; rc=$?
checkv "$T/a1.out" "user A: run with the default cache (rc $rc), the local run's sample ids" \
  '[[ $rc -eq 0 ]] && same_ids $UA a1'
check "user A's default cache is \$TMPDIR/zephon-cache-$UA, owned by A, mode 700" \
  '[[ $(stat -c "%u %a" "$CA" 2>/dev/null) == "$UA 700" ]]'
nz=$(find "$CA" -name "*.zdc" | wc -l)
check "user A's cached shards ($nz) and the folder lock: owned by A, mode 600" \
  '[[ $nz -eq 2 && -z $(find "$CA" -type f ! -perm 600) && -z $(find "$CA" ! -uid $UA) ]]'
runas $UB b1; rc=$?
checkv "$T/b1.out" "user B: run with the default cache (rc $rc), a folder of its own" \
  '[[ $rc -eq 0 && $(stat -c "%u %a" "$CB" 2>/dev/null) == "$UB 700" ]] && same_ids $UB b1'
shard_a=$(find "$CA" -name "*.zdc" | head -n1)
check "user B can neither list user A's cache nor read a shard in it" \
  '! as $UB ls "$CA" >/dev/null 2>&1 && ! as $UB cat "$shard_a" >/dev/null 2>&1'
check "user A can neither list user B's cache nor read a shard in it" \
  '! as $UA ls "$CB" >/dev/null 2>&1 &&
   ! as $UA cat "$(find "$CB" -name "*.zdc" | head -n1)" >/dev/null 2>&1'

# --- a folder user B made first under user A's default name: refused, untouched
rm -rf "$CA"
as $UB mkdir -m 777 "$CA"
as $UB sh -c "echo planted > '$CA/$(basename "$shard_a")'"
runas $UA a2; rc=$?
checkv "$T/a2.out" "a folder of user B in user A's place: refused (rc $rc), naming the owner" \
  '[[ $rc -ne 0 ]] && grep -q "zephon-cache-$UA: belongs to uid $UB, not to this user (uid $UA)" "$T/a2.out"'
check "  ... and not used: nothing of user A's in it" \
  '[[ -z $(find "$CA" -uid $UA) && $(ls -A "$CA" | wc -l) -eq 1 ]]'
rm -rf "$CA"

# --- a symbolic link of user B's in user A's place, to a folder of B's
as $UB mkdir -m 700 "$TMPD/b-trap"
as $UB ln -s "$TMPD/b-trap" "$CA"
runas $UA a3; rc=$?
checkv "$T/a3.out" "a symbolic link of user B as user A's cache folder: refused (rc $rc)" \
  '[[ $rc -ne 0 ]] && grep -q "a symbolic link of another user (uid $UB)" "$T/a3.out"'
rm -f "$CA"

# --- user A's own folder, writable by others or by its group: refused
for m in 777 770; do
  rm -rf "$CA"; as $UA mkdir -m "$m" "$CA"; chmod "$m" "$CA"
  runas $UA a4; rc=$?
  [[ $m == 777 ]] && who="every user" || who="its group"
  checkv "$T/a4.out" "user A's cache folder of mode $m: refused (rc $rc), writable by $who" \
    '[[ $rc -ne 0 ]] && grep -q "writable by $who (mode 0$m).*chmod 700" "$T/a4.out"'
done
rm -rf "$CA"

# --- cache entries that the cache did not write: not served, replaced
runas $UA a5 >/dev/null; rc=$?
[[ $rc -eq 0 ]] || { cat "$T/a5.out"; bad "user A: fill the cache again"; }
mapfile -t zdc < <(find "$CA" -name "*.zdc" | sort)
sz=$(stat -c %s "${zdc[0]}")
head -c "$sz" /dev/urandom > "$T/evil"; chmod 644 "$T/evil"; cp "$T/evil" "$T/evil.orig"
rm -f "${zdc[0]}"; ln -s "$T/evil" "${zdc[0]}"                  # a symbolic link, right size
sz1=$(stat -c %s "${zdc[1]}")
head -c "$sz1" /dev/urandom > "${zdc[1]}"; chown $UB:$UB "${zdc[1]}"  # another user's file
runas $UA a6; rc=$?
checkv "$T/a6.out" "a symbolic link and a file of user B as cached shards: not read (rc $rc), \
the local run's sample ids" '[[ $rc -eq 0 ]] && same_ids $UA a6'
check "  ... both replaced by downloads of user A's, the link's target untouched" \
  '[[ -f ${zdc[0]} && ! -L ${zdc[0]} && $(stat -c %u "${zdc[0]}") == $UA &&
     $(stat -c %u "${zdc[1]}") == $UA ]] && cmp -s "$T/evil" "$T/evil.orig"'

finish
