"""Cross-checks the JS-written goldens against HF `tokenizers` (the Rust library transformers
uses), on a machine that has it (the H200 box; it is not installable here):

    python3 tools/tokenizer-golden/check_with_hf_rust.py [DATA_DIR]

Prints, per tokenizer, how many corpus lines encode and decode identically, and the first
differences. The V4-Flash tokenizer is rebuilt from V3's file and V4's added-token table.
"""
import json
import pathlib
import sys

from tokenizers import Tokenizer

data = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent / "../../tests/data/tokenizer")


def read_jsonl(path):
    # Split on "\n" only: str.splitlines() would also split inside lines at U+2028, U+0085, ...
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line]


corpus = read_jsonl(data / "corpus.jsonl")
v3 = json.loads((data / "deepseek-v3/tokenizer.json").read_text(encoding="utf-8"))
v4 = dict(v3, added_tokens=json.loads((data / "deepseek-v4-flash/added_tokens.json").read_text(encoding="utf-8")))

for name, spec in [("deepseek-v3", v3), ("deepseek-v4-flash", v4)]:
    tokenizer = Tokenizer.from_str(json.dumps(spec))
    goldens = read_jsonl(data / f"{name}.golden.jsonl")
    encode_diffs, decode_diffs = [], []
    for i, (text, golden) in enumerate(zip(corpus, goldens)):
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        if ids != golden["ids"]:
            encode_diffs.append((i + 1, text, ids, golden["ids"]))
        decoded = tokenizer.decode(golden["ids"], skip_special_tokens=False)
        if decoded != golden.get("decoded", text):
            decode_diffs.append((i + 1, golden.get("decoded", text), decoded))
    print(f"{name}: {len(corpus)} lines; {len(encode_diffs)} encode and {len(decode_diffs)} decode differences")
    for line, text, got, want in encode_diffs[:10]:
        print(f"  encode line {line}: {text!r}\n    rust {got}\n    js   {want}")
    for line, want, got in decode_diffs[:10]:
        print(f"  decode line {line}: rust {got!r}\n    js {want!r}")
