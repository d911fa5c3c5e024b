"""Custom GPU specs of the api, kept in memory from one watch of the meta bucket.

Listing configs, resolving a trace's source GPU or a run's configs reads the custom specs on
every request; :class:`SpecIndex` answers from a :class:`cascade.platform.bus.KVMirror` of
``gpus.>`` instead of scanning the bucket (one JetStream consumer per scan). A name it does not
know is looked up again after :meth:`SpecIndex.fresh` (one stream-info request), so a spec
stored through another api replica a moment ago is found.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from cascade.gpus import GPUSpec
from cascade.platform import subjects
from cascade.platform.bus import Bus, KVMirror
from cascade.platform.specstore import CUSTOM_SPEC_PATTERN, custom_specs_from


class SpecIndex:
    """The stored custom specs, by id, as the meta bucket holds them."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self._mirror: KVMirror[dict[str, Any]] | None = None
        self._built: tuple[int, dict[str, GPUSpec]] = (-1, {})

    async def start(self) -> None:
        """Start the watch; returns once the stored specs are in."""
        self._mirror = KVMirror(await self.bus.kv(subjects.KV_META), dict, CUSTOM_SPEC_PATTERN)
        await self._mirror.start()

    async def stop(self) -> None:
        """Stop the watch (idempotent)."""
        if self._mirror is not None:
            await self._mirror.stop()

    def specs(self) -> dict[str, GPUSpec]:
        """Custom specs by id (parsed once per change)."""
        if self._mirror is None:
            return {}
        version = self._mirror.version
        if self._built[0] != version:
            self._built = (version, custom_specs_from(self._mirror.values()))
        return dict(self._built[1])

    async def fresh(self) -> dict[str, GPUSpec]:
        """Custom specs by id once every spec stored before this call is in."""
        if self._mirror is not None:
            await self._mirror.sync()
        return self.specs()


SPEC_INDEX = web.AppKey("spec_index", SpecIndex)


def spec_index(app: web.Application) -> SpecIndex:
    """The app's custom-spec index (see :func:`install`)."""
    return app[SPEC_INDEX]


def install(app: web.Application) -> SpecIndex:
    """Create the app's custom-spec index once (idempotent; from a route module's sync
    ``setup``); it starts with the app and stops at cleanup."""
    from services.api.appkeys import BUS, install_running

    return install_running(app, SPEC_INDEX, lambda: SpecIndex(app[BUS]))
