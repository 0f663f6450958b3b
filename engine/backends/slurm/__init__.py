"""The Slurm backends: through Slurm's commands (`commands`, read by `parsing`) or through
pyslurm (`pyslurm/`), each with its watcher. What both share: running a command, transient
errors, the accounting check, the last word and the watchers' memory of each job
(`common`), job scripts (`jobs`), job arrays and waves (`arrays`), the token in every job's
comment (`tags`). The commands' watcher asks the controller alone where there is no
accounting (`no_accounting`)."""
