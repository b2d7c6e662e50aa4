"""Import course first: it chooses the GPU or the CUDA simulator before numba.cuda is imported."""
import course  # noqa: F401
