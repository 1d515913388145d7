"""The architecture zoo: one backbone, one registered mixer per architecture."""
from sepbench.models.registry import MODELS
from sepbench.models import mixers  # noqa: F401  (registers every mixer)
from sepbench.models.backbone import SequenceModel, build_model

__all__ = ["MODELS", "SequenceModel", "build_model"]
