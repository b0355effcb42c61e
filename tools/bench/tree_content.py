"""File contents for the generated trees of gen_tree.py: deterministic, realistic to a compressor.

Every content is a function of (kind, size, content seed) and of the pools, which are
a function of the tree's seed. Text is not drawn word by word per file (too slow for
a gigabyte in Python): each text kind has a pool of lines, built once from small
grammars (identifiers, keywords, indentation, comments; Zipf-distributed words for
prose; schemas for JSON and CSV; levels and modules for logs), laid out in groups
that share their local identifiers like the functions of one module. A file takes
runs of consecutive lines from a window of groups around a random one, so it has the
local repetition of a real file and no more; the window grows with the file so a
large file does not repeat itself. Binaries mix runs of an instruction-like pool,
fresh noise, string tables and sparse tables. Already-compressed files and media are
fresh pseudo-random bytes behind a plausible header.
"""
from __future__ import annotations

import calendar
import functools
import random
import struct

ANCHOR = calendar.timegm((2026, 6, 1, 0, 0, 0))  # a fixed "now": the same tree in any year

TEXT_KINDS = ("py", "js", "c", "go", "rs", "java", "sh", "md", "txt", "json", "csv", "log",
              "conf", "html")
OPAQUE_KINDS = ("binary", "compressed", "media")

# The kind of content each extension gets (gen_tree and mutate agree through this).
EXT_KIND = {
    ".py": "py", ".pyi": "py", ".js": "js", ".ts": "js", ".mjs": "js", ".jsx": "js",
    ".c": "c", ".h": "c", ".cc": "c", ".cpp": "c", ".hpp": "c", ".go": "go", ".rs": "rs",
    ".java": "java", ".kt": "java", ".sh": "sh", ".bash": "sh", "": "txt",
    ".md": "md", ".rst": "md", ".tex": "md", ".txt": "txt", ".cfg": "conf", ".ini": "conf",
    ".toml": "conf", ".yaml": "conf", ".yml": "conf", ".conf": "conf", ".lock": "conf",
    ".json": "json", ".map": "json", ".ipynb": "json", ".csv": "csv", ".tsv": "csv",
    ".log": "log", ".html": "html", ".xml": "html", ".svg": "html", ".css": "html",
    ".o": "binary", ".so": "binary", ".a": "binary", ".pyc": "binary", ".class": "binary",
    ".bin": "binary", ".idx": "binary", ".db": "binary", ".sqlite": "binary",
    ".wasm": "binary", ".node": "binary", ".exe": "binary", ".dll": "binary",
    ".gz": "compressed", ".tgz": "compressed", ".zip": "compressed", ".whl": "compressed",
    ".jar": "compressed", ".png": "compressed", ".jpg": "compressed", ".jpeg": "compressed",
    ".gif": "compressed", ".webp": "compressed", ".pdf": "compressed", ".docx": "compressed",
    ".xlsx": "compressed", ".odt": "compressed", ".pack": "compressed", ".xz": "compressed",
    ".bz2": "compressed", ".zst": "compressed", ".woff2": "compressed", ".deb": "compressed",
    ".mp4": "media", ".mkv": "media", ".mov": "media", ".flac": "media", ".mp3": "media",
    ".ogg": "media", ".iso": "media", ".webm": "media",
}

HEADERS = {
    ".gz": b"\x1f\x8b\x08\x00", ".tgz": b"\x1f\x8b\x08\x00", ".zip": b"PK\x03\x04\x14\x00",
    ".whl": b"PK\x03\x04\x14\x00", ".jar": b"PK\x03\x04\x0a\x00", ".docx": b"PK\x03\x04\x14\x00",
    ".xlsx": b"PK\x03\x04\x14\x00", ".odt": b"PK\x03\x04\x14\x00",
    ".png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", ".jpg": b"\xff\xd8\xff\xe0\x00\x10JFIF\x00",
    ".jpeg": b"\xff\xd8\xff\xe1\x00\x18Exif\x00\x00", ".gif": b"GIF89a",
    ".webp": b"RIFF\x00\x00WEBP",
    ".pdf": b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n", ".pack": b"PACK\x00\x00\x00\x02",
    ".xz": b"\xfd7zXZ\x00",
    ".bz2": b"BZh91AY&SY", ".zst": b"\x28\xb5\x2f\xfd", ".woff2": b"wOF2\x00\x01\x00\x00",
    ".deb": b"!<arch>\ndebian-binary   ", ".mp4": b"\x00\x00\x00\x20ftypisom\x00\x00\x02\x00",
    ".mov": b"\x00\x00\x00\x14ftypqt  ", ".mkv": b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01",
    ".webm": b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01", ".flac": b"fLaC\x00\x00\x00\x22",
    ".mp3": b"ID3\x04\x00\x00\x00\x00\x00\x00", ".ogg": b"OggS\x00\x02", ".iso": b"\x00" * 16,
    ".o": b"\x7fELF\x02\x01\x01\x00", ".so": b"\x7fELF\x02\x01\x01\x00",
    ".node": b"\x7fELF\x02\x01\x01\x00", ".a": b"!<arch>\n",
    ".pyc": b"\xa7\x0d\x0d\x0a\x00\x00\x00\x00",
    ".class": b"\xca\xfe\xba\xbe\x00\x00\x00\x41", ".wasm": b"\x00asm\x01\x00\x00\x00",
    ".exe": b"MZ\x90\x00\x03\x00\x00\x00", ".dll": b"MZ\x90\x00\x03\x00\x00\x00",
    ".sqlite": b"SQLite format 3\x00", ".db": b"SQLite format 3\x00",
}

FUNCTION_WORDS = (
    "the of and to a in is that for it as with was on be by this are from or an at which not "
    "but have can all has its we one more will if their when been may also other into than "
    "these they each only some such used new two time first after over between most then use "
    "any so where both data file value system set number should does while must each per "
    "would could under same through our very how what our make see like just").split()
SYLLABLES = ("ka ro mi te lu an er in on st tr pr ch sh th ing ed al ex co de re un pa "
             "ti ve sa lo ne ma ri fo ba go hu pe ze qu ly ar or ur ic ent ion ast").split()
KEYWORDS = ("get set add load save read write parse build make init close open run start "
            "stop send recv update delete find check apply merge split join sync flush").split()


class Vocabulary:
    """Words (Zipf-weighted), identifiers and type names, all from the seed."""

    def __init__(self, rng: random.Random, size: int = 3000):
        words = set()
        while len(words) < size:
            words.add("".join(rng.choices(SYLLABLES, k=rng.choice((1, 2, 2, 3, 3, 4)))))
        content = sorted(words)
        rng.shuffle(content)
        self.words = FUNCTION_WORDS + content
        weights = [1.0 / (rank + 1) ** 1.15 for rank in range(len(self.words))]
        total, acc = sum(weights), 0.0
        self.cum = []
        for w in weights:
            acc += w / total
            self.cum.append(acc)
        self.content = content

    def sentence(self, rng: random.Random, lo: int = 6, hi: int = 18) -> str:
        words = rng.choices(self.words, cum_weights=self.cum, k=rng.randint(lo, hi))
        return " ".join(words).capitalize() + rng.choice(".....?!:")

    def ident(self, rng: random.Random) -> str:
        parts = rng.choices(self.content[:800], k=rng.choice((1, 2, 2, 3)))
        if rng.random() < 0.3:
            parts[0] = rng.choice(KEYWORDS)
        return "_".join(parts)

    def type_name(self, rng: random.Random) -> str:
        parts = rng.choices(self.content[:600], k=rng.choice((1, 2, 2, 3)))
        return "".join(p.capitalize() for p in parts)


# Code grammars: header lines, block openers, statements, block closer, comment prefix.
# Placeholders: {a} {b} {c} {d} local identifiers, {T} {U} types, {K} constant,
# {n} small number, {s} a few words, {w} a sentence.
CODE = {
    "py": dict(indent="    ", close=None, comment="# ",
               head=["import {a}", "from {a}.{b} import {c}, {d}", "from {T} import {U}",
                     '"""{w}"""', "import os", "import sys", "{K} = {n}"],
               open=["def {a}({b}, {c}={n}):", "class {T}({U}):", "def {a}(self, {b}):",
                     "if {a} is None:", "for {a} in {b}.{c}():", "with open({a}, \"rb\") as {b}:",
                     "try:", "except {T}Error as exc:", "while {a} < {K}:", "elif {a}:"],
               stmt=["{a} = {b}({c}, {n})", "{a} = self.{b}.{c}({d})", "return {a}",
                     "self.{a} = {a}", "raise {T}Error(\"{s}\")", "{a}.append({b}[{n}])",
                     "logger.debug(\"{s} %s\", {a})", "{a} += {n}", "return None", "pass",
                     "assert {a} == {b}, \"{s}\"", "{a}[{b}] = {c}.get({d}, {n})",
                     "yield {a}", "{a} = [{b} for {b} in {c} if {b}.{d}]", "continue"]),
    "js": dict(indent="  ", close="}", comment="// ",
               head=["import {{ {a}, {b} }} from './{c}';", "const {a} = require('{b}');",
                     "'use strict';", "export const {K} = {n};", "/** {w} */"],
               open=["function {a}({b}, {c}) {{", "export class {T} extends {U} {{",
                     "async {a}({b}) {{", "if ({a} === null) {{", "for (const {a} of {b}) {{",
                     "}} else {{", "try {{", "}} catch (err) {{", "const {a} = ({b}) => {{"],
               stmt=["const {a} = {b}.{c}({d});", "let {a} = await this.{b}({c});",
                     "return {a};", "this.{a} = {a};", "throw new {T}Error('{s}');",
                     "{a}.push({b}[{n}]);", "console.log('{s}', {a});", "{a} += {n};",
                     "return null;", "{a}[{b}] = {c} || {n};", "module.exports.{a} = {a};"]),
    "c": dict(indent="    ", close="}", comment="/* ",
              head=["#include <{a}.h>", "#include \"{b}.h\"", "#define {K} {n}",
                    "static int {a};", "/* {w} */", "typedef struct {a} {a}_t;"],
              open=["static int {a}(struct {b} *{c}, size_t {d}) {{", "if ({a} == NULL) {{",
                    "for (i = 0; i < {K}; i++) {{", "}} else {{", "while ({a}->{b}) {{",
                    "void {a}_{b}(const char *{c}) {{", "switch ({a}) {{"],
              stmt=["{a}->{b} = {c};", "return -{K};", "{a} = {b}({c}, {d}, {n});",
                    "memset({a}, 0, sizeof(*{a}));", "goto out;", "break;", "return 0;",
                    "fprintf(stderr, \"{s}: %d\\n\", {a});", "{a}[i] = {b}[i] + {n};",
                    "case {K}:", "free({a});", "int {a} = {n};"]),
    "go": dict(indent="\t", close="}", comment="// ",
               head=["package {a}", "import (", "\t\"{a}/{b}\"", ")", "// {w}", "const {K} = {n}"],
               open=["func ({a} *{T}) {U}({b} {c}) error {{",
                     "func {T}({a} []byte) ({U}, error) {{",
                     "if err != nil {{", "for _, {a} := range {b} {{", "}} else {{",
                     "type {T} struct {{", "switch {a} {{"],
               stmt=["{a}, err := {b}.{T}({c})", "return nil, err", "return {a}",
                     "{a}.{b} = {c}", "log.Printf(\"{s}: %v\", {a})", "{a} = append({a}, {b})",
                     "defer {a}.Close()", "{T} {U}", "return fmt.Errorf(\"{s}: %w\", err)"]),
    "rs": dict(indent="    ", close="}", comment="// ",
               head=["use std::{a}::{T};", "use crate::{b}::{{{U}, {c}}};", "//! {w}",
                     "const {K}: usize = {n};", "#[derive(Debug, Clone)]"],
               open=["pub fn {a}(&self, {b}: &{T}) -> Result<{U}> {{", "impl {T} for {U} {{",
                     "if let Some({a}) = {b}.{c}() {{", "for {a} in {b}.iter() {{", "}} else {{",
                     "match {a} {{", "pub struct {T} {{"],
               stmt=["let {a} = {b}.{c}({d})?;", "return Ok({a});", "self.{a} = {a};",
                     "{a}.push({b});", "Err(e) => return Err(e.into()),", "{a}: {T},",
                     "debug!(\"{s} {{}}\", {a});", "let mut {a} = Vec::with_capacity({n});"]),
    "java": dict(indent="    ", close="}", comment="// ",
                 head=["package org.{a}.{b};", "import java.util.{T};", "import org.{a}.{U};",
                       "/** {w} */"],
                 open=["public class {T} extends {U} {{", "public {T} {a}({U} {b}) {{",
                       "if ({a} == null) {{", "for ({T} {a} : {b}) {{", "}} else {{", "try {{",
                       "}} catch ({T}Exception e) {{", "private void {a}() {{"],
                 stmt=["{T} {a} = new {U}({b}, {n});", "return {a};", "this.{a} = {a};",
                       "throw new {T}Exception(\"{s}\");", "{a}.add({b}.get({n}));",
                       "LOG.info(\"{s} {{}}\", {a});", "private final {T} {a};", "@Override"]),
    "sh": dict(indent="  ", close="fi", comment="# ",
               head=["#!/bin/sh", "set -eu", "{K}=\"${{{K}:-{n}}}\"", "# {w}"],
               open=["if [ -z \"${a}\" ]; then", "if [ -f \"${a}/{b}\" ]; then"],
               stmt=["{a}=\"$({b} --{c} {n})\"", "echo \"{s}: ${a}\"", "exit {n}",
                     "cp -r \"${a}\" \"${b}/{c}\"", "rm -f \"${a}\"", "{a} \"$@\""]),
}


def _fill(template: str, rng: random.Random, local: list, types: list, consts: list,
          vocab: Vocabulary) -> str:
    pick = rng.choice
    words = ""
    if "{s}" in template:
        words = " ".join(rng.choices(vocab.words, cum_weights=vocab.cum, k=rng.randint(2, 5)))
    return template.format(
        a=pick(local), b=pick(local), c=pick(local), d=pick(local), T=pick(types),
        U=pick(types), K=pick(consts), n=rng.choice((0, 1, 1, 2, 3, 4, 8, 16, 64, 255, 1024)),
        s=words, w=vocab.sentence(rng) if "{w}" in template else "")


def _code_group(rng: random.Random, vocab: Vocabulary, spec: dict, lines: int) -> list:
    local = [vocab.ident(rng) for _ in range(10)]
    types = [vocab.type_name(rng) for _ in range(4)]
    consts = [vocab.ident(rng).upper() for _ in range(3)]
    out = [_fill(t, rng, local, types, consts, vocab) + "\n"
           for t in rng.sample(spec["head"], min(len(spec["head"]), rng.randint(2, 5)))]
    out.append("\n")
    depth = 0
    while len(out) < lines:
        r = rng.random()
        ind = spec["indent"] * depth
        if r < 0.2 and depth < 4:
            line = _fill(rng.choice(spec["open"]), rng, local, types, consts, vocab)
            out.append(ind + line + "\n")
            depth += 1
        elif r < 0.32 and depth > 0:
            depth -= 1
            if spec["close"]:
                out.append(spec["indent"] * depth + spec["close"] + "\n")
            if depth == 0:
                out.append("\n")
        elif r < 0.38:
            out.append(ind + spec["comment"] + vocab.sentence(rng, 4, 12) + "\n")
        elif r < 0.41:
            out.append("\n")
        else:
            line = _fill(rng.choice(spec["stmt"]), rng, local, types, consts, vocab)
            out.append(ind + line + "\n")
    return out


def _prose_group(rng: random.Random, vocab: Vocabulary, markdown: bool, lines: int) -> list:
    topic = rng.sample(vocab.content[:1500], 12)
    out = []
    if markdown:
        out.append("# " + " ".join(rng.choices(topic, k=3)).title() + "\n\n")
    while len(out) < lines:
        r = rng.random()
        if markdown and r < 0.08:
            out.append("\n## " + " ".join(rng.choices(topic, k=rng.randint(1, 4))).title() + "\n\n")
        elif markdown and r < 0.2:
            out.append(rng.choice(("- ", "* ", "1. ")) + vocab.sentence(rng, 3, 10) + "\n")
        else:
            words = []
            for _ in range(rng.randint(2, 6)):
                sentence = vocab.sentence(rng).split(" ")
                for i in range(len(sentence)):
                    if rng.random() < 0.2:
                        sentence[i] = rng.choice(topic)
                words += sentence
            line, para = "", []
            for w in words:  # wrapped at 72 columns like an editor's fill
                if len(line) + len(w) > 72:
                    para.append(line.rstrip() + "\n")
                    line = ""
                line += w + " "
            para.append(line.rstrip() + "\n\n")
            out += para
    return out


def _data_group(rng: random.Random, vocab: Vocabulary, kind: str, lines: int) -> list:
    keys = [vocab.ident(rng) for _ in range(rng.randint(4, 9))]
    kinds = [rng.choice("isfbw") for _ in keys]
    names = [vocab.ident(rng) for _ in range(8)]

    def value(t, quote):
        if t == "i":
            return str(rng.randint(0, rng.choice((10, 1000, 100000))))
        if t == "f":
            return f"{rng.random() * 100:.{rng.choice((2, 3, 6))}f}"
        if t == "b":
            return rng.choice(("true", "false"))
        if t == "w":
            return quote + rng.choice(names) + quote
        words = rng.choices(vocab.words, cum_weights=vocab.cum, k=rng.randint(1, 4))
        return quote + " ".join(words) + quote
    out = []
    if kind == "csv":
        out.append(",".join(keys) + "\n")
        while len(out) < lines:
            out.append(",".join(value(t, "") for t in kinds) + "\n")
    elif kind == "json":
        out.append('{\n  "' + keys[0] + '": [\n')
        while len(out) < lines:
            out.append("    {" + ", ".join(f'"{k}": {value(t, chr(34))}'
                                           for k, t in zip(keys, kinds)) + "},\n")
    elif kind == "log":
        t = rng.randint(1_600_000_000, 1_780_000_000)
        while len(out) < lines:
            t += rng.choice((0, 0, 1, 1, 2, 5, 30))
            hh, mm, ss = t // 3600 % 24, t // 60 % 60, t % 60
            level = rng.choices(("INFO ", "DEBUG", "WARN ", "ERROR"), (60, 30, 8, 2))[0]
            out.append(f"2025-{t // 2592000 % 12 + 1:02d}-{t // 86400 % 28 + 1:02d} "
                       f"{hh:02d}:{mm:02d}:{ss:02d}.{rng.randrange(1000):03d} {level} "
                       f"[{rng.choice(names)}-{rng.randrange(8)}] {rng.choice(names)}: "
                       f"{vocab.sentence(rng, 3, 9)} "
                       f"{rng.choice(keys)}={value(rng.choice(kinds), '')}\n")
    elif kind == "conf":
        while len(out) < lines:
            if rng.random() < 0.12:
                out.append(f"\n[{rng.choice(names)}]\n")
            else:
                i = rng.randrange(len(keys))
                out.append(f"{keys[i]} = {value(kinds[i], chr(34))}\n")
    else:  # html / xml
        depth = 1
        out.append("<html>\n")
        while len(out) < lines:
            ind = "  " * depth
            if rng.random() < 0.2 and depth < 6:
                out.append(f'{ind}<div class="{rng.choice(names)} {rng.choice(names)}">\n')
                depth += 1
            elif rng.random() < 0.25 and depth > 1:
                depth -= 1
                out.append("  " * depth + "</div>\n")
            else:
                tag = rng.choice(("p", "span", "a", "li", "td"))
                key = rng.choice(keys)
                out.append(f'{ind}<{tag} id="{key}">{vocab.sentence(rng, 3, 12)}</{tag}>\n')
    return out


class LinePool:
    """Lines in groups of GROUP; a file takes runs from a window of groups.

    A file larger than SMALL would see the pool's own lines again (the pool is a few
    hundred kB): each run of it is then passed through one of a few dozen letter
    swaps, which keeps the run's structure and its character statistics but breaks
    matches with other copies of the same lines, as different real code would."""
    GROUP = 160
    SMALL = 128 << 10

    def __init__(self, lines: list, maps: list):
        self.lines = lines
        self.groups = len(lines) // self.GROUP
        self.maps = maps

    def text(self, rng: random.Random, size: int) -> bytes:
        lines, group = self.lines, self.GROUP
        start = rng.randrange(self.groups) * group
        window = max(2 * group, size // 20)  # ~40 bytes a line: a large file draws widely
        out = ["".join(lines[start:start + rng.randint(4, 12)])]
        total = len(out[0])
        limit = len(lines)
        swap = 1.0 - self.SMALL / size if size > self.SMALL else 0.0
        while total < size:
            first = (start + rng.randrange(window)) % limit
            run = "".join(lines[first:first + rng.randint(6, 40)])
            if swap and rng.random() < swap:
                run = run.translate(rng.choice(self.maps))
            out.append(run)
            total += len(run)
        return "".join(out).encode()[:size]


class Pools:
    """Everything file contents draw from: built once per tree seed (about 1 s)."""

    def __init__(self, seed: int, groups: int = 48):
        rng = random.Random(f"pools:{seed}")
        self.vocab = Vocabulary(rng)
        self.text = {}
        letters = "etaoinshrdlucmfwypvbgk"
        letter_maps = []
        for _ in range(63):
            a = rng.sample(letters, 6)
            letter_maps.append(str.maketrans(a[0] + a[1] + a[2] + a[3] + a[4] + a[5],
                                             a[1] + a[0] + a[3] + a[2] + a[5] + a[4]))
        for kind in TEXT_KINDS:
            lines = []
            for _ in range(groups):
                if kind in CODE:
                    lines += _code_group(rng, self.vocab, CODE[kind], LinePool.GROUP)
                elif kind in ("md", "txt"):
                    lines += _prose_group(rng, self.vocab, kind == "md", LinePool.GROUP)
                else:
                    lines += _data_group(rng, self.vocab, kind, LinePool.GROUP)
            self.text[kind] = LinePool(lines, letter_maps)
        self.code = self._machine_code(rng, 1 << 21)
        self.strings = "\0".join(self.vocab.ident(rng) for _ in range(40000)).encode()
        self.tables = self._tables(rng, 1 << 19)
        self.byte_maps = [bytes(rng.sample(range(256), 256)) for _ in range(63)]

    @staticmethod
    def _machine_code(rng: random.Random, size: int) -> bytes:
        """Instruction-like bytes: a few hundred opcodes, Zipf-used, some with random
        operands (about 1.5x with zstd, like compiled code)."""
        ops = [rng.randbytes(rng.choice((1, 2, 2, 3, 3, 4))) for _ in range(400)]
        weights = [1.0 / (i + 1) ** 1.2 for i in range(len(ops))]
        out, total = [], 0
        while total < size:
            chunk = rng.choices(ops, weights, k=4096)
            operands = rng.randbytes(4096 * 2)
            for i in range(0, 4096, 5):
                chunk[i] += operands[2 * i:2 * i + rng.choice((1, 1, 4))]
            block = b"".join(chunk)
            out.append(block)
            total += len(block)
        return b"".join(out)[:size]

    @staticmethod
    def _tables(rng: random.Random, size: int) -> bytes:
        """Relocation- or symbol-table-like records: growing offsets, small fields."""
        records, offset = [], 0
        for _ in range(size // 16):
            offset += rng.choice((4, 8, 8, 16, 24, 64))
            records.append(struct.pack("<QIHH", offset, rng.choice((1, 2, 2, 2, 10, 11)),
                                       rng.randrange(300), 0))
        return b"".join(records)

    def binary(self, rng: random.Random, size: int, ext: str) -> bytes:
        parts = [HEADERS.get(ext, b"\x7fELF\x02\x01\x01\x00"), bytes(56)]
        total = 64
        pools = ((self.code, 55), (None, 10), (self.strings, 15), (self.tables, 20))
        choices = [p for p, _ in pools]
        weights = [w for _, w in pools]
        while total < size:
            src = rng.choices(choices, weights)[0]
            n = min(int(rng.lognormvariate(7.3, 1.0)) + 16, size - total)
            if src is None:
                part = rng.randbytes(n)
            else:
                at = rng.randrange(max(1, len(src) - n))
                part = src[at:at + n]
                if size > 1 << 20:  # a large binary would meet its pools again
                    part = part.translate(rng.choice(self.byte_maps))
            parts.append(part)
            total += len(part)
        return b"".join(parts)[:size]


@functools.lru_cache(maxsize=2)
def pools_for(seed: int) -> Pools:
    """The pools of a seed, built once per process (mutating 30 days rebuilds nothing)."""
    return Pools(seed)


def opaque(rng: random.Random, size: int, ext: str) -> bytes:
    """An already-compressed file: a plausible header, then pseudo-random bytes."""
    head = HEADERS.get(ext, b"")[:size]
    return head + rng.randbytes(size - len(head))


def kind_of_ext(ext: str) -> str:
    return EXT_KIND.get(ext.lower(), "txt")


def content(pools: Pools, kind: str, ext: str, size: int, cseed: int) -> bytes:
    """The bytes of one file (media excepted: gen_tree streams those)."""
    if size <= 0:
        return b""
    rng = random.Random(cseed)
    if kind in pools.text:
        return pools.text[kind].text(rng, size)
    if kind == "binary":
        return pools.binary(rng, size, ext)
    return opaque(rng, size, ext)


def write_media(path: str, size: int, cseed: int, ext: str, chunk: int = 4 << 20) -> None:
    """A large incompressible file, written in chunks (never held whole)."""
    rng = random.Random(cseed)
    with open(path, "wb") as f:
        head = HEADERS.get(ext, b"")[:size]
        f.write(head)
        left = size - len(head)
        while left > 0:
            n = min(chunk, left)
            f.write(rng.randbytes(n))
            left -= n


def edit_text(pools: Pools, kind: str, data: bytes, rng: random.Random) -> bytes:
    """A day's edit of a text file: lines replaced, inserted or appended."""
    pool = pools.text.get(kind) or pools.text["txt"]
    size = len(data)
    r = rng.random()
    new = pool.text(rng, max(40, int(rng.lognormvariate(6.0, 1.0))))
    if r < 0.4 or size == 0:
        return data + new
    at = rng.randrange(size)
    if r < 0.7:
        return data[:at] + new + data[at:]
    end = min(size, at + len(new) + rng.randrange(-len(new) // 2, len(new)))
    return data[:at] + new + data[end:]
