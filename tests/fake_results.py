"""The sentinel's result pipe, stood in for in tests that drive a sentinel without a monitor."""

from __future__ import annotations


class FakeResults:
    """The result pipe: what the sentinel put on it (it always takes everything at once)."""

    writer = -1
    pending = 0

    def __init__(self) -> None:
        self.items: list = []

    def put(self, obj) -> None:
        self.items.append(obj)

    def flush(self) -> bool:
        return True

    def drain(self, timeout: float) -> bool:
        return True

    def close(self) -> None:
        self.items.append("closed")
