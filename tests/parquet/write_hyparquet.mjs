// Write the Parquet test corpus with hyparquet-writer (a JavaScript writer of
// other habits than pyarrow's: REQUIRED list elements, its own page and
// dictionary choices), for tests/cli/test_parquet.sh.
//
//   node write_hyparquet.mjs NPM_DIR ROWS_JS.jsonl OUTDIR
//
// NPM_DIR is tools/pqref.sh's npm folder. ROWS_JS.jsonl holds the logical rows
// of rows.py as write_fixtures.py writes them for JavaScript (int64 values as
// decimal strings: JSON numbers in JavaScript are doubles). Writes
// OUTDIR/hy_default.parquet (the writer's defaults: snappy, its own row group
// and page sizes) and OUTDIR/hy_gzip_pages.parquet (gzip pages from Node's
// zlib, 1 KB pages, row groups of 300 rows), and prints one
// line per file: NAME<TAB>what was forced.
import { readFileSync } from 'node:fs'
import { join, resolve as absolute } from 'node:path'
import { createRequire } from 'node:module'
import { pathToFileURL } from 'node:url'
import { gzipSync } from 'node:zlib'

const [npmDir, rowsPath, out] = process.argv.slice(2)
// the packages of NPM_DIR, resolved as Node resolves them there (their "exports")
const resolve = createRequire(join(absolute(npmDir), 'package.json')).resolve
const load = name => import(pathToFileURL(resolve(name)).href)
const { parquetWriteFile } = await load('hyparquet-writer')
const rows = readFileSync(rowsPath, 'utf8').split('\n').filter(l => l).map(l => JSON.parse(l))

const list = (name, type, extra = {}) => [
  { name, repetition_type: 'OPTIONAL', converted_type: 'LIST', num_children: 1 },
  { name: 'list', repetition_type: 'REPEATED', num_children: 1 },
  { name: 'element', type, repetition_type: 'REQUIRED', ...extra },
]
const schema = [
  { name: 'root', num_children: 7 },
  { name: 'id', type: 'INT64', repetition_type: 'REQUIRED' },
  { name: 'text', type: 'BYTE_ARRAY', converted_type: 'UTF8', repetition_type: 'OPTIONAL' },
  { name: 'score', type: 'DOUBLE', repetition_type: 'REQUIRED' },
  { name: 'flag', type: 'BOOLEAN', repetition_type: 'REQUIRED' },
  ...list('input_ids', 'INT32'),
  ...list('ids64', 'INT64'),
  ...list('ids16', 'INT32', { converted_type: 'UINT_16' }),
]
const big = v => (v === null ? null : BigInt(v))
const columnData = [
  { name: 'id', data: rows.map(r => BigInt(r.id)) },
  { name: 'text', data: rows.map(r => r.text) },
  { name: 'score', data: rows.map(r => r.score) },
  { name: 'flag', data: rows.map(r => r.flag) },
  { name: 'input_ids', data: rows.map(r => r.input_ids) },
  { name: 'ids64', data: rows.map(r => r.ids64 === null ? null : r.ids64.map(big)) },
  { name: 'ids16', data: rows.map(r => r.ids16) },
]

parquetWriteFile({ filename: join(out, 'hy_default.parquet'), columnData, schema })
console.log('hy_default.parquet\thyparquet-writer defaults')
// The writer brings snappy only: gzip pages through Node's zlib.
parquetWriteFile({
  filename: join(out, 'hy_gzip_pages.parquet'), columnData, schema,
  codec: 'GZIP', compressors: { GZIP: bytes => gzipSync(bytes) }, pageSize: 1024, rowGroupSize: 300,
})
console.log('hy_gzip_pages.parquet\thyparquet-writer {"codec": "GZIP", "pageSize": 1024, "rowGroupSize": 300}')
