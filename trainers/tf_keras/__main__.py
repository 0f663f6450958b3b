from ..common.lifeline import die_with_parent

die_with_parent()  # first: a rank whose launcher dies while the framework imports ends too

from ..common.entry import leave  # noqa: E402
from .train import main  # noqa: E402

# os._exit with the run's status: a rank that failed (its gRPC server could not start) was
# seen to stay alive in TensorFlow's exit handlers, and its peer waited at a collective
# until the test's limit; its launcher stops the others only once it has ended
leave(main())
