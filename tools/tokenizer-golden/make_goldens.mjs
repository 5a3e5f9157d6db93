// Writes plumb's tokenizer test data with an independent implementation, @huggingface/tokenizers
// (pure JS): the corpus (hand-written samples plus seeded random lines) and, for the DeepSeek-V3
// and V4-Flash tokenizers, the ids HF-style encoding gives for each line and the text that
// decoding those ids gives back.
//
//   cd tools/tokenizer-golden && npm ci && node make_goldens.mjs [DATA_DIR]
//
// DATA_DIR defaults to ../../tests/data/tokenizer. It must hold deepseek-v3/tokenizer.json (+
// tokenizer_config.json) and deepseek-v4-flash/{added_tokens.json, tokenizer_config.json}; the V4
// tokenizer is V3's with V4's added-token table (see DATA_DIR/README.md).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Tokenizer } from "@huggingface/tokenizers";
import { ATOMS, SAMPLE_LINES } from "./samples.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const dataDir = path.resolve(process.argv[2] ?? path.join(here, "../../tests/data/tokenizer"));
const readJson = (...parts) => JSON.parse(fs.readFileSync(path.join(dataDir, ...parts), "utf8"));

// mulberry32: a tiny seeded PRNG, so the corpus is the same on every run.
function makeRandom(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (lo, hi) => lo + Math.floor(next() * (hi - lo + 1));
  const pick = (list) => list[int(0, list.length - 1)];
  return { next, int, pick };
}

// Blocks assigned long before Unicode 14 (plumb's PCRE2 and HF's Oniguruma know Unicode 14; Node
// knows a newer one, so characters assigned since would be classified differently).
const CODE_POINT_RANGES = [
  [0x00, 0x7f], [0xa0, 0x24f], [0x250, 0x2af], [0x300, 0x36f], [0x370, 0x3ff], [0x400, 0x4ff], [0x530, 0x58f],
  [0x590, 0x5ff], [0x600, 0x6ff], [0x900, 0x97f], [0x980, 0x9ff], [0xe00, 0xe7f], [0x10a0, 0x10ff],
  [0x1100, 0x11ff], [0x1e00, 0x1eff], [0x2000, 0x2064], [0x2070, 0x209c], [0x20a0, 0x20bf], [0x2100, 0x214f],
  [0x2190, 0x21ff], [0x2200, 0x22ff], [0x2500, 0x257f], [0x2600, 0x26ff], [0x2700, 0x27bf], [0x3000, 0x303f],
  [0x3041, 0x3096], [0x30a0, 0x30ff], [0x4e00, 0x9fa5], [0xac00, 0xd7a3], [0xff01, 0xffbe], [0x1f300, 0x1f5ff],
  [0x1f600, 0x1f64f], [0x1f680, 0x1f6c5], [0x1d400, 0x1d7ff], [0x20000, 0x2a6d6],
];
const UNASSIGNED = /\p{Cn}/u;

function randomCodePoint(rand) {
  for (;;) {
    const [lo, hi] = rand.pick(CODE_POINT_RANGES);
    const c = String.fromCodePoint(rand.int(lo, hi));
    if (!UNASSIGNED.test(c)) return c;
  }
}

// Lines of random characters from CODE_POINT_RANGES, with spaces sprinkled in.
function randomCodePointLines(rand, count) {
  const lines = [];
  for (let i = 0; i < count; ++i) {
    let s = "";
    const length = rand.int(1, 60);
    for (let k = 0; k < length; ++k) s += rand.next() < 0.15 ? " " : randomCodePoint(rand);
    lines.push(s);
  }
  return lines;
}

// Lines mixing fragments of several categories, joined by nothing, spaces or other whitespace.
function mixedLines(rand, count) {
  const categories = Object.keys(ATOMS);
  const lines = [];
  for (let i = 0; i < count; ++i) {
    const focus = rand.pick(categories);  // most fragments from one category, some from others
    const parts = [];
    for (let k = rand.int(1, 25); k > 0; --k) {
      parts.push(rand.pick(ATOMS[rand.next() < 0.6 ? focus : rand.pick(categories)]));
      const r = rand.next();
      parts.push(r < 0.5 ? " " : r < 0.75 ? "" : r < 0.9 ? rand.pick(ATOMS.whitespace) : rand.pick(ATOMS.punctuation));
    }
    lines.push(parts.join(""));
  }
  return lines;
}

function longLines(rand) {
  const repeat = (n, f) => Array.from({ length: n }, f).join("");
  const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  return [
    "a".repeat(5000),
    repeat(3000, () => letters[rand.int(0, letters.length - 1)]),
    "hello".repeat(1000),
    repeat(2000, () => String.fromCodePoint(rand.int(0x4e00, 0x9fa5))),
    repeat(1000, () => String.fromCodePoint(rand.int(0x30, 0x39))),
    " ".repeat(3000),
    "\n".repeat(500),
    " \t\r\n".repeat(300),
    "!".repeat(1000),
    repeat(300, () => rand.pick(ATOMS.emoji)),
    repeat(2000, () => rand.pick(ATOMS.english) + " "),
    "Supercalifragilisticexpialidocious" + "Pneumonoultramicroscopicsilicovolcanoconiosis".repeat(40),
    "e\u0301".repeat(1000),
    repeat(500, () => rand.pick(ATOMS.special_v3) + rand.pick(ATOMS.english)),
  ];
}

// Every ASCII character alone, and every pair of a few tricky ones.
function characterLines() {
  const lines = [];
  for (let c = 0; c < 128; ++c) lines.push(String.fromCharCode(c));
  const tricky = [" ", "\n", "\r", "\t", "a", "A", "1", "!", "'", "中", "é", "\u0301", "\u00a0", "😀"];
  for (const a of tricky) for (const b of tricky) lines.push(a + b);
  return lines;
}

// Each added token of the V4 table embedded in text, for a sample of them.
function addedTokenLines(rand, addedTokens) {
  const lines = [];
  for (const token of addedTokens) {
    if (rand.next() > 0.15 && token.id >= 3 && !token.content.includes("DSML")) continue;
    lines.push(`${rand.pick(ATOMS.english)} ${token.content}${rand.pick(ATOMS.chinese)}${token.content}`);
  }
  return lines;
}

function buildCorpus(v4AddedTokens) {
  const rand = makeRandom(20251130);
  return [
    ...SAMPLE_LINES,
    ...characterLines(),
    ...addedTokenLines(rand, v4AddedTokens),
    ...mixedLines(rand, 2400),
    ...randomCodePointLines(rand, 700),
    ...longLines(rand),
  ];
}

function loadTokenizer(name, tokenizerJson) {
  const config = readJson(name, "tokenizer_config.json");
  return new Tokenizer(tokenizerJson, config);
}

function writeGoldens(tokenizer, corpus, file) {
  const out = corpus.map((text) => {
    const ids = tokenizer.encode(text, { add_special_tokens: false }).ids;
    const decoded = ids.length === 0 ? "" : tokenizer.decode(ids, { skip_special_tokens: false });
    // The decoded text is stored only when it differs from the input, to keep the file small.
    return JSON.stringify(decoded === text ? { ids } : { ids, decoded });
  });
  fs.writeFileSync(path.join(dataDir, file), out.join("\n") + "\n");
  const tokens = corpus.reduce((n, text, i) => n + JSON.parse(out[i]).ids.length, 0);
  console.log(`${file}: ${corpus.length} lines, ${tokens} tokens`);
}

const v3 = readJson("deepseek-v3", "tokenizer.json");
const v4AddedTokens = readJson("deepseek-v4-flash", "added_tokens.json");
const v4 = { ...v3, added_tokens: v4AddedTokens };
const corpus = buildCorpus(v4AddedTokens);
fs.writeFileSync(path.join(dataDir, "corpus.jsonl"), corpus.map((t) => JSON.stringify(t)).join("\n") + "\n");
console.log(`corpus.jsonl: ${corpus.length} lines`);
writeGoldens(loadTokenizer("deepseek-v3", v3), corpus, "deepseek-v3.golden.jsonl");
writeGoldens(loadTokenizer("deepseek-v4-flash", v4), corpus, "deepseek-v4-flash.golden.jsonl");
