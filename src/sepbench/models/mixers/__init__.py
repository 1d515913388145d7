"""One token mixer per module; importing this package registers them all."""
from sepbench.models.mixers import softmax, lstm  # noqa: F401
