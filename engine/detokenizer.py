"""Token ids -> text, one token at a time, safe to stream.

Two things are held back until they resolve:
- bytes of a UTF-8 character split across tokens (the decoder shows them as
  U+FFFD until the character is complete);
- a tail of text that could be the start of a stop string.
The concatenation of every emitted piece plus `finish()` equals the final text.
"""

from __future__ import annotations

from vigil.engine.tokenizer import Tokenizer

_REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Tokenizer, stop: tuple[str, ...] = ()) -> None:
        self._tokenizer = tokenizer
        self._stop = tuple(s for s in stop if s)
        self._ids: list[int] = []
        self._prefix_offset = 0  # decode window start: gives the tokenizer context
        self._read_offset = 0  # ids before this are already part of `text`
        self.text = ""  # decoded text so far, complete characters only
        self._emitted = 0  # characters of `text` handed out
        self.stopped = False

    def push(self, token_id: int) -> str:
        """Add one token; return the new text that is safe to show (maybe '')."""
        assert not self.stopped, "push after a stop string matched"
        self._ids.append(token_id)
        prefix = self._tokenizer.decode(self._ids[self._prefix_offset : self._read_offset])
        full = self._tokenizer.decode(self._ids[self._prefix_offset :])
        if len(full) > len(prefix) and not full.endswith(_REPLACEMENT):
            old_len = len(self.text)
            self.text += full[len(prefix) :]
            self._prefix_offset = self._read_offset
            self._read_offset = len(self._ids)
            if self._match_stop(old_len):
                return self._take(len(self.text))
        return self._take(len(self.text) - self._stop_holdback())

    def finish(self) -> str:
        """Release everything held back (the sequence ended for another reason)."""
        if not self.stopped and self._read_offset < len(self._ids):
            prefix = self._tokenizer.decode(self._ids[self._prefix_offset : self._read_offset])
            full = self._tokenizer.decode(self._ids[self._prefix_offset :])
            self.text += full[len(prefix) :]
            self._read_offset = len(self._ids)
        return self._take(len(self.text))

    def _take(self, end: int) -> str:
        piece = self.text[self._emitted : end] if end > self._emitted else ""
        self._emitted = max(self._emitted, end)
        return piece

    def _match_stop(self, old_len: int) -> bool:
        """Cut `text` at the earliest stop string that the new text completes."""
        best: int | None = None
        for s in self._stop:
            idx = self.text.find(s, max(0, old_len - len(s) + 1))
            if idx != -1 and (best is None or idx < best):
                best = idx
        if best is None:
            return False
        self.text = self.text[:best]
        self.stopped = True
        return True

    def _stop_holdback(self) -> int:
        """Length of the longest tail of `text` that begins some stop string."""
        longest = 0
        for s in self._stop:
            for n in range(min(len(s) - 1, len(self.text)), longest, -1):
                if self.text.endswith(s[:n]):
                    longest = n
                    break
        return longest
