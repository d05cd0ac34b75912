"""slurm-hase: hardware-aware, fair GPU scheduling for Slurm."""

__version__ = "0.1.0"
