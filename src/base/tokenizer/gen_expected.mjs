#!/usr/bin/env node
// gen_expected.mjs - write the tokenizer's parity corpus and its expected ids:
//   tests/data/tokenizer/corpus.jsonl     one {"text": ...} per line
//   tests/data/tokenizer/expected.jsonl   one {"ids": [...]} per line, same order
//   tests/data/tokenizer/expected.meta.json  reference versions and cross-check result
//
// The expected ids come from tiktoken's Rust core (npm package "tiktoken", its
// WASM build): get_encoding("gpt2").encode_ordinary(text). They are
// cross-checked with two pure-JavaScript ports (js-tiktoken "gpt2" and
// gpt-tokenizer "r50k_base"); every disagreement is printed with the code
// points involved (see docs/tokenizer.md for the ones found and why).
//
// Run ONCE, from the repository root; the tests only read the committed files:
//   npm install --prefix /tmp/tokref tiktoken@1.0.22 js-tiktoken@1.0.21 gpt-tokenizer@4.0.0
//   node src/base/tokenizer/gen_expected.mjs /tmp/tokref
//
// The corpus is deterministic (a fixed-seed PRNG), so running this again
// rewrites the same files.

import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const modDir = path.resolve(process.argv[2] || '.');
const require = createRequire(path.join(modDir, 'package.json'));
const { get_encoding } = require('tiktoken');
const { getEncoding } = require('js-tiktoken');
const gptTok = require('gpt-tokenizer/cjs/encoding/r50k_base');
const version = (name) =>
    JSON.parse(fs.readFileSync(path.join(modDir, 'node_modules', name, 'package.json'), 'utf8')).version;

const outDir = path.resolve('tests/data/tokenizer');
fs.mkdirSync(outDir, { recursive: true });

// ---------------------------------------------------------------- corpus
const corpus = [];
const add = (s) => corpus.push(s);
const cp = (...xs) => String.fromCodePoint(...xs);

// English prose
add('The quick brown fox jumps over the lazy dog.');
add('Data loaders are rarely the bottleneck, until one day they are: the accelerators wait, ' +
    'the utilisation graph shows a saw tooth, and someone has to find out why.');
add('In 1969, Apollo 11 landed on the Moon. Neil Armstrong said: "That\'s one small step for ' +
    '(a) man, one giant leap for mankind."\nThe mission lasted 8 days, 3 hours, 18 minutes ' +
    'and 35 seconds.');
add('Hello, world!  Hello,  world!   Hello,   world!\n\nNew paragraph.\n\n\nAnother one.');
add('Mr. O\'Neil\'s dog—a spaniel—didn\'t bark; it "sang" (or so he claimed…).');
add('e-mail: someone@example.com, URL: https://example.org/path?q=1&r=two#frag');
add('Tokenization is the first step: text -> pieces -> bytes -> merges -> ids. ' +
    'Each step must be exact, or the model sees a different sequence than in training.');
add('Once upon a time, in a land far, far away, there lived a curious engineer who ' +
    'measured everything twice and trusted nothing she had not measured herself.');

// Contractions, both cases, and look-alikes
add("it's, It's, IT'S, it'S; we're, WE'RE, We'Re; they've, THEY'VE; I'm, I'M; " +
    "you'll, YOU'LL, You'Ll; he'd, HE'D; don't, DON'T, Don'T");
add("'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D 'x 'r 'l 'v ''s '''s");
add("rock'n'roll, o'clock, ma'am, y'all'd've, 'tis, '90s, the '80s' music");
add('curly: it’s, IT’S, we’re, they’ve, you’ll ‘quoted’ “double”');
add("trailing apostrophe' and ' spaced ' s and 's at start");
add("x's 1's ?'s  's\t's\n's");

// Digits and long numbers
add('0 1 12 123 1234 12345 123456 1234567 12345678 123456789 1234567890');
add('3.14159265358979323846264338327950288419716939937510582097494459230781640628620899');
add('Phone: +1 (555) 010-9999; card 4111 1111 1111 1111; 1,000,000.00 $ 1e-9 0x1F 0b1010');
add('1'.repeat(500));
add('Arabic-Indic ٠١٢٣٤٥٦٧٨٩, Devanagari ०१२३४५६७८९, fullwidth ０１２３, Roman Ⅻ ⅻ, ' +
    'superscript ² ³ ¹, fractions ½ ¼ ¾, circled ① ② ③');

// Whitespace
add('trailing spaces   ');
add('   leading spaces');
add('tabs\tbetween\t\twords\t\t\t');
add('windows\r\nline\r\nendings\r\n');
add('mixed \t \n \r\n  \n\n\t\t  x');
add('nbsp\u00a0here and\u00a0\u00a0two, space+nbsp \u00a0x, nbsp+space\u00a0 x');
add('NEL\u0085here, \u0085\u0085double, space+NEL \u0085x, x\u0085 y, end\u0085');
add('mongolian vowel separator\u180Ehere \u180E x\u180E\u180Ey');
add('zero\u200Bwidth\u200B space \u200B x \u200B\u200B');
add('\uFEFFbyte order mark at start, \uFEFF in the middle, x\uFEFF y \uFEFF\uFEFFz');
add('ideographic\u3000space\u3000\u3000x, en\u2002em\u2003thin\u2009hair\u200A, ' +
    'line sep\u2028para sep\u2029, nnbsp\u202Fx, mmsp\u205Fx, ogham\u1680x');
add('vertical\u000Btab and form\u000Cfeed, x\u001Cfile sep\u001Dgroup\u001Erec\u001Funit');
add('  \u00a0 \u0085 \u3000 \u2028 x  \u00a0\u0085\u3000y');
add(' ');
add('\n');
add('\t \n');
add('a');
add(' a');
add('  a');

// Emoji
add('I ❤️ tokenizers 😀😃😄 👍🏽 👍🏿 👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵🇺🇸 🏴󠁧󠁢󠁳󠁣󠁴󠁿 ☕ ✅ 1️⃣ #️⃣');
add('😀😀😀😀😀😀😀😀 🤖🤖 🧑🏾‍🚀 🫠 🫶🏻 🪿 🐦‍🔥 🙂‍↔️');

// CJK
add('日本語のテキストを正しくトークン化することは重要です。東京は日本の首都です。');
add('中文文本：我们需要一个快速而准确的分词器。北京、上海、广州。');
add('한국어 텍스트도 처리해야 합니다. 서울은 한국의 수도입니다.');
add('ｈａｌｆｗｉｄｔｈ and ﾊﾝｶｸｶﾀｶﾅ mixed with 漢字 and ひらがな');

// Arabic and Hebrew (right to left), with marks
add('مرحبا بالعالم! هذه جملة عربية مع أرقام ١٢٣ وتشكيل: العَرَبِيَّة');
add('שלום עולם! זהו משפט בעברית עם ניקוד: שָׁלוֹם, ומספרים 123.');
add('mixed: English עברית العربية English \u200F\u200E marks');

// Indic scripts and combining marks
add('हिन्दी पाठ: नमस्ते दुनिया। संस्कृतम्। क्षत्रिय');
add('தமிழ் உரை, বাংলা লেখা, ગુજરાતી, ਪੰਜਾਬੀ, ಕನ್ನಡ, മലയാളം, తెలుగు, සිංහල, ไทย ภาษา, ລາວ');
add('combining: e\u0301 a\u0300 o\u0308 n\u0303 Z\u0335\u0321\u0354a\u0337\u031Fl\u0336\u0319g\u0338\u031Do\u0334');
add('précomposé: é à ö ñ vs decomposed: e\u0301 a\u0300 o\u0308 n\u0303; Å Å Å');
add('Ελληνικά κείμενα, Кириллица: Привет, мир! Ёжик. Հայերեն, ქართული, አማርኛ');

// Code
add('#include <stdio.h>\n\nint main(int argc, char **argv)\n{\n    for (int i = 0; i < argc; i++)\n' +
    '        printf("%d: %s\\n", i, argv[i]);\n    return 0;\n}\n');
add('def tokenize(text: str) -> list[int]:\n    """Split text into ids."""\n    ids = []\n' +
    '    for piece in PATTERN.findall(text):\n        if piece in encoder:\n' +
    '            ids.append(encoder[piece])\n        else:\n            ids.extend(bpe(piece))\n' +
    '    return ids\n\n\nclass Foo:\n\tdef bar(self):\n\t\treturn {"a": 1, \'b\': [2, 3]}\n');
add('    if (x) {\n        y = x->next;\n    }\n\n    // comment with trailing spaces   \n' +
    '    return y ? *y : NULL;  /* done */\n');
add('SELECT id, name FROM users WHERE age >= 18 AND name LIKE \'%son\' ORDER BY id DESC;');
add('{"key": "value", "list": [1, 2.5, -3e10, true, false, null], "nested": {"a": {}}}');
add('<html><body><p class="x">Hello&nbsp;&amp;&lt;world&gt;</p></body></html>');
add('$ ls -la | grep "^d" && echo \'ok\' || exit 1 # comment\n~/dir/file.txt C:\\Windows\\path');

// Long pieces
{
    let x = 987654321;
    const rnd = () => (x = (x * 1103515245 + 12345) >>> 0) / 4294967296;
    const letters = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ';
    let w = '';
    for (let i = 0; i < 5000; i++) w += letters[Math.floor(rnd() * letters.length)];
    add(w);
    add('a'.repeat(3000));
    add(' ' + 'ab'.repeat(2000) + ' end');
    add('word' + ' '.repeat(4000) + 'word');
    add(' '.repeat(3000));
    add('\n'.repeat(2500) + 'x');
    add(' \t'.repeat(1500) + 'tail');
    add('!'.repeat(2000) + '?'.repeat(10));
    add('é'.repeat(1500));
    add('日本'.repeat(800));
}

// <|endoftext|> is ordinary text
add('before<|endoftext|>after');
add('<|endoftext|>');
add('text <|endoftext|> more text <|endoftext|><|endoftext|>');
add('<|endoftext|> <|fim_prefix|> <|im_start|>');

// Characters assigned in Unicode 15.0, 15.1 and 16.0
add('Kawi (15.0): ' + cp(0x11F04, 0x11F05, 0x11F06, 0x11F07, 0x11F12) + ' digits ' +
    cp(0x11F50, 0x11F51, 0x11F52, 0x11F59) + " end's");
add('Nag Mundari (15.0): ' + cp(0x1E4D0, 0x1E4D1, 0x1E4D2) + ' digits ' + cp(0x1E4F0, 0x1E4F1, 0x1E4F9));
add('CJK Ext H (15.0): ' + cp(0x31350, 0x31351, 0x31352) + ', Ext I (15.1): ' + cp(0x2EBF0, 0x2EBF1, 0x2EBF2));
add('Garay (16.0): ' + cp(0x10D4A, 0x10D4B, 0x10D4C, 0x10D50) + ' digits ' + cp(0x10D40, 0x10D41, 0x10D49) + "'s");
add('Tulu-Tigalari (16.0): ' + cp(0x11380, 0x11381, 0x11382) + ', Sunuwar: ' + cp(0x11BC0, 0x11BC1, 0x11BC2) +
    ' digits ' + cp(0x11BF0, 0x11BF1, 0x11BF9));
add('Kirat Rai (16.0): ' + cp(0x16D43, 0x16D44, 0x16D45) + ' digits ' + cp(0x16D70, 0x16D71, 0x16D79) +
    ', Ol Onal: ' + cp(0x1E5D0, 0x1E5D1, 0x1E5D2) + ' digits ' + cp(0x1E5F1, 0x1E5F2, 0x1E5FA));
add('Gurung Khema (16.0): ' + cp(0x16100, 0x16101, 0x16102) + ' digits ' + cp(0x16130, 0x16131, 0x16139) +
    ', Myanmar Ext-C digits: ' + cp(0x116D0, 0x116D1, 0x116D9) + ', outlined digits: ' + cp(0x1CCF0, 0x1CCF1, 0x1CCF9));
add('Latin (16.0): ' + cp(0xA7CB, 0xA7CC, 0xA7CD, 0xA7DA, 0xA7DB, 0xA7DC) + ' and ' + cp(0x1C89, 0x1C8A) +
    ' in words: x' + cp(0xA7CC) + 'y ' + cp(0x10D4A) + '1' + cp(0x10D40) + 'a');
add('unassigned: ' + cp(0x50000, 0x0378, 0xE0080) + ' private use: ' + cp(0xE000, 0xF8FF, 0xF0000, 0x10FFFD) +
    ' noncharacters: ' + cp(0xFFFE, 0xFFFF, 0x10FFFF) + ' replacement: \uFFFD');

// NUL and other controls inside text
add('nul\u0000inside');
add('\u0000');
add('a\u0000\u0000 b \u0000c\u0000 \u0000');
add('bell\u0007 backspace\u0008 escape\u001b[31mred\u001b[0m del\u007f');

// Random mixed strings
{
    let x = 20240917;
    const rnd = () => (x = (x * 1664525 + 1013904223) >>> 0) / 4294967296;
    const pick = (a) => a[Math.floor(rnd() * a.length)];
    const pools = [
        'abcdefghijklmnopqrstuvwxyz', 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', '0123456789',
        ' ', '    ', '\t\n\r', '.,;:!?-_()[]{}<>/\\|@#$%^&*+=~`"\'', "'s'S'll'LL're've'd'm't",
        'éèêëàâäôöûüçñßøåæœ', 'αβγδεζηθ', 'абвгдежз', 'שלוםעולם', 'مرحبابالعالم',
        'नमस्तेदुनिया', 'ािीुूेैोौंः्', '日本語中文字', 'ひらがなカタカナ', '한국어',
        '😀👍🏽👩‍💻🇫🇷❤️', '\u00a0\u0085\u3000\u2028\u2029\u1680\u2000\u200a\u202f\u205f',
        '\u180e\u200b\u200c\u200d\ufeff\u2060\u00ad', '٠١٢٣४५६७①②½²', '\u0000\u0001\u001f\u007f',
        cp(0x11F04, 0x11F50, 0x1E4D0, 0x2EBF0, 0x31350, 0x10D4A, 0x10D40, 0x11BC0, 0x11BF0, 0x16D43,
           0x16D70, 0x1E5D0, 0x1E5F1, 0x16100, 0x16130, 0x116D0, 0x1CCF0, 0xA7CC, 0x1C89),
        cp(0x1F600, 0x1F9D1, 0x1FAE8, 0x1F3FB, 0xE0067, 0xFE0F, 0x20E3),
    ];
    for (let k = 0; k < 220; k++) {
        const len = 1 + Math.floor(rnd() * (k < 200 ? 40 : 400));
        let s = '';
        while ([...s].length < len) {
            const pool = [...pick(pools)];
            const runLen = 1 + Math.floor(rnd() * 6);
            for (let i = 0; i < runLen; i++) s += pick(pool);
        }
        add(s);
    }
}

// ---------------------------------------------------------------- reference
const tk = get_encoding('gpt2');
const jt = getEncoding('gpt2');
const ref = corpus.map((s) => Array.from(tk.encode_ordinary(s)));
const refBytes = (ids) => Buffer.from(tk.decode(new Uint32Array(ids)));

const hex = (s) => [...s].filter((c) => c.codePointAt(0) > 0x7e || c.codePointAt(0) < 0x20)
    .map((c) => 'U+' + c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0'));
const disagreements = [];
corpus.forEach((s, i) => {
    const others = {
        'js-tiktoken': jt.encode(s, [], []),
        'gpt-tokenizer': gptTok.encode(s, { disallowedSpecial: new Set() }),
    };
    for (const [name, ids] of Object.entries(others)) {
        const a = ref[i];
        if (ids.length === a.length && ids.every((v, k) => v === a[k]))
            continue;
        let k = 0;
        while (k < a.length && k < ids.length && a[k] === ids[k])
            k++;
        // the code points around the first difference, from the original text
        const off = refBytes(a.slice(0, k)).length;
        const bytes = Buffer.from(s, 'utf8');
        const ctx = bytes.subarray(Math.max(0, off - 6), off + 8).toString('utf8');
        const d = { line: i + 1, impl: name, first_diff: k, context: ctx, nonascii: [...new Set(hex(ctx))] };
        disagreements.push(d);
        console.log(`line ${i + 1}: ${name} differs at id ${k}: ${JSON.stringify(ctx)} ${d.nonascii.join(' ')}`);
    }
});

fs.writeFileSync(path.join(outDir, 'corpus.jsonl'), corpus.map((s) => JSON.stringify({ text: s })).join('\n') + '\n');
fs.writeFileSync(path.join(outDir, 'expected.jsonl'), ref.map((ids) => JSON.stringify({ ids })).join('\n') + '\n');
fs.writeFileSync(path.join(outDir, 'expected.meta.json'), JSON.stringify({
    reference: `tiktoken ${version('tiktoken')} (WASM build of tiktoken's Rust core), get_encoding("gpt2").encode_ordinary`,
    cross_checked_with: [`js-tiktoken ${version('js-tiktoken')} getEncoding("gpt2")`,
                         `gpt-tokenizer ${version('gpt-tokenizer')} r50k_base`],
    node: process.version,
    lines: corpus.length,
    disagreements,
}, null, 1) + '\n');
tk.free();
console.log(`${corpus.length} lines, ${ref.reduce((a, b) => a + b.length, 0)} ids, ` +
            `${disagreements.length} disagreements`);
