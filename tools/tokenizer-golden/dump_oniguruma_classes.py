"""Dumps which code points HF tokenizers' regex engine (Oniguruma, through the Rust `tokenizers`
package) puts in the general categories \\p{L}, \\p{M}, \\p{N}, \\p{P}, \\p{S} that DeepSeek's
pre-tokenizer patterns use. Run where `tokenizers` is installed (the H200 machine):

    python3 tools/tokenizer-golden/dump_oniguruma_classes.py > tools/tokenizer-golden/oniguruma_classes.json

make_unicode_additions.py turns the result into plumb's table of characters that PCRE2's older
Unicode tables lack.
"""
import json

import tokenizers
from tokenizers import Regex
from tokenizers.pre_tokenizers import Split

CLASSES = ["L", "M", "N", "P", "S"]


def scalar_values():
    return [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]


def to_ranges(code_points):
    ranges = []
    for c in code_points:
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return ranges


def members(cls, code_points):
    # Characters separated by "\n" (in none of the classes): a one-character piece that is not
    # "\n" is a match, as an unmatched character always merges with a neighbouring "\n".
    text = "\n".join(chr(c) for c in code_points if c != 0x0A)
    pieces = Split(Regex(r"\p{%s}" % cls), "isolated").pre_tokenize_str(text)
    return sorted(ord(p) for p, _ in pieces if len(p) == 1 and p != "\n")


code_points = scalar_values()
dump = {"tokenizers_version": tokenizers.__version__}
dump.update({cls: to_ranges(members(cls, code_points)) for cls in CLASSES})
print(json.dumps(dump))
