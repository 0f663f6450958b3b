from ..common.lifeline import die_with_parent

die_with_parent()  # first: a rank whose launcher dies while the framework imports ends too

from ..common.entry import leave  # noqa: E402
from .train import main  # noqa: E402

leave(main())
