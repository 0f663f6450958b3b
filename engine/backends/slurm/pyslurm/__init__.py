"""Slurm through pyslurm (Slurm's C API): the backend (`backend`) and its watcher
(`watcher`), sharing one `api.Controller`; pyslurm's job records read (`records`); whether
pyslurm works here (`probe`); a job script's #SBATCH lines as its job description
(`submit`)."""
