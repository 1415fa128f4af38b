"""Tokenizer loading, chat templates, end-of-turn ids and byte-exact detokenization.

Loads a checkpoint's `tokenizer.json` + `tokenizer_config.json` offline through
`transformers.AutoTokenizer` (`local_files_only=True`). The chat template comes from the
checkpoint (ChatML for Qwen/SmolLM2, the LLaMA-3 header format for LLaMA), so any supported
checkpoint works unchanged; `chat_format="chatml"|"llama3"` overrides it (or supplies one when the
checkpoint has none).

Byte-exact text. For byte-level BPE tokenizers (GPT-2, Qwen, LLaMA-3, SmolLM2) every token is a
byte string and the decoded text of a sequence is exactly the concatenation of its tokens' bytes
(decoded as UTF-8). `token_bytes()` exposes that table; the sampler's stop-string matcher and
`decode` are built on it, so what the sampler matches is exactly what the text contains.
"""
from __future__ import annotations

import functools
import json
import os
from typing import Optional, Sequence, Union

Message = dict[str, str]
Prompt = Union[str, Sequence[Message], Sequence[int]]

# Fallback / override templates (the checkpoint's own template is used by default).
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}")
LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] +"
    " '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}")
TEMPLATES = {"chatml": CHATML_TEMPLATE, "llama3": LLAMA3_TEMPLATE}

# Tokens that end an assistant turn in the supported families, when present in the vocab.
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>",
                      "<|end_of_text|>", "</s>")


def _bytes_to_unicode() -> dict[int, str]:
  """GPT-2's reversible byte -> printable unicode map used by byte-level BPE vocabularies."""
  bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1)))
  cs = bs[:]
  n = 0
  for b in range(256):
    if b not in bs:
      bs.append(b)
      cs.append(256 + n)
      n += 1
  return dict(zip(bs, map(chr, cs)))


_BYTE_DECODER = {c: b for b, c in _bytes_to_unicode().items()}


class Tokenizer:
  """A checkpoint's tokenizer plus what the sampler and rollout need from it."""

  def __init__(self, hf_tokenizer, chat_format: str = "auto"):
    self.hf = hf_tokenizer
    if chat_format != "auto":
      if chat_format not in TEMPLATES:
        raise ValueError(f"chat_format {chat_format!r} unknown; use auto, {', '.join(TEMPLATES)}")
      self.hf.chat_template = TEMPLATES[chat_format]
    self.vocab_size = len(self.hf)  # base vocab + added tokens
    self._special_ids = frozenset(
        [i for i, t in self.hf.added_tokens_decoder.items() if t.special]
        + list(self.hf.all_special_ids))
    self.eos_ids: tuple[int, ...] = self._end_of_turn_ids()
    self.pad_id: int = (self.hf.pad_token_id if self.hf.pad_token_id is not None
                        else self.eos_ids[0] if self.eos_ids else 0)

  @classmethod
  def from_dir(cls, path: str, chat_format: str = "auto") -> "Tokenizer":
    """Loads `path/tokenizer.json` (+ tokenizer_config.json) offline."""
    if not os.path.exists(os.path.join(path, "tokenizer.json")):
      raise FileNotFoundError(
          f"{path!r} has no tokenizer.json; pass the checkpoint directory that holds the "
          "tokenizer (for a GGUF file, the directory exported by models.checkpoint)")
    from transformers import AutoTokenizer
    return cls(AutoTokenizer.from_pretrained(path, local_files_only=True), chat_format)

  # -- ids -----------------------------------------------------------------------------------
  def _end_of_turn_ids(self) -> tuple[int, ...]:
    ids = []
    if self.hf.eos_token_id is not None:
      ids.append(self.hf.eos_token_id)
    vocab = self.hf.get_vocab()
    for t in END_OF_TURN_TOKENS:
      if t in vocab and vocab[t] not in ids:
        ids.append(vocab[t])
    return tuple(ids)

  def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
    return list(self.hf.encode(text, add_special_tokens=add_special_tokens))

  def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = False) -> list[list[int]]:
    """`encode` of each text, in one tokenizer call (a fast tokenizer encodes them in parallel)."""
    if not texts:
      return []
    ids = self.hf(list(texts), add_special_tokens=add_special_tokens)["input_ids"]
    return [list(x) for x in ids]

  def chat_text(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> str:
    if not self.hf.chat_template:
      raise ValueError("this tokenizer has no chat template: add `chat_template` to "
                       "tokenizer_config.json, pass chat_format='chatml'|'llama3', or use raw "
                       "prompts")
    return self.hf.apply_chat_template(list(messages), tokenize=False,
                                       add_generation_prompt=add_generation_prompt)

  def apply_chat_template(self, messages: Sequence[Message],
                          add_generation_prompt: bool = True) -> list[int]:
    """Token ids of the templated conversation (the template already holds any BOS)."""
    return self.encode(self.chat_text(messages, add_generation_prompt))

  def prompt_ids(self, prompt: Prompt) -> list[int]:
    """A raw string (tokenized as `tokenizer(text)` does, BOS included where the family adds
    one), a chat message list (templated, generation prompt added) or ready token ids."""
    if isinstance(prompt, str):
      return self.encode(prompt, add_special_tokens=True)
    prompt = list(prompt)
    if prompt and isinstance(prompt[0], dict):
      return self.apply_chat_template(prompt)
    if all(isinstance(t, int) for t in prompt):
      return [int(t) for t in prompt]
    raise TypeError("a prompt is a string, a list of {'role','content'} messages, or token ids")

  # -- bytes and text ------------------------------------------------------------------------
  @functools.cached_property
  def is_byte_level(self) -> bool:
    spec = json.loads(self.hf.backend_tokenizer.to_str())
    dec = spec.get("decoder") or {}
    kinds = [dec.get("type")] + [d.get("type") for d in dec.get("decoders", []) or []]
    return "ByteLevel" in kinds

  @functools.cached_property
  def token_bytes(self) -> list[bytes]:
    """bytes of every token id (length `vocab_size`); exact for byte-level BPE."""
    added = {i: t.content for i, t in self.hf.added_tokens_decoder.items()}
    pieces = self.hf.convert_ids_to_tokens(list(range(self.vocab_size)))
    out = []
    for i, piece in enumerate(pieces):
      if i in added:
        out.append(added[i].encode("utf-8"))
      elif piece is None:
        out.append(b"")
      elif self.is_byte_level:
        out.append(bytes(_BYTE_DECODER[c] for c in piece))
      else:  # sentencepiece-style pieces: '▁' is a space, <0xNN> a raw byte
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
          out.append(bytes([int(piece[3:5], 16)]))
        else:
          out.append(piece.replace("\u2581", " ").encode("utf-8"))
    return out

  def ids_to_bytes(self, ids: Sequence[int], skip_special: bool = False) -> bytes:
    """Concatenated token bytes; ids past the tokenizer's vocab (a model's padded embedding
    rows) have no text."""
    tb, n = self.token_bytes, self.vocab_size
    return b"".join(tb[i] for i in ids
                    if i < n and not (skip_special and i in self._special_ids))

  def decode(self, ids: Sequence[int], skip_special: bool = False) -> str:
    """Text of `ids`: the UTF-8 decoding of their concatenated bytes."""
    return self.ids_to_bytes(ids, skip_special).decode("utf-8", errors="replace")


class IncrementalDecoder:
  """Streams text from token ids, holding back bytes of an incomplete UTF-8 character."""

  def __init__(self, tokenizer: Tokenizer):
    self._tok = tokenizer
    self._buf = b""

  def push(self, ids: Sequence[int]) -> str:
    self._buf += self._tok.ids_to_bytes(ids)
    cut = _complete_utf8_prefix(self._buf)
    out, self._buf = self._buf[:cut], self._buf[cut:]
    return out.decode("utf-8", errors="replace")

  def flush(self) -> str:
    out, self._buf = self._buf, b""
    return out.decode("utf-8", errors="replace")


def _complete_utf8_prefix(b: bytes) -> int:
  """Length of the longest prefix of `b` that does not end inside a UTF-8 character."""
  for back in range(1, min(4, len(b)) + 1):
    c = b[-back]
    if c & 0xC0 == 0x80:
      continue  # continuation byte, keep looking for the lead byte
    need = 1 if c < 0x80 else 2 if c >> 5 == 6 else 3 if c >> 4 == 14 else 4 if c >> 3 == 30 else 1
    return len(b) if need <= back else len(b) - back
  return len(b)


def load_tokenizer(path: str, chat_format: str = "auto") -> Tokenizer:
  return Tokenizer.from_dir(path, chat_format)
