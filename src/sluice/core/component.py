"""The lifecycle every long-lived component shares: ``start()``/``stop()`` and ``async with``."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Self


class AsyncComponent:
    """Subclasses define ``start()`` (returning self) and a ``stop()`` safe to call twice."""

    async def start(self) -> Any:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


class Component:
    """The same for blocking components (private servers, displays): ``with`` starts and
    stops them."""

    def start(self) -> Any:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
