"""NVIDIA MPS support: prolog/epilog rendering and the pynvml GPU probe."""
