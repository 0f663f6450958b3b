"""The local backend: this machine as a one-node cluster (`backend`), its worker that runs
queued jobs one at a time (`worker`), and the processes of a job, signalled only when proven
to be its own (`processes`)."""
