#!/usr/bin/env node
// gen_text.mjs - the benchmark's text: a deterministic, English-heavy, mixed
// JSONL corpus ({"text": ...} per line, one document per line).
//
//   node bench/tokenizer/gen_text.mjs OUT.jsonl [MEGABYTES=32]
//
// What it is (printed by run.sh too):
//  - ~85% English-like prose: words drawn from the GPT-2 vocabulary's own
//    lowercase words of 3+ letters and the common 1-2 letter words
//    (frequency ~ Zipf over the merge order, so frequent words come first as
//    in English), plus ~12% rarer words built from two pieces ("inter" +
//    "locks", suffixes -ing/-ed/-ly/-s, proper names) so that, as in real
//    text, a share of words are not single tokens;
//    sentences with capitals, commas, quotes, parentheses, numbers, years,
//    contractions (don't, it's, we'll) and paragraphs.
//  - ~7% code (C/Python-like, indented, with identifiers and numbers).
//  - ~8% multilingual and symbol-heavy text: the lines of the tokenizer's
//    test corpus (CJK, Arabic, Hebrew, Indic, emoji, whitespace oddities).
// The same seed gives the same bytes on every machine.

import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const out = process.argv[2];
const megabytes = Number(process.argv[3] || 32);
if (!out) {
    console.error('usage: node gen_text.mjs OUT.jsonl [MEGABYTES]');
    process.exit(2);
}

let seed = 0x2545F491;
const rnd = () => {
    // xorshift32
    seed ^= seed << 13; seed >>>= 0;
    seed ^= seed >>> 17;
    seed ^= seed << 5; seed >>>= 0;
    return seed / 4294967296;
};
const pick = (a) => a[Math.floor(rnd() * a.length)];
// Zipf-like index in [0, n): p(i) ~ 1/(i+1)
const zipf = (n) => Math.min(n - 1, Math.floor(Math.exp(rnd() * Math.log(n + 1)) - 1));

// ---------------------------------------------------------------- words
const encoder = JSON.parse(fs.readFileSync(path.join(root, 'data/gpt2/encoder.json'), 'utf8'));
const byId = Object.entries(encoder).sort((a, b) => a[1] - b[1]).map(([k]) => k);
const short = new Set(['a', 'I', 'an', 'as', 'at', 'be', 'by', 'do', 'go', 'he', 'if', 'in', 'is',
                       'it', 'me', 'my', 'no', 'of', 'on', 'or', 'so', 'to', 'up', 'us', 'we']);
const words = [];  // "Ġword" tokens, lowercase, in merge order
const pieces = []; // word-internal pieces (no Ġ), lowercase
for (const tok of byId) {
    if (/^\u0120[a-z]{3,}$/.test(tok) || (tok[0] === '\u0120' && short.has(tok.slice(1))))
        words.push(tok.slice(1));
    else if (/^[a-z]{2,}$/.test(tok)) pieces.push(tok);
}
if (!words.includes('a')) words.unshift('a');
if (!words.includes('I')) words.unshift('I');
const names = ['Alice', 'Bob', 'Chen', 'Dmitri', 'Fatima', 'Gonzalez', 'Haruki', 'Ingrid', 'Jamal',
               'Kowalski', 'Lakshmi', 'Moreau', 'Nakamura', 'Okonkwo', 'Petrov', 'Quinn', 'Rossi',
               'Schmidt', 'Tanaka', 'Umar', 'Vasquez', 'Wang', 'Xu', 'Yilmaz', 'Zhang', 'Berlin',
               'Nairobi', 'Montreal', 'Kyoto', 'Valparaíso', 'Zürich', 'São Paulo', 'Kraków'];
const suffixes = ['s', 'ed', 'ing', 'ly', 'ness', 'ment', 'er', 'ers', 'able', 'ization', 'ism'];
const contractions = ["don't", "it's", "we'll", "they're", "I'm", "you've", "can't", "he'd",
                      "isn't", "won't", "that's", "there's", "let's", "wouldn't"];

function word() {
    const r = rnd();
    if (r < 0.86) return words[zipf(Math.min(words.length, 20000))];
    if (r < 0.92) return words[zipf(8000)] + pick(suffixes);
    if (r < 0.95) return words[zipf(3000)] + pieces[zipf(3000)];
    if (r < 0.98) return pick(contractions);
    return pick(names);
}

function number() {
    const r = rnd();
    if (r < 0.3) return String(1900 + Math.floor(rnd() * 130));
    if (r < 0.6) return String(Math.floor(rnd() * 100));
    if (r < 0.8) return (rnd() * 1000).toFixed(2);
    return Math.floor(rnd() * 1e7).toLocaleString('en-US');
}

function sentence() {
    const n = 4 + Math.floor(rnd() * 22);
    const w = [];
    for (let i = 0; i < n; i++) {
        let x = rnd() < 0.04 ? number() : word();
        if (rnd() < 0.08 && i < n - 1) x += ',';
        if (rnd() < 0.01) x = '"' + x + '"';
        if (rnd() < 0.01) x = '(' + x + ')';
        w.push(x);
    }
    let s = w.join(' ');
    s = s[0].toUpperCase() + s.slice(1);
    const end = rnd();
    return s + (end < 0.85 ? '.' : end < 0.93 ? '?' : end < 0.97 ? '!' : ':');
}

function prose() {
    const paras = [];
    const np = 2 + Math.floor(rnd() * 8);
    for (let p = 0; p < np; p++) {
        const ns = 2 + Math.floor(rnd() * 6);
        const s = [];
        for (let i = 0; i < ns; i++) s.push(sentence());
        paras.push(s.join(' '));
    }
    return paras.join(rnd() < 0.8 ? '\n\n' : '\n');
}

function ident() {
    const a = words[zipf(3000)], b = words[zipf(3000)];
    const r = rnd();
    return r < 0.4 ? a + '_' + b : r < 0.7 ? a + b[0].toUpperCase() + b.slice(1) : a;
}

function code() {
    const lines = [];
    const py = rnd() < 0.5;
    const n = 10 + Math.floor(rnd() * 60);
    let depth = 0;
    for (let i = 0; i < n; i++) {
        const ind = py ? '    '.repeat(depth) : '\t'.repeat(depth);
        const r = rnd();
        if (py) {
            if (r < 0.15 && depth < 3) { lines.push(`${ind}def ${ident()}(${ident()}, ${ident()}=None):`); depth++; }
            else if (r < 0.25 && depth < 3) { lines.push(`${ind}for ${ident()} in range(${number()}):`); depth++; }
            else if (r < 0.35 && depth > 0) { lines.push(`${ind}return ${ident()}`); depth--; }
            else if (r < 0.45) lines.push(`${ind}# ${sentence()}`);
            else lines.push(`${ind}${ident()} = ${ident()}.${ident()}(${number()}, "${word()}")`);
        } else {
            if (r < 0.15 && depth < 3) { lines.push(`${ind}static int ${ident()}(const char *${ident()}, size_t n)`); lines.push(`${ind}{`); depth++; }
            else if (r < 0.25 && depth < 3) { lines.push(`${ind}for (size_t i = 0; i < ${number()}; i++) {`); depth++; }
            else if (r < 0.35 && depth > 0) { depth--; lines.push(`${'\t'.repeat(depth)}}`); }
            else if (r < 0.45) lines.push(`${ind}/* ${sentence()} */`);
            else lines.push(`${ind}${ident()}->${ident()} = ${ident()}(${ident()}, ${number()});`);
        }
    }
    return lines.join('\n') + '\n';
}

const testLines = fs.readFileSync(path.join(root, 'tests/data/tokenizer/corpus.jsonl'), 'utf8')
    .split('\n').filter((l) => l).map((l) => JSON.parse(l).text)
    .filter((t) => t.length < 2000 && !t.includes('<|endoftext|>')); // no long-piece stress lines, no special-token text
function mixed() {
    const parts = [];
    const n = 3 + Math.floor(rnd() * 10);
    for (let i = 0; i < n; i++) parts.push(rnd() < 0.5 ? pick(testLines) : sentence());
    return parts.join('\n');
}

const target = megabytes * 1e6;
const fd = fs.openSync(out, 'w');
let total = 0, docs = 0;
const kinds = { prose: 0, code: 0, mixed: 0 };
while (total < target) {
    const r = rnd();
    const kind = r < 0.85 ? 'prose' : r < 0.92 ? 'code' : 'mixed';
    const text = kind === 'prose' ? prose() : kind === 'code' ? code() : mixed();
    const b = Buffer.byteLength(text, 'utf8');
    kinds[kind] += b;
    total += b;
    docs++;
    fs.writeSync(fd, JSON.stringify({ text }) + '\n');
}
fs.closeSync(fd);
const pct = (k) => (100 * kinds[k] / total).toFixed(1);
console.log(`text: ${docs} documents, ${(total / 1e6).toFixed(1)} MB of UTF-8: ` +
            `${pct('prose')}% English-like prose, ${pct('code')}% code, ${pct('mixed')}% multilingual/mixed`);
