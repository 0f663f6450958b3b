"""The study that declares mlp_width.py (a user's own script, read through its log) as a
framework of its own: one home for check_rates.py's `mlp` kinds and the check's tests."""

from pathlib import Path

SCRIPT = Path(__file__).with_name("mlp_width.py")

_SPEC = """[experiment]
name = "{name}"
frameworks = ["mlp"]
models = ["mlp4"]
datasets = ["random"]
scales = ["1x1"]
per_device_batch = [{batch}]
repetitions = 1

[training]
steps = {steps}
warmup_steps = {warmup_steps}

[frameworks.mlp]
script = "{script}"
command = ["{{python}}", "{{script}}", "--width", "{width}", "--steps", "{{steps}}",
    "--warmup-steps", "{{warmup_steps}}", "--batch", "{{per_device_batch}}",
    "--log-every", "{log_every}"]
unit = "samples"

[frameworks.mlp.log]
throughput = 'samples/s ([0-9.]+)$'
step = '^[a-z]+ (\\d+) '
warmup_lines = {warmup_lines}
"""


def spec_text(
    name: str, width: int, steps: int, warmup_steps: int, batch: int = 64, log_every: int = 10
) -> str:
    """The spec of one experiment of the MLP at this hidden width. The script logs every
    `log_every` steps: its warm-up's lines (whole intervals of it) are not timed."""
    return _SPEC.format(
        name=name,
        width=width,
        steps=steps,
        warmup_steps=warmup_steps,
        batch=batch,
        log_every=log_every,
        warmup_lines=max(1, warmup_steps // log_every),
        script=SCRIPT,
    )
