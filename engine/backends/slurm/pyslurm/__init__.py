"""Slurm through pyslurm (Slurm's C API): the backend (`backend`), whether pyslurm works
here (`probe`), a job script's #SBATCH lines as its job description (`submit`)."""
