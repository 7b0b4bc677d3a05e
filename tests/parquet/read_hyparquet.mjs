// Read Parquet files with hyparquet (a second independent reader, for
// tests/cli/test_parquet.sh): one JSON object per row, columns in schema
// order, int64 values written as exact decimal numbers.
//
//   node read_hyparquet.mjs NPM_DIR FILE OUT.jsonl [FILE OUT.jsonl ...]
import { writeFileSync } from 'node:fs'
import { join, resolve as absolute } from 'node:path'
import { createRequire } from 'node:module'
import { pathToFileURL } from 'node:url'

const [npmDir, ...args] = process.argv.slice(2)
// the packages of NPM_DIR, resolved as Node resolves them there (their "exports")
const resolve = createRequire(join(absolute(npmDir), 'package.json')).resolve
const load = name => import(pathToFileURL(resolve(name)).href)
const { asyncBufferFromFile, parquetReadObjects } = await load('hyparquet')
const { compressors } = await load('hyparquet-compressors')

// A null list comes back undefined: write null. BigInt has no JSON form:
// write it as a marked string, then unquote it.
const mark = '\u0000bigint:'
const replacer = (k, v) => (v === undefined ? null : typeof v === 'bigint' ? mark + v.toString() : v)
const unmark = s => s.replace(/"\\u0000bigint:(-?\d+)"/g, '$1')

for (let i = 0; i + 1 < args.length; i += 2) {
  const file = await asyncBufferFromFile(args[i])
  const rows = await parquetReadObjects({ file, compressors })
  writeFileSync(args[i + 1], rows.map(r => unmark(JSON.stringify(r, replacer)) + '\n').join(''))
}
