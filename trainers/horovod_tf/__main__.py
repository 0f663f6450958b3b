from ..common.entry import leave
from .train import main

leave(main())
