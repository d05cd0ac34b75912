"""A real heterogeneous Slurm cluster on one host (slurmctld, slurmd per node, slurmdbd, MariaDB,
munge) for tests, demos and CI. Debian's packages; fake GPU device files."""
