// The reference GPT-2 encoder (npm gpt-3-encoder's Encoder.js) over files:
//   node bpe_reference.js <path/to/Encoder.js> <file>...
// prints one line of token ids per file. Each file is read as Node reads
// UTF-8 (an invalid sequence becomes U+FFFD) and encoded as one text; the
// encoder's own concat is quadratic in the tokens, so a long text is cut
// where the cut changes nothing: after a newline that has a non-space on
// both sides (the pre-tokenizer makes that newline a piece of its own).
const fs = require('fs');
const { encode } = require(process.argv[2]);

function pieces(text) {
  const out = [];
  let start = 0;
  for (let i = 1; i + 1 < text.length; ++i) {
    if (i - start < 4096) continue;
    if (text[i] === '\n' && !/\s/u.test(text[i - 1]) && !/\s/u.test(text[i + 1])) {
      out.push(text.slice(start, i + 1));
      start = i + 1;
    }
  }
  out.push(text.slice(start));
  return out;
}

for (const file of process.argv.slice(3)) {
  const text = fs.readFileSync(file).toString('utf8');
  const ids = [];
  for (const piece of pieces(text)) {
    for (const id of encode(piece)) ids.push(id);
  }
  process.stdout.write(ids.join(' ') + '\n');
}
