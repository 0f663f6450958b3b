"""Placeholder for the Textual app (issue 4)."""
import sys


def main() -> None:
    print("dlscale-tui: the terminal app arrives with issue 4; use the `dlscale` CLI meanwhile.",
          file=sys.stderr)
    sys.exit(1)
