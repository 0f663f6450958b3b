"""The Slurm backends: through Slurm's commands (`commands`, read by `parsing`) or through
pyslurm (`pyslurm/`); what both share: running a command, transient errors, the last word,
the accounting check (`common`), job scripts (`jobs`), job arrays and waves (`arrays`), the
token in every job's comment (`tags`), following a site without accounting
(`no_accounting`)."""
