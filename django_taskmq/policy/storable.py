"""Making task text storable: what an error or traceback may hold before it reaches a text column.

Every engine refuses some strings: PostgreSQL refuses NUL in ``text``, and no UTF-8 column can hold
a lone surrogate (a file name decoded with ``surrogateescape``, say). One such string must not
undo the recording of other jobs, so the text is cleaned before it is written.
"""

from __future__ import annotations

ERROR_LIMIT = 4_000  # characters of an error line kept (its start: the exception and message)
TRACEBACK_LIMIT = 64_000  # characters of a traceback kept (its end: the frame that raised)
MARK = "[...]"


def storable(text: str) -> str:
    """Return ``text`` with NUL removed and unencodable characters escaped as ``\\udcxx``."""
    if not isinstance(text, str):
        text = str(text)
    text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def clip_head(text: str, limit: int = ERROR_LIMIT) -> str:
    """Return storable ``text`` cut to at most ``limit`` characters, keeping its start."""
    text = storable(text)
    if len(text) <= limit:
        return text
    if limit <= len(MARK):
        return text[:limit]
    return text[: limit - len(MARK)] + MARK


def clip_tail(text: str, limit: int = TRACEBACK_LIMIT) -> str:
    """Return storable ``text`` cut to at most ``limit`` characters, keeping its end."""
    text = storable(text)
    if len(text) <= limit:
        return text
    if limit <= len(MARK):
        return text[len(text) - limit:] if limit else ""
    return MARK + text[len(text) - (limit - len(MARK)):]
