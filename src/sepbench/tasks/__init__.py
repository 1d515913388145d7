"""The task suite. Importing this package registers every task in ``TASKS``."""
from sepbench.tasks.base import TASKS, Batch, Task
from sepbench.tasks import dyck, equality, lookup, recall  # noqa: F401  (register every task)
from sepbench.tasks import cot  # noqa: F401  (registers arithmetic, edit_distance, ed_local, lis)

__all__ = ["TASKS", "Batch", "Task", "build_task"]


def build_task(name: str, length: int, options: dict | None = None) -> Task:
    """Instantiate a registered task at size N = ``length``."""
    return TASKS.get(name)(length, options)
