import sys

from ..common.lifeline import die_with_parent

die_with_parent()  # first: a rank whose launcher dies while the framework imports ends too

from .train import main  # noqa: E402

sys.exit(main())
