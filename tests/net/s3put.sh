#!/usr/bin/env bash
# s3put.sh FILE KEY - uploads FILE as object KEY into the tests' S3 bucket (SigV4 signed),
# with the server's address and credentials read from the env file $ZT_NETENV (written
# by tests/net/servers.sh). KEY is used as given in the URL: keep it URL-safe (a-z 0-9 . _ - /).
set -euo pipefail
file=${1:?usage: s3put.sh FILE KEY}; key=${2:?usage: s3put.sh FILE KEY}
env=${ZT_NETENV:?s3put.sh: ZT_NETENV is not set (the servers env file)}
get() { sed -n "s/^$1=//p" "$env" | head -n1; }
s3=$(get ZT_S3); bucket=$(get ZT_S3_BUCKET); id=$(get ZT_S3_KEY); secret=$(get ZT_S3_SECRET)
[[ -n "$s3" && -n "$bucket" && -n "$id" && -n "$secret" ]] ||
  { echo "s3put.sh: $env lacks the ZT_S3* keys" >&2; exit 1; }
curl -sS -f -o /dev/null --max-time 60 --aws-sigv4 "aws:amz:us-east-1:s3" --user "$id:$secret" \
  -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -T "$file" "$s3/$bucket/${key#/}"
