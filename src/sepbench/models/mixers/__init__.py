"""One token mixer per module; importing this package registers them all."""
from sepbench.models.mixers import softmax, sparse, linear, retnet, lstm, dss, mamba  # noqa: F401
