"""What dispatch remembers between calls, and who else must forget when it forgets.

Loaded tables, the choice per request and the registers per compiled configuration are
kept so a repeated call costs a dict lookup. Writing a table makes them stale, and with them
anything built on a choice (the API's plans): such a cache registers `on_clear(fn)`, and
`clear_cache()` calls it. Dispatch never reaches up into its callers.
"""

from __future__ import annotations

from typing import Callable

tables: dict = {}  # gpu name -> table.Table | None
choices: dict = {}  # request key -> request.Choice
registers: dict = {}  # (rung, config, arch) -> registers per thread | None
_hooks: list[Callable[[], None]] = []


def on_clear(fn: Callable[[], None]) -> None:
    """Call `fn` whenever dispatch's caches are cleared (a table was written, say)."""
    if fn not in _hooks:
        _hooks.append(fn)


def clear_cache() -> None:
    """Forget loaded tables and cached choices, and tell everyone registered."""
    tables.clear()
    choices.clear()
    registers.clear()
    for fn in _hooks:
        fn()
