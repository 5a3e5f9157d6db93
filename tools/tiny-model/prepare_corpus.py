#!/usr/bin/env python3
"""Builds the training corpus of the tiny trained DeepSeek-V4 model (models/tiny-kjv) from Debian
packages, on the CPU machine (the GPU machine has no apt):

    apt-get install -y bible-kjv fortunes-zh      # bible-kjv pulls bible-kjv-text
    python3 tools/tiny-model/prepare_corpus.py    # writes .device/corpus/ and models/tiny-kjv/heldout*.txt

Sources (both public domain):
  * King James Version (1611/1769) from `bible-kjv-text`, read with the package's own `bible`
    program (`bible -f Gen1:1-Rev22:21` prints one verse a line, "Ge1:1 In the beginning ...").
  * Tang and Song poems from `fortunes-zh` (`tang300`: 300 Tang poems, `song100`: 100 Song ci), a
    little Chinese so the tokenizer, the byte-level decode of multi-byte characters and the CJK
    pre-tokenizer rule are exercised by a real model.

Layout of the text (one KJV chapter a block, blocks separated by one empty line):

    Genesis 1
    1 In the beginning God created the heaven and the earth.
    2 And the earth was without form, ...

Split (fixed, by whole chapters / whole poems): chapter k (0-based, canonical order, 1189 in all)
is held out when k % 50 == 25 (24 chapters, about 2% of the text, spread over both testaments);
poem k when k % 50 == 25. Output:
  .device/corpus/kjv_train.txt, zh_train.txt   training text (carried to the GPU machine)
  .device/corpus/manifest.json                counts, sha256, held-out chapter list
  models/tiny-kjv/heldout.txt, heldout-zh.txt the held-out text (committed: plumb's perplexity test)
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys

BOOKS = [  # (abbreviation printed by `bible`, KJV book name), canonical order
    ("Ge", "Genesis"), ("Exo", "Exodus"), ("Lev", "Leviticus"), ("Num", "Numbers"), ("Deu", "Deuteronomy"),
    ("Josh", "Joshua"), ("Jdgs", "Judges"), ("Ruth", "Ruth"), ("1Sm", "1 Samuel"), ("2Sm", "2 Samuel"),
    ("1Ki", "1 Kings"), ("2Ki", "2 Kings"), ("1Chr", "1 Chronicles"), ("2Chr", "2 Chronicles"), ("Ezra", "Ezra"),
    ("Neh", "Nehemiah"), ("Est", "Esther"), ("Job", "Job"), ("Psa", "Psalms"), ("Prv", "Proverbs"),
    ("Eccl", "Ecclesiastes"), ("SSol", "Song of Solomon"), ("Isa", "Isaiah"), ("Jer", "Jeremiah"),
    ("Lam", "Lamentations"), ("Eze", "Ezekiel"), ("Dan", "Daniel"), ("Hos", "Hosea"), ("Joel", "Joel"),
    ("Amos", "Amos"), ("Obad", "Obadiah"), ("Jonah", "Jonah"), ("Mic", "Micah"), ("Nahum", "Nahum"),
    ("Hab", "Habakkuk"), ("Zep", "Zephaniah"), ("Hag", "Haggai"), ("Zec", "Zechariah"), ("Mal", "Malachi"),
    ("Mat", "Matthew"), ("Mark", "Mark"), ("Luke", "Luke"), ("John", "John"), ("Acts", "Acts"),
    ("Rom", "Romans"), ("1Cor", "1 Corinthians"), ("2Cor", "2 Corinthians"), ("Gal", "Galatians"),
    ("Eph", "Ephesians"), ("Phi", "Philippians"), ("Col", "Colossians"), ("1Th", "1 Thessalonians"),
    ("2Th", "2 Thessalonians"), ("1Tim", "1 Timothy"), ("2Tim", "2 Timothy"), ("Titus", "Titus"),
    ("Phmn", "Philemon"), ("Heb", "Hebrews"), ("Jas", "James"), ("1Pet", "1 Peter"), ("2Pet", "2 Peter"),
    ("1Jn", "1 John"), ("2Jn", "2 John"), ("3Jn", "3 John"), ("Jude", "Jude"), ("Rev", "Revelation"),
]
HOLDOUT_MOD, HOLDOUT_REM = 50, 25
FORTUNES = "/usr/share/games/fortunes"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def read_kjv():
    """-> list of chapters (book name, chapter number, [(verse number, text)])."""
    raw = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True, capture_output=True, text=True).stdout
    names = dict(BOOKS)
    chapters, key = [], None
    for line in raw.splitlines():
        m = re.fullmatch(r"(\S+?)(\d+):(\d+) (.*)", line)
        assert m, f"unexpected line from bible: {line!r}"
        abbr, c, v, text = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4).strip()
        assert abbr in names, abbr
        if (abbr, c) != key:
            key = (abbr, c)
            chapters.append((names[abbr], c, []))
        chapters[-1][2].append((v, text))
    assert len(chapters) == 1189 and sum(len(ch[2]) for ch in chapters) == 31102, "not the whole KJV"
    return chapters


def chapter_text(book, c, verses):
    return f"{book} {c}\n" + "".join(f"{v} {t}\n" for v, t in verses)


def read_poems():
    poems = []
    for name in ("tang300", "song100"):
        with open(os.path.join(FORTUNES, name), encoding="utf-8") as f:
            text = ANSI.sub("", f.read())
        for block in text.split("\n%\n"):
            block = block.strip("%\n ")
            if block:
                poems.append(block + "\n")
    return poems


def sha(s):
    return hashlib.sha256(s.encode()).hexdigest()


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = os.path.join(root, ".device", "corpus")
    model_dir = os.path.join(root, "models", "tiny-kjv")
    os.makedirs(out, exist_ok=True)
    os.makedirs(model_dir, exist_ok=True)

    chapters = read_kjv()
    train, held, held_names = [], [], []
    for k, (book, c, vs) in enumerate(chapters):
        if k % HOLDOUT_MOD == HOLDOUT_REM:
            held.append(chapter_text(book, c, vs))
            held_names.append(f"{book} {c}")
        else:
            train.append(chapter_text(book, c, vs))
    poems = read_poems()
    zh_train = [p for k, p in enumerate(poems) if k % HOLDOUT_MOD != HOLDOUT_REM]
    zh_held = [p for k, p in enumerate(poems) if k % HOLDOUT_MOD == HOLDOUT_REM]

    files = {
        os.path.join(out, "kjv_train.txt"): "\n".join(train),
        os.path.join(out, "zh_train.txt"): "\n".join(zh_train),
        os.path.join(model_dir, "heldout.txt"): "\n".join(held),
        os.path.join(model_dir, "heldout-zh.txt"): "\n".join(zh_held),
    }
    for path, text in files.items():
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
    manifest = {
        "sources": {"kjv": "Debian bible-kjv-text (read with `bible -f Gen1:1-Rev22:21` from bible-kjv)",
                    "zh": "Debian fortunes-zh: tang300 + song100, ANSI colour codes removed"},
        "split": f"chapter k (0-based, 1189 in canonical order) and poem k held out when k % {HOLDOUT_MOD} == {HOLDOUT_REM}",
        "heldout_chapters": held_names,
        "counts": {"chapters_train": len(train), "chapters_heldout": len(held), "poems_train": len(zh_train),
                   "poems_heldout": len(zh_held)},
        "files": {os.path.relpath(p, root): {"bytes": len(t.encode()), "sha256": sha(t)} for p, t in files.items()},
    }
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
        f.write("\n")
    json.dump(manifest["counts"], sys.stdout)
    print()
    for p, m in manifest["files"].items():
        print(f"{p}: {m['bytes']} bytes")


if __name__ == "__main__":
    main()
