"""meshsim.dash_app: the what-if app (``meshsim dash``) over the same ``predict`` the CLI uses.

Modules: ``what_if`` (validated control state), ``sweep`` (cached, budgeted calls into the simulator),
``measured`` (run folders to overlay), ``figures`` and ``report`` (pure builders), ``layout``, ``callbacks``
and ``app`` (the factory ``create_app`` and ``serve``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app, serve

__all__ = ["create_app", "serve"]


def __getattr__(name: str) -> Any:
    # Importing dash is slow; `meshsim --help` should not pay for it.
    if name in __all__:
        from . import app

        return getattr(app, name)
    raise AttributeError(name)
