"""An example sepbench plugin: a sliding-window attention mixer and a lag lookup task."""
