"""A spec's `[options.FRAMEWORK]` tables: one model per framework with knobs of its own,
built from the frameworks table (frameworks.py) so a new option needs no change here;
unknown frameworks and keys are reported with what is allowed, at their line."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field, StrictBool, StrictInt, StrictStr, create_model

from .frameworks import FRAMEWORKS, Option
from .tomlfile import StrictModel


def _option_type(opt: Option) -> Any:
    if isinstance(opt.default, bool):
        return StrictBool
    if isinstance(opt.default, str):

        def one_of(value: str) -> str:
            if value not in opt.allowed:
                raise ValueError(f"allowed: {', '.join(map(str, opt.allowed))}")
            return value

        return Annotated[StrictStr, AfterValidator(one_of)]

    def allowed(value: int) -> int:
        if opt.allowed and value not in opt.allowed:
            raise ValueError(f"allowed: {', '.join(map(str, opt.allowed))}")
        return value

    # StrictInt first: a Literal[0, 1, 2] would take `true` as 1.
    return Annotated[StrictInt, AfterValidator(allowed)]


Options: Any = create_model(
    "Options",
    __base__=StrictModel,
    **{  # type: ignore[call-overload]
        fw.name: (
            create_model(
                f"Options_{fw.name}",
                __base__=StrictModel,
                **{  # type: ignore[call-overload]
                    opt.name: (_option_type(opt), Field(default=opt.default, description=opt.help))
                    for opt in fw.options
                },
            ),
            Field(default=None),
        )
        for fw in FRAMEWORKS.values()
        if fw.options
    },
)
