"""The base of dlscale's screens: Textual's Screen, whose `app` is known to be dlscale's (its
session, experiment and poll), for the type checker; nothing changes at run time."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.screen import Screen

if TYPE_CHECKING:
    from .app import DlscaleApp


class AppScreen(Screen):
    if TYPE_CHECKING:
        app: DlscaleApp  # type: ignore[assignment]
