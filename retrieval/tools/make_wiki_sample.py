"""Makes the embedded default corpus `retrieval/data/wiki_sample.jsonl.gz` (wiki-18 layout).

Source: the English Wikipedia sample that gensim ships as test data
(`gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2`).
gensim is not a dependency: fetch its wheel once and point this script at it (or at the .bz2):

  pip download gensim --no-deps -d /tmp/g
  python retrieval/tools/make_wiki_sample.py --source /tmp/g/gensim-*.whl

Pipeline (plain Python, deterministic): stream the XML dump; keep main-namespace articles that are
not redirects or disambiguation pages; turn wikitext into plain text (drop comments, refs,
templates, tables, files, categories, math; links -> their text; headings -> section breaks;
drop reference-like sections); split each article into passages of about 100 words on sentence
boundaries. Each output line is `{"id": "<n>", "contents": "\\"Title\\"\\ntext"}`.
"""
from __future__ import annotations

import argparse
import bz2
import gzip
import html
import io
import json
import os
import re
import sys
import xml.etree.ElementTree as ET
import zipfile
from typing import Iterator

MEMBER = ("gensim/test/test_data/"
          "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
DEFAULT_OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "data", "wiki_sample.jsonl.gz")
SKIP_SECTIONS = {
    "references", "external links", "see also", "further reading", "notes", "bibliography",
    "sources", "footnotes", "citations", "notes and references", "references and notes",
    "works cited", "primary sources", "secondary sources", "general references", "gallery",
    "discography", "filmography", "selected works", "works", "publications", "bibliography notes",
}
DROP_TAGS = ("ref", "math", "gallery", "timeline", "syntaxhighlight", "source", "score", "imagemap",
             "chem", "ce", "hiero")
TARGET_WORDS = 100


# --------------------------------------------------------------------------------------------
# Reading the dump
# --------------------------------------------------------------------------------------------
def open_source(path: str) -> io.BufferedIOBase:
  """The decompressed XML stream, from the .bz2 or from the gensim wheel that holds it."""
  if path.endswith(".whl") or path.endswith(".zip"):
    return bz2.open(io.BytesIO(zipfile.ZipFile(path).read(MEMBER)))
  return bz2.open(path)


def iter_pages(stream) -> Iterator[tuple[str, int, bool, str]]:
  """Yields (title, namespace, is_redirect, wikitext) for each <page>."""
  for _, elem in ET.iterparse(stream, events=("end",)):
    if elem.tag.rsplit("}", 1)[-1] != "page":
      continue
    get = lambda name: elem.find(f".//{{*}}{name}")
    text_el = get("text")
    yield (get("title").text or "", int(get("ns").text or 0), get("redirect") is not None,
           (text_el.text or "") if text_el is not None else "")
    elem.clear()


# --------------------------------------------------------------------------------------------
# Wikitext -> plain text
# --------------------------------------------------------------------------------------------
def strip_nested(text: str, open_: str, close: str, keep=None) -> str:
  """Removes balanced `open_ ... close` spans (nesting allowed); `keep(inner)` may return a
  replacement string for an outermost span."""
  out, depth, start, i = [], 0, 0, 0
  while i < len(text):
    if text.startswith(open_, i):
      if depth == 0:
        out.append(text[start:i])
        start = i
      depth += 1
      i += len(open_)
    elif depth and text.startswith(close, i):
      depth -= 1
      i += len(close)
      if depth == 0:
        inner = text[start + len(open_):i - len(close)]
        out.append(keep(inner) if keep else "")
        start = i
    else:
      i += 1
  if depth == 0:
    out.append(text[start:])
  return "".join(out)


def template_text(inner: str) -> str:
  """A few templates carry running text; all others are dropped."""
  parts = [p.strip() for p in inner.split("|")]
  name = parts[0].lower().replace("_", " ")
  args = [p for p in parts[1:] if "=" not in p]
  if name in ("convert", "cvt") and len(args) >= 2:
    unit = args[1] if not re.fullmatch(r"[-\d.,]+", args[1]) else args[2] if len(args) > 2 else ""
    value = args[0] if unit == args[1] else f"{args[0]}–{args[2]}"
    return f"{value} {unit}".strip()
  if name.startswith("lang-") and args:
    return args[-1]
  if name in ("lang", "transl") and len(args) >= 2:
    return args[-1]
  if name in ("nowrap", "nobr", "small", "sc", "smallcaps", "em", "nobold", "noitalic") and args:
    return args[0]
  if name in ("ndash", "snd"):
    return " – "
  if name == "mdash":
    return " — "
  if name in ("circa", "c.") and args:
    return f"c. {args[0]}"
  if name in ("as of",) and args:
    return "As of " + " ".join(args)
  if name in ("frac",) and args:
    return "/".join(args)
  return ""


def link_text(inner: str) -> str:
  """[[target|label]] -> label; files, categories and interlanguage links -> nothing."""
  target, _, label = inner.partition("|")
  prefix = target.split(":", 1)[0].strip().lower() if ":" in target else ""
  if prefix in ("file", "image", "category", "media") or re.fullmatch(r"[a-z]{2,3}(-[a-z]+)?",
                                                                     prefix):
    return ""
  text = label if label else target
  return text.split("#", 1)[0] if not label and "#" in text and text[0] != "#" else text


def wikitext_to_sections(wikitext: str) -> list[tuple[str, str]]:
  """Returns [(heading, plain text)], the lead section first with heading ''."""
  t = re.sub(r"<!--.*?-->", "", wikitext, flags=re.S)
  for tag in DROP_TAGS:
    t = re.sub(rf"<{tag}\b[^>]*/>", "", t, flags=re.I)
    t = re.sub(rf"<{tag}\b[^>]*>.*?</{tag}\s*>", "", t, flags=re.I | re.S)
  t = strip_nested(t, "{|", "|}")
  t = strip_nested(t, "{{", "}}", keep=template_text)
  t = strip_nested(t, "[[", "]]", keep=link_text)
  t = re.sub(r"\[(?:https?:)?//[^\s\]]+\s+([^\]]*)\]", r"\1", t)   # [http://x label] -> label
  t = re.sub(r"\[(?:https?:)?//[^\]]*\]", "", t)
  t = re.sub(r"<[^>]+>", "", t)                                     # leftover html tags
  t = html.unescape(t).replace("\u00a0", " ")
  t = re.sub(r"'{2,}", "", t)                                        # bold / italic
  sections, heading, lines = [], "", []
  for line in t.split("\n"):
    m = re.fullmatch(r"\s*(={2,6})\s*(.*?)\s*\1\s*", line)
    if m:
      sections.append((heading, "\n".join(lines)))
      heading, lines = m.group(2), []
    else:
      lines.append(line)
  sections.append((heading, "\n".join(lines)))
  return [(h, clean_block(b)) for h, b in sections if not is_reference_section(h)]


def is_reference_section(heading: str) -> bool:
  """Sections that are lists of sources, not prose."""
  h = heading.strip().lower()
  return h in SKIP_SECTIONS or bool(re.search(
      r"bibliograph|reference|further reading|external link|\bbooks\b|editions|biographies|"
      r"\bworks\b|\bsources\b|literature$", h))


def clean_block(block: str) -> str:
  """Paragraphs of one section -> one clean string (list items become sentences)."""
  paras = []
  for line in block.split("\n"):
    line = line.strip()
    if not line or line.startswith(("|", "!", "{", "}", "__")) or line.lower().startswith(
        ("thumb", "category:")):
      continue
    is_item = line[0] in "*#:;"
    if len(line.split()) < 80 and re.search(
        r"ISBN|\bonline\.|\bpp?\. \d|University Press|\beds?\.$|^[A-Z][a-z]+, [A-Z][a-z.]+.*\(\d{4}\)", line):
      continue    # a citation in a list
    line = re.sub(r"^[*#:;]+\s*", "", line)
    line = re.sub(r"\s+", " ", line)
    line = re.sub(r"\(\s*[,;]?\s*\)", "", line)          # "( )" left by dropped templates
    line = re.sub(r"\s+([,.;:!?)])", r"\1", line).replace("( ", "(").strip()
    if len(line.split()) < 3:
      continue
    if is_item and line[-1] not in ".!?":
      line += "."
    paras.append(line)
  return " ".join(paras)


# --------------------------------------------------------------------------------------------
# Passages
# --------------------------------------------------------------------------------------------
_SENT = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))(?<!\b[A-Z]\.)(?<!\b(?:Mr|Dr|St|Jr|Sr|vs)\.)"
                   r"\s+(?=[\"'(\[]?[A-Z0-9])")


def split_passages(text: str, target: int = TARGET_WORDS) -> list[str]:
  """Packs sentences into passages of about `target` words (never more than 1.5x target)."""
  sents = []
  for s in _SENT.split(text):
    w = s.split()
    while len(w) > int(1.5 * target):   # a run-on "sentence" (lists): cut by words
      sents.append(" ".join(w[:target]))
      w = w[target:]
    if w:
      sents.append(" ".join(w))
  out, cur = [], []
  for s in sents:
    n_cur = sum(len(x.split()) for x in cur)
    if cur and n_cur + len(s.split()) > target * 1.2 and n_cur >= target * 0.6:
      out.append(" ".join(cur))
      cur = []
    cur.append(s)
  if cur:
    if out and sum(len(x.split()) for x in cur) < target * 0.3:
      out[-1] += " " + " ".join(cur)
    else:
      out.append(" ".join(cur))
  return out


def article_passages(title: str, wikitext: str) -> list[str]:
  body = " ".join(text for _, text in wikitext_to_sections(wikitext) if text)
  return [f'"{title}"\n{p}' for p in split_passages(body)]


def keep_page(title: str, ns: int, redirect: bool, wikitext: str) -> bool:
  low = wikitext.lower()
  disambig = "{{disambig" in low or "{{dab" in low or "(disambiguation)" in title.lower()
  return ns == 0 and not redirect and not low.lstrip().startswith("#redirect") and not disambig


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--source", required=True, help="the gensim wheel, or the .bz2 dump itself")
  ap.add_argument("--out", default=DEFAULT_OUT)
  args = ap.parse_args(argv)
  n, n_articles = 0, 0
  with gzip.GzipFile(args.out, "wb", mtime=0) as raw, io.TextIOWrapper(raw, "utf-8") as f:
    for title, ns, redirect, wikitext in iter_pages(open_source(args.source)):
      if not keep_page(title, ns, redirect, wikitext):
        continue
      passages = article_passages(title, wikitext)
      n_articles += bool(passages)
      for contents in passages:
        f.write(json.dumps({"id": str(n), "contents": contents}, ensure_ascii=False) + "\n")
        n += 1
  print(f"wrote {n} passages from {n_articles} articles to {args.out}", file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(main())
