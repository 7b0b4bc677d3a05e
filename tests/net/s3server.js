// s3server.js - the test suite's S3 server on loopback: @20minutes/s3rver (verifies
// AWS SigV4 signatures), started with one bucket and one access key.
//   ZT_S3_SECRET=SECRET node s3server.js PORT DIRECTORY BUCKET ACCESS_KEY
// The package is found through NODE_PATH (tests/net/servers.sh sets it to the npm
// cache). s3rver's built-in key S3RVER/S3RVER is revoked: only ACCESS_KEY signs.
// Runs until SIGTERM/SIGINT. Single-threaded (Node's event loop).
'use strict'

const [port, directory, bucket, accessKey] = process.argv.slice(2)
const secret = process.env.ZT_S3_SECRET
if (!port || !directory || !bucket || !accessKey || !secret) {
  console.error('usage: ZT_S3_SECRET=SECRET node s3server.js PORT DIRECTORY BUCKET ACCESS_KEY')
  process.exit(2)
}

const S3rver = require('@20minutes/s3rver')
const AWSAccount = require('@20minutes/s3rver/lib/models/account')

AWSAccount.DUMMY_ACCOUNT.revokeAccessKey('S3RVER')
AWSAccount.DUMMY_ACCOUNT.createKeyPair(accessKey, secret)

const server = new S3rver({
  address: '127.0.0.1',
  port: Number(port),
  directory,
  silent: true,
  vhostBuckets: false,
  allowMismatchedSignatures: false,
  configureBuckets: [{ name: bucket }],
})

// s3rver lets a request without any signature through (it keeps no ACLs): the tests'
// server refuses those with 403 AccessDenied, as S3 does for a private bucket, and
// hands every signed request to s3rver, which verifies the signature.
const koa = server.callback()
const http = require('node:http')
const denied =
  '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>' +
  '<Message>Access Denied: the request is not signed</Message></Error>'
const httpServer = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://127.0.0.1')
  const signed =
    'authorization' in req.headers ||
    url.searchParams.has('X-Amz-Algorithm') ||
    url.searchParams.has('Signature')
  if (signed) return koa(req, res)
  res.writeHead(403, {
    'Content-Type': 'application/xml',
    'Content-Length': Buffer.byteLength(denied),
  })
  res.end(req.method === 'HEAD' ? undefined : denied)
})

server
  .configureBuckets()
  .then(
    () =>
      new Promise((resolve, reject) => {
        httpServer.once('error', reject)
        httpServer.listen(Number(port), '127.0.0.1', resolve)
      })
  )
  .then(() => {
    const addr = httpServer.address()
    console.error(`s3server: listening on ${addr.address}:${addr.port}, bucket ${bucket}`)
  })
  .catch((err) => {
    console.error(`s3server: cannot start on port ${port}: ${err.message}`)
    process.exit(1)
  })

for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => {
    httpServer.close(() => process.exit(0))
    httpServer.closeAllConnections()
    setTimeout(() => process.exit(0), 2000).unref()
  })
}
