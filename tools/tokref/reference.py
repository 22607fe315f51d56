#!/usr/bin/env python3
"""HuggingFace `tokenizers` reference for engine/tokenizer (checking only; not used at run time).

Two steps, both deterministic:

  train OUT_DIR
      Trains three small byte-level BPE tokenizers with tokenizers' BpeTrainer on the
      built-in mixed-language TRAIN_TEXT and writes them to OUT_DIR:
        tokenizer_qwen2.json   NFC + Split(Qwen2 pattern, Isolated) + ByteLevel(use_regex false)
        tokenizer_llama3.json  Split(Llama 3 pattern, Isolated) + ByteLevel(use_regex false),
                               model.ignore_merges true (as in Llama 3's tokenizer.json) and
                               WHOLE_WORDS added to the vocabulary without merges
        tokenizer_gpt2.json    ByteLevel(use_regex true, add_prefix_space false), plus a
                               special "<mask>" token with lstrip (as in RoBERTa)

  fixtures CORPUS OUT_DIR TOKENIZER_JSON...
      Encodes every string of CORPUS (a JSON list) with each tokenizer and writes
      OUT_DIR/ref_<name>.json, <name> being the tokenizer file name without "tokenizer_"
      and ".json" (tokenizer_tiny.json, the tiny preset's tokenizer.json, gives "tiny"):
        {"tokenizer": name, "file": base name, "tokenizers_version": ...,
         "cases": [{"text": s,
                    "ids": encode(s, add_special_tokens=False).ids,
                    "ordinary_ids": the same with encode_special_tokens=True
                                    (special tokens encoded as plain text),
                    "decoded": decode(ids, skip_special_tokens=False),
                    "ordinary_decoded": the same for ordinary_ids}]}

Usage: see tools/tokref/README.md.
"""
import json
import os
import sys

import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE = 1000

TRAIN_TEXT = """\
The quick brown fox jumps over the lazy dog. The dog didn't care; it's a lazy dog, isn't it?
I'm sure they're going to say we've done it again, and you'll agree that she'd know. I'LL SHOUT.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 256 1000 1024 2048 4096 65536 1234567 3.14159 2.71828 1,000,000.
Prices were $19.99, €5, £12.50 and ¥300; growth was 12.5% in 2023 and 7% in 2024.
def encode(self, text: str) -> list[int]:
    ids = []
    for word in self.split(text):
        if word in self.cache:
            ids.extend(self.cache[word])
        else:
            ids.extend(self.bpe(word))
    return ids

func (t *Tokenizer) Encode(text string) ([]int32, error) {
\tif text == "" {
\t\treturn nil, nil
\t}
\treturn t.encode(text, true)
}
<|im_start|>system
You are a helpful assistant.<|im_end|>
<|im_start|>user
What is the capital of France?<|im_end|>
<|im_start|>assistant
The capital of France is Paris.<|im_end|><|endoftext|>
Hello, world! Hello again, world... "Quoted text" and 'single quotes' -- dashes — em dashes.
中文字符和汉字的分词测试。我们今天去北京大学学习机器学习和自然语言处理。日本語のテキストも少しあります。
한국어 문장도 조금 있습니다. 안녕하세요, 세계!
مرحبا بالعالم، هذه جملة عربية قصيرة للاختبار. العربية لغة جميلة.
नमस्ते दुनिया, यह हिंदी में एक छोटा वाक्य है। भारत एक बड़ा देश है।
Привет, мир! Это короткое предложение на русском языке. Ελληνικά: Γειά σου κόσμε.
Emoji: 😀 😂 🎉 🚀 👍 👍🏽 👨‍👩‍👧‍👦 ❤️ 🇫🇷 🏳️‍🌈 and café, naïve, über, ñandú, façade, résumé.
Whitespace   with   several   spaces, trailing spaces   
Windows line endings\r\nand more\r\n\r\nblank lines.


Tabs\tseparate\tcolumns\tin\tTSV\tfiles.
{"key": "value", "list": [1, 2, 3], "nested": {"a": null, "b": true}}
SELECT id, name FROM users WHERE age >= 18 ORDER BY name LIMIT 10;
https://example.com/path?query=1&other=two#fragment user@example.com
"""


WHOLE_WORDS = ["Supercalifragilisticexpialidocious", " na\u00efve", "\u00e9\u00e9\u00e9"]


def byte_level(word):
    """GPT-2's byte-to-printable-character map applied to word's UTF-8 bytes."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    m = dict(zip(bs, cs))
    return "".join(chr(m[b]) for b in word.encode("utf-8"))


def train_one(kind):
    tok = Tokenizer(models.BPE())
    if kind == "qwen2":
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ])
    elif kind == "llama3":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
        ])
    elif kind == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif kind == "smollm":
        # As SmolLM/SmolLM2's tokenizer.json: every digit its own pre-token, then GPT-2.
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ])
    elif kind == "misc_a":
        tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Whitespace(),
            pre_tokenizers.Split("-", behavior="merged_with_previous"),
            pre_tokenizers.Digits(individual_digits=False),
            pre_tokenizers.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=False),
        ])
    elif kind == "misc_b":
        tok.normalizer = normalizers.Sequence([
            normalizers.Strip(left=True, right=True),
            normalizers.Replace(Regex(r" {2,}"), " "),
            normalizers.NFC(),
        ])
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Punctuation(behavior="contiguous"),
            pre_tokenizers.Split(Regex(r"[aeiou]"), behavior="merged_with_next"),
            pre_tokenizers.Split(Regex(r"[^#@]+"), behavior="removed", invert=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ])
    elif kind in ("spm_legacy", "spm_metaspace"):
        return train_spm(kind)
    else:
        raise ValueError(kind)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=2, show_progress=False,
                                  special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    # Several copies so that pairs seen once in TRAIN_TEXT still reach min_frequency.
    tok.train_from_iterator([TRAIN_TEXT] * 3, trainer=trainer)
    if kind == "gpt2":
        tok.add_special_tokens([tokenizers.AddedToken("<mask>", lstrip=True, rstrip=False,
                                                      single_word=False, normalized=False, special=True)])
    doc = json.loads(tok.to_str())
    if kind == "llama3":
        doc["model"]["ignore_merges"] = True
        # Whole words no merge sequence reaches (as Llama 3 has): ignore_merges must
        # still emit them as one token.
        vocab = doc["model"]["vocab"]
        for word in WHOLE_WORDS:
            vocab.setdefault(byte_level(word), len(vocab))
    s = json.dumps(doc, ensure_ascii=False, indent=1, sort_keys=True)
    Tokenizer.from_str(s)  # still loadable
    return s + "\n"


SPM_SPECIAL = ["<unk>", "<s>", "</s>"] + SPECIAL


def train_spm(kind):
    """A SentencePiece-style BPE as Llama 2 and Mistral ship it in tokenizer.json: "▁" for
    spaces, merges, <0xXX> byte-fallback tokens for characters outside the vocabulary.
    spm_legacy: Llama 2's form (normalizer Prepend + Replace, no pre-tokenizer; decoder
    Replace, ByteFallback, Fuse, Strip). spm_metaspace: the newer form (Metaspace
    pre-tokenizer with prepend_scheme "first", no normalizer; Metaspace decoder)."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.pre_tokenizer = pre_tokenizers.Split("\u2581", behavior="merged_with_next")
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=2, show_progress=False,
                                  special_tokens=SPM_SPECIAL, limit_alphabet=120)
    tok.train_from_iterator([TRAIN_TEXT] * 3, trainer=trainer)
    doc = json.loads(tok.to_str())
    vocab = doc["model"]["vocab"]
    for b in range(256):
        vocab.setdefault("<0x%02X>" % b, len(vocab))
    if kind == "spm_legacy":
        doc["pre_tokenizer"] = None
        doc["decoder"] = json.loads(decoders.Sequence([
            decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0),
        ]).__getstate__())
    else:
        doc["normalizer"] = None
        doc["pre_tokenizer"] = json.loads(pre_tokenizers.Metaspace(
            replacement="\u2581", prepend_scheme="first", split=False).__getstate__())
        doc["decoder"] = json.loads(decoders.Metaspace(replacement="\u2581", prepend_scheme="first",
                                                       split=False).__getstate__())
    s = json.dumps(doc, ensure_ascii=False, indent=1, sort_keys=True)
    Tokenizer.from_str(s)  # still loadable
    return s + "\n"


def cmd_train(out_dir, kinds):
    os.makedirs(out_dir, exist_ok=True)
    for kind in kinds:
        path = os.path.join(out_dir, "tokenizer_%s.json" % kind)
        with open(path, "w", encoding="utf-8") as f:
            f.write(train_one(kind))
        print("wrote", path)


def fixture_name(path):
    base = os.path.basename(path)
    if base == "tokenizer.json":
        return "tiny"
    name = base[:-len(".json")] if base.endswith(".json") else base
    return name[len("tokenizer_"):] if name.startswith("tokenizer_") else name


def cmd_fixtures(corpus_path, out_dir, paths):
    with open(corpus_path, encoding="utf-8") as f:
        corpus = json.load(f)
    assert isinstance(corpus, list) and all(isinstance(s, str) for s in corpus)
    for path in paths:
        tok = Tokenizer.from_file(path)
        ordinary = Tokenizer.from_file(path)
        ordinary.encode_special_tokens = True
        cases = []
        for s in corpus:
            ids = tok.encode(s, add_special_tokens=False).ids
            ord_ids = ordinary.encode(s, add_special_tokens=False).ids
            cases.append({
                "text": s,
                "ids": ids,
                "ordinary_ids": ord_ids,
                "decoded": tok.decode(ids, skip_special_tokens=False),
                "ordinary_decoded": tok.decode(ord_ids, skip_special_tokens=False),
            })
        name = fixture_name(path)
        doc = {"tokenizer": name, "file": os.path.basename(path),
               "tokenizers_version": tokenizers.__version__, "cases": cases}
        out = os.path.join(out_dir, "ref_%s.json" % name)
        with open(out, "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=True, indent=1)
            f.write("\n")
        lossy = sum(1 for c in cases if c["decoded"] != c["text"])
        print("wrote %s (%d cases, %d decode differently from the text)" % (out, len(cases), lossy))


def main(argv):
    if len(argv) >= 2 and argv[0] == "train":
        cmd_train(argv[1], argv[2:] or ["qwen2", "llama3", "gpt2", "smollm", "misc_a", "misc_b",
                                        "spm_legacy", "spm_metaspace"])
    elif len(argv) >= 4 and argv[0] == "fixtures":
        cmd_fixtures(argv[1], argv[2], argv[3:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
