"""The CLI's two consoles: results on stdout, progress and problems on stderr."""
from __future__ import annotations

import sys

from rich.console import Console

# Piped output (CI logs, `| less`) gets room for the wide tables instead of rich's 80 columns.
out = Console(highlight=False, markup=False, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False, markup=False, width=None if sys.stderr.isatty() else 160)
