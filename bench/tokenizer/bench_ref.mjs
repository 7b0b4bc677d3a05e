#!/usr/bin/env node
// bench_ref.mjs - single-thread throughput of the reference tokenizers on the
// benchmark text (same JSONL file as bench_tokenizer), run by run.sh.
//
//   node bench/tokenizer/bench_ref.mjs TEXT.jsonl [PASSES]
//
// Prints "key value" lines:
//   native_impl, native_mbps, native_cpu_mbps, native_tokens
//        tiktoken's Rust core through native Node bindings
//   wasm_impl, wasm_mbps, wasm_cpu_mbps, wasm_tokens
//        npm "tiktoken" (WASM build of the same Rust core)
// MB = 10^6 bytes of UTF-8 text; best of PASSES (default 3; WASM: 2).
// *_cpu_mbps: per second of the process's CPU time (the encoders run on
// Node's main thread; the process's other threads are idle meanwhile).

import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, 'package.json'));
const file = process.argv[2];
const passes = Number(process.argv[3] || 3);

const docs = fs.readFileSync(file, 'utf8').split('\n').filter((l) => l).map((l) => JSON.parse(l).text);
const bytes = docs.reduce((a, d) => a + Buffer.byteLength(d, 'utf8'), 0);
if (docs.some((d) => d.includes('<|endoftext|>'))) {
    // tiktoken-node's encode() allows special tokens; keep the comparison fair
    console.error('bench_ref: the text contains <|endoftext|>');
    process.exit(1);
}

function bench(name, encode, n) {
    let best = Infinity, bestCpu = Infinity, tokens = 0;
    for (let p = 0; p < n; p++) {
        const c0 = process.cpuUsage();
        const t0 = process.hrtime.bigint();
        let count = 0;
        for (const d of docs) count += encode(d).length;
        const dt = Number(process.hrtime.bigint() - t0) / 1e9;
        const c = process.cpuUsage(c0);
        best = Math.min(best, dt);
        bestCpu = Math.min(bestCpu, (c.user + c.system) / 1e6);
        tokens = count;
    }
    console.log(`${name}_mbps ${(bytes / best / 1e6).toFixed(2)}`);
    console.log(`${name}_cpu_mbps ${(bytes / bestCpu / 1e6).toFixed(2)}`);
    console.log(`${name}_tokens ${tokens}`);
}

// Native: tiktoken-node (napi-rs bindings of tiktoken's Rust core); fall back
// to @anysphere/tiktoken-node if it does not load.
let native = null, nativeName = null;
for (const pkg of ['tiktoken-node', '@anysphere/tiktoken-node']) {
    try {
        const m = require(pkg);
        const enc = m.getEncoding('gpt2');
        enc.encode('probe');
        native = enc;
        nativeName = pkg + '@' + JSON.parse(fs.readFileSync(
            path.join(here, 'node_modules', pkg, 'package.json'), 'utf8')).version;
        break;
    } catch (e) {
        console.error(`bench_ref: ${pkg} does not load: ${e.message.split('\n')[0]}`);
    }
}
console.log(`bytes ${bytes}`);
if (native) {
    console.log(`native_impl ${nativeName}`);
    bench('native', (d) => native.encode(d), passes);
} else {
    console.log('native_impl none');
}

const { get_encoding } = require('tiktoken');
const wasmVersion = JSON.parse(fs.readFileSync(path.join(here, 'node_modules/tiktoken/package.json'), 'utf8')).version;
console.log(`wasm_impl tiktoken@${wasmVersion}`);
const wasm = get_encoding('gpt2');
bench('wasm', (d) => wasm.encode_ordinary(d), Math.min(passes, 2));
wasm.free();
