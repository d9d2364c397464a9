"""The elements of a file holding one JSON array, read in chunks: memory holds one element
(at most `LIMITS.max_document_bytes`, a larger one is skipped and reported) and one chunk,
whatever the file's size. Strings are matched whole before any bracket or comma is counted, so
the brackets and commas inside them never split an element."""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from typing import IO

BOM = "\ufeff"
_CHUNK = 1 << 20
# A string (group 1 is its closing quote: missing when the text read so far ends inside it),
# or a bracket or comma outside any string.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*(")?|[\[\]{},]', re.DOTALL)
NOT_AN_ARRAY = "not a JSON array of documents: the file does not start with ["
NOT_CLOSED = "the array is not closed: the file ends inside it (the elements before are kept)"


def too_large(limit: int) -> str:
    return (
        f"this element is over {limit:,} characters (max_document_bytes, raise it with "
        "ITLR_MAX_DOCUMENT_BYTES): split it or drop fields"
    )


class ArrayElements:
    """(line, element text, None) per element of the array, or (line, None, reason) for one
    that cannot be read."""

    def __init__(self, handle: IO[bytes], limit: int) -> None:
        self._handle = handle
        self._limit = limit
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
        self._buffer = ""
        self._line = 1  # the line of _buffer[0]
        self._started = False
        self.eof = False

    def _more(self) -> None:
        chunk = self._handle.read(_CHUNK)
        text = self._decoder.decode(chunk, final=not chunk)
        if not self._started:
            text = text.removeprefix(BOM)
            self._started = bool(text)
        self._buffer += text
        self.eof = not chunk

    def _drop(self, upto: int) -> None:
        self._line += self._buffer.count("\n", 0, upto)
        self._buffer = self._buffer[upto:]

    def _line_at(self, index: int) -> int:
        return self._line + self._buffer.count("\n", 0, index)

    def __iter__(self) -> Iterator[tuple[int, str | None, str | None]]:
        while not self._buffer.strip() and not self.eof:
            self._more()
        lead = len(self._buffer) - len(self._buffer.lstrip())
        if self._buffer[lead : lead + 1] != "[":
            yield self._line_at(lead), None, NOT_AN_ARRAY
            return
        self._drop(lead + 1)
        yield from self._elements()

    def _elements(self) -> Iterator[tuple[int, str | None, str | None]]:
        depth, start, position = 1, 0, 0
        skipped: int | None = None  # the line of an element too large to keep
        while True:
            match = _TOKEN.search(self._buffer, position)
            if match is None or (match.group().startswith('"') and match.group(1) is None):
                if self.eof:
                    if skipped is not None:
                        yield skipped, None, too_large(self._limit)
                    elif rest := self._buffer[start:].strip():
                        yield self._line_at(self._buffer.index(rest[0], start)), None, NOT_CLOSED
                    else:
                        yield self._line, None, NOT_CLOSED
                    return
                resume = match.start() if match is not None else len(self._buffer)
                keep = resume if skipped is not None else start
                self._drop(keep)
                start, position = start - keep, resume - keep
                self._more()
                continue
            token, position = match.group(), match.end()
            if token in "[{":
                depth += 1
            elif depth > 1 and token in "]}":
                depth -= 1
            if depth == 1 and token in ",]":
                if skipped is not None:
                    yield skipped, None, too_large(self._limit)
                    skipped = None
                else:
                    element = self._buffer[start : match.start()]
                    if element.strip():
                        lead = len(element) - len(element.lstrip())
                        yield self._line_at(start + lead), element, None
                if token == "]":
                    return
                start = position
            elif skipped is None and position - start > self._limit:
                element = self._buffer[start:position]
                skipped = self._line_at(start + len(element) - len(element.lstrip()))
